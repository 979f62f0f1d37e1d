// ggml_kernel_roof: the rate of llama.cpp's own decode MatMul kernel on this machine, per weight
// type and thread count — the roof a decode step's weight MatMuls meet, where bench-machine's
// synthetic roofs (triad, a vector unit's peak) say only what the hardware could do.
//
// Built against the pinned llama.cpp (like llama-bench), it times ggml's MUL_MAT of a weight by
// one f32 column (N = 1: a decode token) on ggml's CPU backend with its own threadpool, the
// weights placed as llama.cpp places them (in the CPU device's extra buffer type, e.g. repacked
// q4_0, where it takes the op: llama_model_loader's rule), one node after another in a graph as
// in a decode step:
//   cache:  one weight of ~512 KiB per thread, the same tensor in every node (in cache): the
//           kernel's arithmetic rate, G operations/s (a multiply-add counting 2);
//   stream: distinct weights totalling 256 MiB (128 with --quick) per size class of a decode
//           step's weights — large (K 2048 × M 8192 and 8192 × 2048: stream_gbs), mid
//           (2048 × 2048: stream_mid_gbs), small (2048 × 256: stream_small_gbs) — the kernel
//           streaming weights from memory, GB/s of weight bytes.
// In cache: the best of 5 trials (what the kernel can do). Streamed: the median of 5 trials,
// taken in turn with the other thread counts' on the same allocation —
// what a decode meets, sharing the memory with whatever else runs (a best-of read a
// memory-bandwidth hog on the other CPU as absent: stress-ng's stream phases leave moments of
// full bandwidth, and the decode beside it ran 12-20 % slower) — and of 3 allocations of the
// weights (1 with --quick): on a VM it moves with where the allocation lands (16.1-19.4 GB/s
// between single allocations on one machine), and a decode run meets one allocation of its
// own; the lowest and highest allocation are printed too (stream_gbs_lo, stream_gbs_hi).
// One JSON object per (type, threads) on stdout.
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
    std::vector<std::string> types = {"q4_0", "q8_0", "f16"};
    std::vector<int> threads = {1};
    bool quick = false;
};

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

ggml_type type_named(const std::string& name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char* n = ggml_type_name(ggml_type(t));
        if (n && name == n) return ggml_type(t);
    }
    std::fprintf(stderr, "ggml_kernel_roof: unknown weight type %s\n", name.c_str());
    std::exit(2);
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Cpu {
    ggml_backend_t backend = nullptr;
    ggml_backend_dev_t dev = nullptr;
    ggml_backend_set_n_threads_t set_threads = nullptr;
    std::vector<ggml_backend_buffer_type_t> extra;  // the device's extra buffer types (repack …)

    Cpu() {
        backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
        if (!backend) {
            std::fprintf(stderr, "ggml_kernel_roof: ggml has no CPU backend\n");
            std::exit(1);
        }
        dev = ggml_backend_get_device(backend);
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
        set_threads = (ggml_backend_set_n_threads_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
        using get_extra_t = ggml_backend_buffer_type_t* (*)(ggml_backend_dev_t);
        if (auto get = (get_extra_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"))
            for (auto* b = get(dev); b && *b; ++b) extra.push_back(*b);
    }
    ~Cpu() { ggml_backend_free(backend); }

    // The buffer type llama.cpp would load a K × M weight of TYPE into for a MatMul by an f32
    // column: the first extra type whose device takes the op, else the CPU's own.
    ggml_backend_buffer_type_t weight_buft(ggml_type type, int64_t k, int64_t m, std::string& name) {
        ggml_init_params p = {4 * ggml_tensor_overhead(), nullptr, true};
        ggml_context* ctx = ggml_init(p);
        ggml_tensor* w = ggml_new_tensor_2d(ctx, type, k, m);
        ggml_tensor* x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, k);
        ggml_tensor* y = ggml_mul_mat(ctx, w, x);
        ggml_backend_buffer_type_t chosen = ggml_backend_dev_buffer_type(dev);
        for (auto* b : extra) {
            ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(b, 0);
            w->buffer = probe;
            const bool ok = ggml_backend_dev_supports_op(dev, y);
            w->buffer = nullptr;
            ggml_backend_buffer_free(probe);
            if (ok) {
                chosen = b;
                break;
            }
        }
        ggml_free(ctx);
        name = ggml_backend_buft_name(chosen);
        return chosen;
    }
};

// A graph of NODES MatMuls y_i = W_{i mod |W|} · x, the weights of SHAPES (K, M) cycled, in one
// allocation; timed at each of THREADS in turn, trial after trial (5 trials of at least MIN_S
// each per thread count, interleaved: a disturbed moment of a shared machine falls on every
// thread count alike, not on one), its time per run at each — the BEST trial or the median —
// with the bytes and operations of a run.
struct Timed {
    std::vector<double> s;  // per thread count
    double weight_bytes = 0, ops = 0;
    std::string buft;
};

Timed time_graph(Cpu& cpu, ggml_type type, const std::vector<std::pair<int64_t, int64_t>>& shapes, int n_weights, int nodes,
                 const std::vector<int>& threads, double min_s, bool best) {
    ggml_init_params p = {size_t(2 * n_weights + 2 * nodes + 16) * ggml_tensor_overhead() + ggml_graph_overhead_custom(size_t(4 * nodes + 16), false),
                          nullptr, true};
    ggml_context* wctx = ggml_init(p);
    ggml_context* gctx = ggml_init(p);
    Timed t;
    std::vector<ggml_tensor*> w;
    for (int i = 0; i < n_weights; ++i) {
        const auto [k, m] = shapes[size_t(i) % shapes.size()];
        w.push_back(ggml_new_tensor_2d(wctx, type, k, m));
    }
    const auto [k0, m0] = shapes[0];
    ggml_backend_buffer_type_t buft = cpu.weight_buft(type, k0, m0, t.buft);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
    if (!wbuf) {
        std::fprintf(stderr, "ggml_kernel_roof: cannot allocate the weights\n");
        std::exit(1);
    }
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    // Values ~N(0, 0.02), quantised by ggml itself (the time does not depend on them, but a
    // scale that is NaN or denormal might).
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0, 0.02f);
    for (ggml_tensor* wi : w) {
        const int64_t k = wi->ne[0], m = wi->ne[1];
        std::vector<float> rows(size_t(k) * 16);
        for (auto& v : rows) v = nd(rng);
        std::vector<char> q(ggml_row_size(type, k) * 16);
        ggml_quantize_chunk(type, rows.data(), q.data(), 0, 16, k, nullptr);
        std::vector<char> full(ggml_nbytes(wi));
        for (int64_t r = 0; r < m; r += 16)
            std::memcpy(full.data() + size_t(r) * ggml_row_size(type, k), q.data(),
                        size_t(std::min<int64_t>(16, m - r)) * ggml_row_size(type, k));
        ggml_backend_tensor_set(wi, full.data(), 0, full.size());
    }
    ggml_cgraph* g = ggml_new_graph_custom(gctx, size_t(4 * nodes + 16), false);
    std::vector<ggml_tensor*> xs;
    for (int i = 0; i < nodes; ++i) {
        ggml_tensor* wi = w[size_t(i) % w.size()];
        ggml_tensor* x = ggml_new_tensor_1d(gctx, GGML_TYPE_F32, wi->ne[0]);
        xs.push_back(x);
        ggml_build_forward_expand(g, ggml_mul_mat(gctx, wi, x));
        t.weight_bytes += double(ggml_nbytes(wi));
        t.ops += 2.0 * double(wi->ne[0]) * double(wi->ne[1]);
    }
    ggml_backend_buffer_t gbuf = ggml_backend_alloc_ctx_tensors(gctx, cpu.backend);
    for (ggml_tensor* x : xs) {
        std::vector<float> v(size_t(x->ne[0]));
        for (auto& e : v) e = nd(rng);
        ggml_backend_tensor_set(x, v.data(), 0, v.size() * sizeof(float));
    }
    std::vector<std::vector<double>> trials(threads.size());
    for (int trial = 0; trial < 5; ++trial)
        for (size_t i = 0; i < threads.size(); ++i) {
            if (cpu.set_threads) cpu.set_threads(cpu.backend, threads[i]);
            if (trial == 0)
                for (int r = 0; r < 2; ++r) ggml_backend_graph_compute(cpu.backend, g);  // warm: pages, threads, caches
            int runs = 0;
            const double t0 = now_s();
            double el = 0;
            do {
                ggml_backend_graph_compute(cpu.backend, g);
                ++runs;
                el = now_s() - t0;
            } while (el < min_s);
            trials[i].push_back(el / runs);
        }
    for (auto& tr : trials) {
        std::sort(tr.begin(), tr.end());
        t.s.push_back(best ? tr.front() : tr[tr.size() / 2]);
    }
    ggml_backend_buffer_free(gbuf);
    ggml_backend_buffer_free(wbuf);
    ggml_free(gctx);
    ggml_free(wctx);
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ggml_kernel_roof: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--types") o.types = split(value());
        else if (a == "--threads") {
            o.threads.clear();
            for (const auto& s : split(value())) o.threads.push_back(std::max(1, std::atoi(s.c_str())));
        } else if (a == "--quick") o.quick = true;
        else if (a == "-h" || a == "--help") {
            std::printf("usage: ggml_kernel_roof [--types q4_0,q8_0,f16] [--threads 1,2] [--quick]\n"
                        "Times llama.cpp's (ggml's) decode MatMul kernel (a weight by one f32 column) per weight type and\n"
                        "thread count, the weights in the buffer type llama.cpp loads them into: in cache (G ops/s) and\n"
                        "streamed from memory (GB/s of weights). One JSON object per line. profinfer bench-machine runs it.\n");
            return 0;
        } else {
            std::fprintf(stderr, "ggml_kernel_roof: unknown argument %s (--help)\n", a.c_str());
            return 2;
        }
    }
    // ggml's INFO lines (one per repacked tensor) are not ours to print; warnings and errors are.
    ggml_log_set([](ggml_log_level level, const char* text, void*) {
        if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
    }, nullptr);
    ggml_backend_load_all();
    Cpu cpu;
    const double min_s = o.quick ? 0.05 : 0.2;
    const double stream_mib = o.quick ? 128 : 256;
    for (const auto& tn : o.types) {
        const ggml_type type = type_named(tn);
        // In cache: ~512 KiB of weight rows per thread, K = 4096, rows a multiple of 16 (per
        // thread count: each thread's share stays in its cache).
        const int64_t k = 4096;
        std::vector<double> cache_gops, cache_gbs;
        for (int th : o.threads) {
            const int64_t rows = std::max<int64_t>(16, (int64_t(512) << 10) / int64_t(ggml_row_size(type, k)) / 16 * 16) * th;
            const Timed c = time_graph(cpu, type, {{k, rows}}, 1, 64, {th}, min_s, true);
            cache_gops.push_back(c.ops / c.s[0] / 1e9), cache_gbs.push_back(c.weight_bytes / c.s[0] / 1e9);
        }
        // Streamed: distinct weights of a decode step's shapes, 256 MiB of each size class, in
        // 3 allocations. A decode's small MatMuls (a GQA model's K and V: 2048 × 256) stream
        // slower than its large ones — each node's split over the threads, its barrier and its
        // activations' quantisation weigh more — so the rate is measured per class and the
        // model reads each weight's from its size.
        struct Class {
            const char* name;
            std::vector<std::pair<int64_t, int64_t>> shapes;
        };
        const std::vector<Class> classes = {{"small", {{2048, 256}}}, {"mid", {{2048, 2048}}}, {"large", {{2048, 8192}, {8192, 2048}}}};
        std::vector<std::vector<double>> med(classes.size()), lo(classes.size()), hi(classes.size());
        std::string buffer;
        for (size_t ci = 0; ci < classes.size(); ++ci) {
            const auto& [k0, m0] = classes[ci].shapes[0];
            const int n = std::max(2, int(stream_mib * 1048576 / (double(ggml_row_size(type, k0)) * double(m0))));
            std::vector<Timed> allocs;
            for (int a = 0; a < (o.quick ? 1 : 3); ++a)
                allocs.push_back(time_graph(cpu, type, classes[ci].shapes, n, n, o.threads, min_s, false));
            buffer = allocs[0].buft;
            for (size_t i = 0; i < o.threads.size(); ++i) {
                std::vector<double> gbs;
                for (const Timed& a : allocs) gbs.push_back(a.weight_bytes / a.s[i] / 1e9);
                std::sort(gbs.begin(), gbs.end());
                med[ci].push_back(gbs[gbs.size() / 2]), lo[ci].push_back(gbs.front()), hi[ci].push_back(gbs.back());
            }
        }
        for (size_t i = 0; i < o.threads.size(); ++i)
            std::printf("{\"type\": \"%s\", \"threads\": %d, \"buffer\": \"%s\", \"cache_gops\": %.6g, \"cache_gbs\": %.6g, "
                        "\"stream_gbs\": %.6g, \"stream_gbs_lo\": %.6g, \"stream_gbs_hi\": %.6g, \"stream_mid_gbs\": %.6g, "
                        "\"stream_small_gbs\": %.6g, \"stream_mib\": %.6g, \"allocations\": %d}\n",
                        tn.c_str(), o.threads[i], buffer.c_str(), cache_gops[i], cache_gbs[i], med[2][i], lo[2][i], hi[2][i], med[1][i],
                        med[0][i], stream_mib, o.quick ? 1 : 3);
        std::fflush(stdout);
    }
    return 0;
}
