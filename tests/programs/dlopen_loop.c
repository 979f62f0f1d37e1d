/* Loads and unloads a library N times: two loader stops of the recorder per round. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: dlopen_loop LIBRARY ROUNDS\n");
        return 2;
    }
    const int rounds = atoi(argv[2]);
    for (int i = 0; i < rounds; ++i) {
        void* h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        dlclose(h);
    }
    printf("%d rounds\n", rounds);
    return 0;
}
