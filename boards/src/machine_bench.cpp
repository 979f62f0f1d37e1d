#include "profinfer/machine_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "profinfer/board.h"
#include "profinfer/error.h"
#include "profinfer/knobs.h"

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

constexpr int kChains = 8;  // independent chains: enough to hide the instruction latency

// Each kernel runs ITERS rounds of kChains independent vector operations on registers
// and returns the arithmetic operations done (a multiply-add counts 2, as FLOPs do).
using Kernel = double (*)(long iters);

template <class V>
inline void keep(const V& v) {
    asm volatile("" ::"m"(v));
}

typedef float v4f __attribute__((vector_size(16)));
double fma_generic(long iters) {
    v4f acc[kChains], x, y;
    for (int k = 0; k < kChains; ++k) acc[k] = v4f{} + (1.0f + float(k));
    x = v4f{} + 0.999999f, y = v4f{} + 1e-6f;
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = acc[k] * x + y;
    keep(acc);
    return double(iters) * kChains * 4 * 2;
}

#if defined(__x86_64__)
// f32: FMA on the widest vector unit.
__attribute__((target("avx2,fma"))) double f32_avx2(long iters) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(1.0f + float(k));
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    keep(acc);
    return double(iters) * kChains * 8 * 2;
}
__attribute__((target("avx512f"))) double f32_avx512(long iters) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1.0f + float(k));
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    keep(acc);
    return double(iters) * kChains * 16 * 2;
}
// f16 weights: llama.cpp's x86 kernels widen f16 to f32 (F16C) and FMA; one conversion
// per FMA, as in its dot product.
__attribute__((target("avx2,fma,f16c"))) double f16_avx2(long iters) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(1.0f + float(k));
    __m128i h = _mm_set1_epi16(0x3bff);  // 0.9995 in f16
    const __m256 y = _mm256_set1_ps(1e-6f);
    for (long i = 0; i < iters; ++i) {
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], _mm256_cvtph_ps(h), y);
        asm volatile("" : "+x"(h));
    }
    keep(acc);
    return double(iters) * kChains * 8 * 2;
}
__attribute__((target("avx512f"))) double f16_avx512(long iters) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1.0f + float(k));
    __m256i h = _mm256_set1_epi16(0x3bff);
    const __m512 y = _mm512_set1_ps(1e-6f);
    for (long i = 0; i < iters; ++i) {
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff, h), y);
        asm volatile("" : "+v"(h));
    }
    keep(acc);
    return double(iters) * kChains * 16 * 2;
}
// bf16 weights: AVX512_BF16's dot product (2 products per f32 lane) where present.
__attribute__((target("avx512f,avx512bf16"))) double bf16_avx512(long iters) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1.0f + float(k));
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    keep(acc);
    return double(iters) * kChains * 32 * 2;
}
// Quantised weights (q4_0, q8_0, k-quants...): llama.cpp quantises the activations to 8
// bits and multiplies with int8 dot products: VNNI (4 products per i32 lane) where
// present, else AVX2's maddubs + madd. The multiplies' operand goes through an empty asm
// before each chain's step: with operands that never change, the compiler computed the
// maddubs + madd once before the loop and the kernel measured vector adds (3.0x the
// multiplies' rate on a Zen 4: every int8 roof of an AVX2 machine before 2026-12-06).
__attribute__((target("avx2"))) double int8_avx2(long iters) {
    __m256i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_epi32(k);
    __m256i a = _mm256_set1_epi8(3);
    const __m256i b = _mm256_set1_epi8(5), ones = _mm256_set1_epi16(1);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) {
            asm volatile("" : "+x"(a));
            acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
        }
    keep(acc);
    return double(iters) * kChains * 32 * 2;
}
// int8_avx2's adds alone: what it measured while its multiplies were hoisted (the check
// int8_avx2_over_adds).
__attribute__((target("avx2"))) double adds_avx2(long iters) {
    __m256i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_epi32(k);
    __m256i a = _mm256_set1_epi32(3);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) {
            asm volatile("" : "+x"(a));
            acc[k] = _mm256_add_epi32(acc[k], a);
        }
    keep(acc);
    return double(iters) * kChains * 32 * 2;
}
__attribute__((target("avx2,avxvnni"))) double int8_avxvnni(long iters) {
    __m256i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_epi32(k);
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_dpbusd_avx_epi32(acc[k], a, b);
    keep(acc);
    return double(iters) * kChains * 32 * 2;
}
__attribute__((target("avx512f,avx512vnni"))) double int8_avx512vnni(long iters) {
    __m512i acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_epi32(k);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    for (long i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
    keep(acc);
    return double(iters) * kChains * 64 * 2;
}
#endif

struct ComputeRoof {
    const char* kind;  // f32, f16, bf16, int8
    const char* isa;
    Kernel kernel;
};

#if defined(__x86_64__)
// Only the x86 roofs ask which units the CPU has; an arm64 build has the generic one.
bool cpu_has(const char* feature) {
    __builtin_cpu_init();
    const std::string f = feature;
    if (f == "avx512f") return __builtin_cpu_supports("avx512f");
    if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
    if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");  // also: the OS saves YMM
    if (f == "avx2") return avx2;
    // Not every compiler's __builtin_cpu_supports knows these two: CPUID directly.
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (f == "avxvnni") return avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
    if (f == "f16c") return avx2 && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    return false;
}
#endif

// For each kind of arithmetic llama.cpp's CPU kernels use, the widest unit this CPU has.
std::vector<ComputeRoof> compute_roofs() {
    std::vector<ComputeRoof> r;
#if defined(__x86_64__)
    const bool avx512 = cpu_has("avx512f"), avx2 = cpu_has("avx2");
    r.push_back(avx512 ? ComputeRoof{"f32", "avx512f", f32_avx512}
                       : avx2 ? ComputeRoof{"f32", "avx2+fma", f32_avx2} : ComputeRoof{"f32", "generic 128-bit", fma_generic});
    if (avx512)
        r.push_back({"f16", "avx512f (f16 widened to f32)", f16_avx512});
    else if (avx2 && cpu_has("f16c"))
        r.push_back({"f16", "avx2+f16c (f16 widened to f32)", f16_avx2});
    if (avx512 && cpu_has("avx512bf16")) r.push_back({"bf16", "avx512_bf16", bf16_avx512});
    if (avx512 && cpu_has("avx512vnni"))
        r.push_back({"int8", "avx512_vnni", int8_avx512vnni});
    else if (cpu_has("avxvnni"))
        r.push_back({"int8", "avx_vnni", int8_avxvnni});
    else if (avx2)
        r.push_back({"int8", "avx2 maddubs", int8_avx2});
#else
    r.push_back({"f32", "generic 128-bit", fma_generic});
#endif
    return r;
}

double peak_gops(Kernel kernel, int threads, bool quick) {
    const long iters = quick ? 10'000'000 : 50'000'000;
    std::vector<double> ops(threads);
    double best = 0;
    for (int r = 0; r < 3; ++r) {
        double t = on_threads(threads, [&](int i) { ops[i] = kernel(iters); });
        double total = 0;
        for (double f : ops) total += f;
        best = std::max(best, total / t / 1e9);
    }
    return best;
}

std::string cpu_model() {
    try {
        return MachineFacts::read().cpu_description();
    } catch (const Error&) {
        return "unknown";
    }
}

std::string first_line(const std::filesystem::path& file) {
    std::ifstream f(file);
    std::string line;
    std::getline(f, line);
    return line;
}

// A kernel roof from ggml_kernel_roof's line or machine.json's entry (the same keys).
KernelRoof kernel_roof_of(const nlohmann::json& j) {
    return {j.value("cache_gops", 0.0),     j.value("stream_gbs", 0.0),       j.value("stream_gbs_lo", 0.0), j.value("stream_gbs_hi", 0.0),
            j.value("stream_mid_gbs", 0.0), j.value("stream_small_gbs", 0.0), j.value("buffer", "")};
}

// llama.cpp's decode MatMul kernel roofs from ggml_kernel_roof (TOOL) at THREADS, into M's
// roofs; M.kernels says where they came from or why there are none (never fatal: the synthetic
// roofs stand without them).
void measure_kernels(MachineBench& m, const std::vector<int>& threads, bool quick, std::string tool) {
    if (tool.empty()) tool = knob(Knob::KernelRoof).value_or("");
#ifdef PROFINFER_KERNEL_ROOF
    if (tool.empty()) tool = PROFINFER_KERNEL_ROOF;
#endif
    if (tool.empty() || !std::filesystem::exists(tool)) {
        m.kernels = "not measured: no ggml_kernel_roof" + (tool.empty() ? std::string() : " at " + tool);
        return;
    }
    std::string list;
    for (int t : threads) list += (list.empty() ? "" : ",") + std::to_string(t);
    const std::string cmd = "'" + tool + "' --threads " + list + (quick ? " --quick" : "");
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) {
        m.kernels = "not measured: cannot run " + tool;
        return;
    }
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int rc = ::pclose(p);
    int found = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("type")) continue;
        for (auto& r : m.roofs)
            if (r.threads == j.value("threads", 0)) {
                r.kernels[j.at("type").get<std::string>()] = kernel_roof_of(j);
                ++found;
            }
    }
    m.kernels = found > 0 && rc == 0 ? "ggml_kernel_roof (llama.cpp " PROFINFER_LLAMA_COMMIT ")"
                                     : "not measured: " + tool + " exited with status " + std::to_string(rc);
}

}  // namespace

// The kernel's proactive reclaim, if on: DAMON schemes that page out memory idle for a while
// (a VM host's way to take memory back). It takes mmapped model pages away between runs,
// which then fault back in from disk: runs of one configuration vary for it.
std::string proactive_reclaim(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    const fs::path kdamonds = root / "sys/kernel/mm/damon/admin/kdamonds";
    std::error_code ec;
    std::string found;
    for (const auto& k : fs::directory_iterator(kdamonds, ec)) {
        if (first_line(k.path() / "state") != "on") continue;
        for (const auto& c : fs::directory_iterator(k.path() / "contexts", ec)) {
            const double aggr_s = std::atof(first_line(c.path() / "monitoring_attrs/intervals/aggr_us").c_str()) / 1e6;
            for (const auto& sc : fs::directory_iterator(c.path() / "schemes", ec)) {
                if (first_line(sc.path() / "action") != "pageout") continue;
                const double age = std::atof(first_line(sc.path() / "access_pattern/age/min").c_str()) * aggr_s;
                char text[160];
                std::snprintf(text, sizeof text, "DAMON pageout (%s) of memory idle for %.0f s or more",
                              first_line(c.path() / "operations").c_str(), age);
                found += (found.empty() ? "" : "; ") + std::string(text);
            }
        }
    }
    return found;
}

MachineBench MachineBench::run(const std::vector<int>& thread_counts, bool quick, const std::string& kernel_tool) {
    MachineBench m;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    m.host = host;
    m.cpu = cpu_model();
    m.reclaim = proactive_reclaim("/");
    const auto kinds = compute_roofs();
    for (const auto& k : kinds) m.isa += (m.isa.empty() ? "" : ", ") + std::string(k.kind) + ": " + k.isa;
    for (int t : thread_counts) {
        MachineRoof roof{t, triad_gbs(t, quick), 0, {}};
        for (const auto& k : kinds) roof.peak_gops[k.kind] = peak_gops(k.kernel, t, quick);
        roof.peak_gflops = roof.peak_gops.at("f32");
        m.roofs.push_back(roof);
    }
    measure_kernels(m, thread_counts, quick, kernel_tool);
    return m;
}

double int8_avx2_over_adds(bool quick) {
#if defined(__x86_64__)
    if (!cpu_has("avx2")) return NAN;
    return peak_gops(int8_avx2, 1, quick) / peak_gops(adds_avx2, 1, quick);
#else
    (void)quick;
    return NAN;
#endif
}

double MachineRoof::peak_for(const std::string& kind) const {
    auto it = peak_gops.find(kind);
    return it == peak_gops.end() ? peak_gflops : it->second;
}

const MachineRoof& MachineBench::at(int threads) const {
    if (roofs.empty()) throw Error("the machine benchmark has no measurements");
    const MachineRoof* best = &roofs.front();
    for (const auto& r : roofs)
        if (r.threads <= threads && r.threads >= best->threads) best = &r;
    return *best;
}

nlohmann::json MachineBench::to_json() const {
    nlohmann::json j = {{"format", 2}, {"host", host}, {"cpu", cpu}, {"isa", isa}, {"roofs", nlohmann::json::array()}};
    if (!reclaim.empty()) j["reclaim"] = reclaim;
    if (!kernels.empty()) j["kernels"] = kernels;
    for (const auto& r : roofs) {
        nlohmann::json e = {{"threads", r.threads}, {"triad_gbs", r.triad_gbs}, {"peak_gflops_f32", r.peak_gflops}, {"peak_gops", r.peak_gops}};
        for (const auto& [type, k] : r.kernels)
            e["kernels"][type] = {{"cache_gops", k.cache_gops}, {"stream_gbs", k.stream_gbs}, {"stream_gbs_lo", k.stream_gbs_lo},
                                  {"stream_gbs_hi", k.stream_gbs_hi}, {"stream_mid_gbs", k.stream_mid_gbs},
                                  {"stream_small_gbs", k.stream_small_gbs}, {"buffer", k.buffer}};
        j["roofs"].push_back(e);
    }
    return j;
}

MachineBench MachineBench::from_json(const nlohmann::json& j) {
    MachineBench m;
    m.host = j.value("host", "");
    m.cpu = j.value("cpu", "");
    m.isa = j.value("isa", "");
    m.reclaim = j.value("reclaim", "");
    m.kernels = j.value("kernels", "");
    for (const auto& r : j.at("roofs")) {
        MachineRoof roof{r.at("threads"), r.at("triad_gbs"), r.at("peak_gflops_f32"), {}};
        if (r.contains("peak_gops")) roof.peak_gops = r.at("peak_gops").get<std::map<std::string, double>>();  // format 2
        if (r.contains("kernels"))
            for (const auto& [type, k] : r.at("kernels").items())
                roof.kernels[type] = kernel_roof_of(k);
        m.roofs.push_back(roof);
    }
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
