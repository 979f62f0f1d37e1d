#include <unistd.h>
int llama_something_else(int x);
int main(void) {
    usleep(200000);
    return llama_something_else(-1);
}
