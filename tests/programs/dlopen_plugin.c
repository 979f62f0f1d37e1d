/* What dlopen_loop loads. */
int dlopen_plugin_answer(void) { return 42; }
