/* Stands in for a libllama built without visible symbols (stripped, hidden visibility):
 * it is named libllama.so but exports no llama_decode. */
int llama_something_else(int x) { return x + 1; }
