// llama_graph_dump: runs a model with llama.cpp's own eval callback and prints every
// computed graph node as one JSON line — an account of what llama.cpp executed that is
// independent of profinfer's probes. For MUL_MAT_ID nodes it adds the expert ids the
// router chose (src[2], i32 [n_expert_used, n_tokens]).
//
//   llama_graph_dump MODEL PROMPT N_PREDICT [THREADS] [--page-out-model | --no-callback | --idle-ms MS]
// Output lines: {"call":K,"name":...,"op":...,"src":[...],"ne":[...],"ids":[[...],...]}
// where call K is the K-th llama_decode (0 = the prompt).
// --no-callback: no eval callback, so llama.cpp computes each call's graph whole, as it
// does for users (the callback makes it compute node by node); prints {"call":K} after
// each call instead.
// --idle-ms MS: as --no-callback, after sleeping MS ms with the model loaded and the
// context made (a server between requests): what a recording costs while nothing runs.
// SIGUSR1: stop after the call under way and exit 0 (a long decode the caller ends cleanly).
// --page-out-model: prints the model pages resident (mincore) after the page-out and at
// the end on stderr. After loading, reclaim the model file's pages (MADV_PAGEOUT), as
// memory pressure would, without read-ahead, so that the operators fault the weights back
// in from disk page by page.
#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int g_call = 0;

void print_json_string(const char* s) {
    std::putchar('"');
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\') std::putchar('\\');
        if (static_cast<unsigned char>(*s) >= 0x20) std::putchar(*s);
    }
    std::putchar('"');
}

bool on_node(ggml_tensor* t, bool ask, void*) {
    if (ask) return true;  // we want to see every node
    std::printf("{\"call\":%d,\"name\":", g_call);
    print_json_string(t->name);
    std::printf(",\"op\":");
    print_json_string(ggml_op_desc(t));
    std::printf(",\"src\":[");
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; ++i) {
        if (i) std::putchar(',');
        print_json_string(t->src[i]->name);
    }
    std::printf("],\"ne\":[%lld,%lld,%lld,%lld]", (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                (long long)t->ne[3]);
    if (t->op == GGML_OP_MUL_MAT_ID && t->src[2] && t->src[2]->type == GGML_TYPE_I32) {
        const ggml_tensor* ids = t->src[2];
        // ids is usually a strided view of the router's argsort: copy its whole span.
        std::vector<int32_t> buf((ggml_nbytes(ids) + sizeof(int32_t) - 1) / sizeof(int32_t));
        ggml_backend_tensor_get(ids, buf.data(), 0, ggml_nbytes(ids));
        std::printf(",\"ids\":[");
        for (int64_t tok = 0; tok < ids->ne[1]; ++tok) {
            std::printf(tok ? ",[" : "[");
            for (int64_t k = 0; k < ids->ne[0]; ++k)
                std::printf(k ? ",%d" : "%d", buf[tok * (ids->nb[1] / sizeof(int32_t)) + k]);
            std::putchar(']');
        }
        std::putchar(']');
    }
    std::printf("}\n");
    return true;
}

// The mappings of PATH in this process.
std::vector<std::pair<unsigned long, unsigned long>> mappings_of(const char* path) {
    std::vector<std::pair<unsigned long, unsigned long>> out;
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        if (line.size() < std::strlen(path) || line.compare(line.size() - std::strlen(path), std::string::npos, path) != 0)
            continue;
        unsigned long lo, hi;
        if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) out.emplace_back(lo, hi);
    }
    return out;
}

// Pages of PATH's mappings in memory now (mincore): what the test compares major faults
// with, instead of a count seen on one machine.
size_t resident_pages(const char* path) {
    const long page = sysconf(_SC_PAGESIZE);
    size_t n = 0;
    for (auto [lo, hi] : mappings_of(path)) {
        std::vector<unsigned char> v((hi - lo + page - 1) / page);
        if (mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()) == 0)
            for (unsigned char c : v) n += c & 1;
    }
    return n;
}

// Reclaims every mapping of PATH in this process; returns the bytes advised.
size_t page_out(const char* path) {
    // Dirty pages (a model written moments ago) cannot be reclaimed: write them back first.
    if (FILE* f = std::fopen(path, "r")) {
        fdatasync(fileno(f));
        std::fclose(f);
    }
    size_t total = 0;
    for (auto [lo, hi] : mappings_of(path)) {
        // MADV_RANDOM: no read-ahead, so every page an operator touches faults on its own.
        if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT) == 0 &&
            madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_RANDOM) == 0)
            total += hi - lo;
    }
    // Pages no longer mapped can now leave the page cache too.
    if (FILE* f = std::fopen(path, "r")) {
        posix_fadvise(fileno(f), 0, 0, POSIX_FADV_DONTNEED);
        std::fclose(f);
    }
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL PROMPT N_PREDICT [THREADS]\n", argv[0]);
        return 2;
    }
    const std::string prompt = argv[2];
    const int n_predict = std::atoi(argv[3]);
    const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
    const bool page_out_model = argc > 5 && std::strcmp(argv[5], "--page-out-model") == 0;
    const int idle_ms = argc > 6 && std::strcmp(argv[5], "--idle-ms") == 0 ? std::atoi(argv[6]) : 0;
    const bool callback = !(argc > 5 && std::strcmp(argv[5], "--no-callback") == 0) && idle_ms == 0;
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
#ifdef GGML_BACKEND_DIR
    ggml_backend_load_all_from_path(GGML_BACKEND_DIR);
#else
    ggml_backend_load_all();
#endif
    llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return std::fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    int n = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), nullptr, 0, true, true);
    std::vector<llama_token> tokens(n);
    llama_tokenize(vocab, prompt.c_str(), prompt.size(), tokens.data(), n, true, true);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + n_predict;
    cp.n_batch = n;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (callback) cp.cb_eval = on_node;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return std::fprintf(stderr, "cannot create a context\n"), 1;
    llama_sampler* smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(smpl, llama_sampler_init_greedy());

    char real[4096] = {};
    size_t resident_after_page_out = 0;
    if (page_out_model) {
        if (!realpath(argv[1], real) || page_out(real) == 0) return std::fprintf(stderr, "cannot page out %s\n", argv[1]), 1;
        resident_after_page_out = resident_pages(real);
    }
    if (idle_ms > 0) usleep(useconds_t(idle_ms) * 1000);
    llama_batch batch = llama_batch_get_one(tokens.data(), n);
    llama_token next;
    static volatile sig_atomic_t stop = 0;
    signal(SIGUSR1, [](int) { stop = 1; });
    // GRAPH_DUMP_STOP_AFTER=K: the program stops itself (SIGSTOP) once call K has returned
    // and been printed, a moment at which the test knows exactly how many calls were made.
    const char* stop_after = std::getenv("GRAPH_DUMP_STOP_AFTER");
    const int stop_at = stop_after ? std::atoi(stop_after) : -1;
    for (g_call = 0; g_call < n_predict && !stop; ++g_call) {
        if (llama_decode(ctx, batch)) return std::fprintf(stderr, "llama_decode failed\n"), 1;
        if (!callback) std::printf("{\"call\":%d}\n", g_call), std::fflush(stdout);
        if (g_call == stop_at) raise(SIGSTOP);
        next = llama_sampler_sample(smpl, ctx, -1);
        batch = llama_batch_get_one(&next, 1);
    }
    std::fflush(stdout);
    if (page_out_model)
        std::fprintf(stderr, "model pages resident: %zu after page-out, %zu at the end\n", resident_after_page_out,
                     resident_pages(real));
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
