#include "profinfer/machine_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "profinfer/error.h"

namespace profinfer {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Runs F(i) on N threads at once and returns the wall time of the slowest.
template <class F>
double on_threads(int n, F f) {
    std::vector<std::thread> ts;
    auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) ts.emplace_back(f, i);
    for (auto& t : ts) t.join();
    return seconds_since(t0);
}

double triad_gbs(int threads, bool quick) {
    const size_t n = (quick ? 8u : 32u) << 20;  // doubles per array: 64/256 MiB, far beyond any LLC
    std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
    const double s = 3.0;
    auto pass = [&](int i) {
        const size_t lo = n * i / threads, hi = n * (i + 1) / threads;
        for (size_t k = lo; k < hi; ++k) a[k] = b[k] + s * c[k];
    };
    on_threads(threads, pass);  // first touch and warm-up
    double best = 1e30;
    for (int r = 0; r < (quick ? 3 : 10); ++r) best = std::min(best, on_threads(threads, pass));
    return 24.0 * n / best / 1e9;
}

constexpr int kChains = 8;  // independent FMA chains: enough to hide the FMA latency

#if defined(__x86_64__)
typedef float v8f __attribute__((vector_size(32)));
__attribute__((target("avx2,fma"))) double fma_avx2(long iters) {
    v8f acc[kChains], x, y;
    for (int k = 0; k < kChains; ++k) acc[k] = v8f{} + (1.0f + float(k));
    x = v8f{} + 0.999999f, y = v8f{} + 1e-6f;
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = acc[k] * x + y;
    float sink = 0;
    for (int k = 0; k < kChains; ++k) sink += acc[k][0];
    asm volatile("" ::"x"(sink));
    return double(iters) * kChains * 8 * 2;
}
#endif

typedef float v4f __attribute__((vector_size(16)));
double fma_generic(long iters) {
    v4f acc[kChains], x, y;
    for (int k = 0; k < kChains; ++k) acc[k] = v4f{} + (1.0f + float(k));
    x = v4f{} + 0.999999f, y = v4f{} + 1e-6f;
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = acc[k] * x + y;
    volatile float sink = 0;
    for (int k = 0; k < kChains; ++k) sink = sink + acc[k][0];
    return double(iters) * kChains * 4 * 2;
}

bool has_avx2_fma() {
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

double peak_gflops(int threads, bool quick) {
    const long iters = quick ? 20'000'000 : 100'000'000;
    std::vector<double> flops(threads);
    double best = 0;
    for (int r = 0; r < 3; ++r) {
        double t = on_threads(threads, [&](int i) {
#if defined(__x86_64__)
            flops[i] = has_avx2_fma() ? fma_avx2(iters) : fma_generic(iters);
#else
            flops[i] = fma_generic(iters);
#endif
        });
        double total = 0;
        for (double f : flops) total += f;
        best = std::max(best, total / t / 1e9);
    }
    return best;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

}  // namespace

MachineBench MachineBench::run(const std::vector<int>& thread_counts, bool quick) {
    MachineBench m;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    m.host = host;
    m.cpu = cpu_model();
    m.isa = has_avx2_fma() ? "avx2+fma" : "generic 128-bit";
    for (int t : thread_counts) m.roofs.push_back({t, triad_gbs(t, quick), peak_gflops(t, quick)});
    return m;
}

const MachineRoof& MachineBench::at(int threads) const {
    if (roofs.empty()) throw Error("the machine benchmark has no measurements");
    const MachineRoof* best = &roofs.front();
    for (const auto& r : roofs)
        if (r.threads <= threads && r.threads >= best->threads) best = &r;
    return *best;
}

nlohmann::json MachineBench::to_json() const {
    nlohmann::json j = {{"format", 1}, {"host", host}, {"cpu", cpu}, {"isa", isa}, {"roofs", nlohmann::json::array()}};
    for (const auto& r : roofs)
        j["roofs"].push_back({{"threads", r.threads}, {"triad_gbs", r.triad_gbs}, {"peak_gflops_f32", r.peak_gflops}});
    return j;
}

MachineBench MachineBench::from_json(const nlohmann::json& j) {
    MachineBench m;
    m.host = j.value("host", "");
    m.cpu = j.value("cpu", "");
    m.isa = j.value("isa", "");
    for (const auto& r : j.at("roofs")) m.roofs.push_back({r.at("threads"), r.at("triad_gbs"), r.at("peak_gflops_f32")});
    return m;
}

MachineBench MachineBench::load(const std::filesystem::path& file) {
    std::ifstream f(file);
    if (!f) throw Error("no machine benchmark at " + file.string() + ": run `profinfer bench-machine -o " + file.string() + "`");
    try {
        return from_json(nlohmann::json::parse(f));
    } catch (const nlohmann::json::exception& e) {
        throw Error("malformed machine benchmark " + file.string() + ": " + e.what());
    }
}

}  // namespace profinfer
