// evalcb_peer: llama.cpp's own, intrusive way to time operators — the peers of paper
// Table 7 that live inside the inference program — measured on the same decode workload
// as llama-bench's tg test (one warm-up token, cache cleared, then N single-token decode
// calls from an empty context).
//
//   evalcb_peer MODEL --mode none|callback|dump-dot [--threads T] [--tokens N] [--nodes-csv F]
//   evalcb_peer MODEL --mode none --stream [--threads T] [--tokens N]
//   --no-mmap: the weights read into memory, as llama-bench -mmp 0 (warm calls: a mapped
//   model pages in, and out again where the kernel reclaims idle file pages)
//
//   none      plain decode: the baseline of the two others, and the program profinfer
//             records when per-operator times are compared (no change to llama.cpp's path).
//   callback  a ggml_backend_sched_eval_callback that asks for every node and timestamps it
//             (CLOCK_MONOTONIC before the node is computed and when the scheduler hands it
//             back): what a user of llama.cpp's API can do without a tracer. The scheduler
//             then computes each node as a graph of its own.
//   dump-dot  after the decode calls, the graph of one decode call is rebuilt from the
//             nodes the scheduler showed (a callback that asks for none, so the call runs
//             whole) and written with ggml_graph_dump_dot; its cost is printed against
//             the mean decode call.
//
// stdout: one JSON line {"mode":…,"tokens":N,"decode_tps":…,"decode_ms_mean":…,…}.
// --nodes-csv (callback): call,index,name,op,start_ns,end_ns for every node of every call.
//
// --stream (mode none): the same tg workload repeated until SIGTERM or SIGINT — N tokens
// from an empty context, the context cleared, N again, as llama-bench's repetitions — with
// one line per decode call on stdout as it ends: "CALL START_NS END_NS" (CLOCK_MONOTONIC,
// taken around llama_decode in this process). A long-running target whose speed an
// observer outside can measure over any window without tracing it
// (experiments/peers/attach_peer.py attaches a recorder for some windows and not others).
// --ready FILE --go FILE (with --stream): once the model is loaded and warmed up, FILE (ready)
// is created and the stream waits until the go FILE exists, so that an observer starts two
// targets' decoding at the same moment however long each took to load (duet_peer.py).
// --load-ready FILE --load-go FILE (with --stream): the same gate before the model is loaded
// (the backends loaded, nothing of the model read yet), so that an observer starts two
// targets' model loads at the same moment however long each took to start (duet_peer.py
// --load gated: a command profinfer launched starts later than one started directly).
#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long long now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct NodeTime {
    int call;
    int index;
    const ggml_tensor* t;
    std::string name;
    long long start_ns, end_ns;
};

struct Peer {
    enum Mode { None, Callback, DumpDot } mode = None;
    int call = 0;
    int index = 0;
    long long asked_ns = 0;
    bool collect = false;  // dump-dot: the decode call whose nodes are kept
    std::vector<NodeTime> nodes;
    std::vector<ggml_tensor*> graph_nodes;
};

bool on_node(ggml_tensor* t, bool ask, void* user) {
    Peer& p = *static_cast<Peer*>(user);
    if (p.mode == Peer::DumpDot) {
        if (ask && p.collect) p.graph_nodes.push_back(t);
        return false;  // need nothing: the scheduler computes the split whole
    }
    if (ask) {
        p.asked_ns = now_ns();
        return true;
    }
    p.nodes.push_back({p.call, p.index++, t, t->name, p.asked_ns, now_ns()});
    return true;
}

[[noreturn]] void usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s MODEL --mode none|callback|dump-dot [--threads T] [--tokens N] [--nodes-csv FILE] "
                 "[--dot FILE] [--no-mmap] [--stream [--ready FILE --go FILE] [--load-ready FILE --load-go FILE]]\n",
                 argv0);
    std::exit(2);
}

struct Options {
    const char* model = nullptr;
    int threads = 2, n_gen = 48;
    std::string nodes_csv, dot = "/dev/null", ready, go, load_ready, load_go;
    bool stream = false;
    bool mmap = true;  // --no-mmap: the weights read into memory (llama-bench -mmp 0)
};

Options parse_options(int argc, char** argv, Peer& peer) {
    if (argc < 2) usage(argv[0]);
    Options o;
    o.model = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(argv[0]);
            return argv[++i];
        };
        if (a == "--mode") {
            const std::string m = value();
            if (m == "none") peer.mode = Peer::None;
            else if (m == "callback") peer.mode = Peer::Callback;
            else if (m == "dump-dot") peer.mode = Peer::DumpDot;
            else usage(argv[0]);
        } else if (a == "--threads") o.threads = std::atoi(value().c_str());
        else if (a == "--tokens") o.n_gen = std::atoi(value().c_str());
        else if (a == "--nodes-csv") o.nodes_csv = value();
        else if (a == "--dot") o.dot = value();
        else if (a == "--stream") o.stream = true;
        else if (a == "--ready") o.ready = value();
        else if (a == "--go") o.go = value();
        else if (a == "--load-ready") o.load_ready = value();
        else if (a == "--load-go") o.load_go = value();
        else if (a == "--no-mmap") o.mmap = false;
        else usage(argv[0]);
    }
    if (o.threads < 1 || o.n_gen < 1 || (o.stream && peer.mode != Peer::None) || o.ready.empty() != o.go.empty() ||
        (!o.ready.empty() && !o.stream) || o.load_ready.empty() != o.load_go.empty() || (!o.load_ready.empty() && !o.stream))
        usage(argv[0]);
    return o;
}

// The model and a context for N decode calls, with the callback when the mode asks for one.
struct Target {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    int n_vocab = 0;
    ~Target() {
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
    }

    // One random token decoded (as llama-bench's tg test: no sampling is timed); its ns.
    long long decode_one() {
        llama_token tok = std::rand() % n_vocab;
        llama_batch batch = llama_batch_get_one(&tok, 1);
        const long long t0 = now_ns();
        if (llama_decode(ctx, batch)) {
            std::fprintf(stderr, "evalcb_peer: llama_decode failed\n");
            std::exit(1);
        }
        llama_synchronize(ctx);
        return now_ns() - t0;
    }
    void clear() { llama_memory_clear(llama_get_memory(ctx), true); }
};

volatile sig_atomic_t stop = 0;

// A gate: READY created, then wait until GO exists (or a signal asked to stop); false if
// READY cannot be created.
bool wait_at_gate(const std::string& ready, const std::string& go) {
    std::FILE* f = std::fopen(ready.c_str(), "w");
    if (!f) return std::fprintf(stderr, "evalcb_peer: cannot create %s\n", ready.c_str()), false;
    std::fclose(f);
    const timespec ms{0, 1000000};
    while (!stop && access(go.c_str(), F_OK) != 0) nanosleep(&ms, nullptr);
    return true;
}

bool load(Target& t, const Options& o, Peer& peer) {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    ggml_backend_load_all();
    if (!o.load_ready.empty() && !wait_at_gate(o.load_ready, o.load_go)) return false;
    llama_model_params mp = llama_model_default_params();
    if (!o.mmap) mp.load_mode = LLAMA_LOAD_MODE_NONE;  // read in, not mapped (llama-bench -mmp 0)
    t.model = llama_model_load_from_file(o.model, mp);
    if (!t.model) return std::fprintf(stderr, "evalcb_peer: cannot load %s\n", o.model), false;
    t.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(t.model));

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = o.n_gen + 16;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = o.threads;
    if (peer.mode != Peer::None) {
        cp.cb_eval = on_node;
        cp.cb_eval_user_data = &peer;
    }
    t.ctx = llama_init_from_model(t.model, cp);
    if (!t.ctx) return std::fprintf(stderr, "evalcb_peer: cannot create a context\n"), false;
    return true;
}

// --stream: N tokens, the context cleared, N again, until a signal; one line per call.
int run_stream(Target& t, const Options& o) {
    signal(SIGTERM, [](int) { stop = 1; });
    signal(SIGINT, [](int) { stop = 1; });
    if (!o.ready.empty() && !wait_at_gate(o.ready, o.go)) return 1;
    long long calls = 0;
    while (!stop) {
        for (int i = 0; i < o.n_gen && !stop; ++i, ++calls) {
            const long long t0 = now_ns();
            t.decode_one();
            std::printf("%lld %lld %lld\n", calls, t0, now_ns());
            std::fflush(stdout);
        }
        t.clear();
    }
    return 0;
}

bool write_nodes_csv(const Peer& peer, const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return std::fprintf(stderr, "evalcb_peer: cannot write %s\n", path.c_str()), false;
    std::fprintf(f, "call,index,name,op,start_ns,end_ns\n");
    for (const NodeTime& n : peer.nodes)
        std::fprintf(f, "%d,%d,%s,%s,%lld,%lld\n", n.call, n.index, n.name.c_str(), ggml_op_desc(n.t), n.start_ns,
                     n.end_ns);
    std::fclose(f);
    return true;
}

// The scheduler's graph of one decode call, rebuilt from its nodes (their sources are
// reached by ggml_build_forward_expand), then written as llama.cpp's own dump would.
void dump_dot(const Peer& peer, const std::string& dot, double mean_ms) {
    const size_t size = 4 * peer.graph_nodes.size() + 64;
    ggml_init_params ip = {ggml_graph_overhead_custom(size, false) + ggml_tensor_overhead(), nullptr, true};
    ggml_context* gctx = ggml_init(ip);
    ggml_cgraph* g = ggml_new_graph_custom(gctx, size, false);
    for (ggml_tensor* t : peer.graph_nodes) ggml_build_forward_expand(g, t);
    const long long t0 = now_ns();
    ggml_graph_dump_dot(g, nullptr, dot.c_str());
    const double dump_ms = (now_ns() - t0) / 1e6;
    std::printf(",\"graph_nodes\":%d,\"dump_dot_ms\":%.4f,\"dump_dot_pct_of_decode\":%.3f", ggml_graph_n_nodes(g),
                dump_ms, 100.0 * dump_ms / mean_ms);
    ggml_free(gctx);
}

// N decode calls timed; the JSON line, with the mode's own output.
int run_timed(Target& t, const Options& o, Peer& peer) {
    long long total_ns = 0;
    for (peer.call = 0; peer.call < o.n_gen; ++peer.call) {
        peer.index = 0;
        peer.collect = peer.call == o.n_gen / 2;
        total_ns += t.decode_one();
    }
    const double mean_ms = total_ns / 1e6 / o.n_gen;
    std::printf("{\"mode\":\"%s\",\"tokens\":%d,\"threads\":%d,\"decode_tps\":%.4f,\"decode_ms_mean\":%.4f",
                peer.mode == Peer::None ? "none" : peer.mode == Peer::Callback ? "callback" : "dump-dot", o.n_gen,
                o.threads, o.n_gen / (total_ns / 1e9), mean_ms);
    if (peer.mode == Peer::Callback) {
        std::printf(",\"nodes\":%zu", peer.nodes.size());
        if (!o.nodes_csv.empty() && !write_nodes_csv(peer, o.nodes_csv)) return 1;
    }
    if (peer.mode == Peer::DumpDot) dump_dot(peer, o.dot, mean_ms);
    std::printf("}\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Peer peer;
    const Options o = parse_options(argc, argv, peer);
    Target t;
    if (!load(t, o, peer)) return 1;
    std::srand(1);
    t.decode_one();  // warm-up, as llama-bench
    t.clear();
    peer.nodes.clear();
    return o.stream ? run_stream(t, o) : run_timed(t, o, peer);
}
