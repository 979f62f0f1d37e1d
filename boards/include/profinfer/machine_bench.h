#pragma once
// What this machine can sustain, for the roofline: STREAM-like triad bandwidth and the
// peak arithmetic rate of each kind llama.cpp's CPU kernels use (f32 and f16 FMA, bf16
// dot products, int8 dot products for quantised weights) on the widest vector unit
// present, at each thread count.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

namespace profinfer {

// llama.cpp's own decode MatMul kernel for one weight type at a thread count (ggml_kernel_roof:
// ggml's MUL_MAT of a weight by one f32 column, the weight where llama.cpp loads it).
struct KernelRoof {
    double cache_gops = 0;  // weights in cache: the kernel's arithmetic rate (a multiply-add counting 2)
    // weights streamed from memory: GB/s of weight bytes, a decode step's large weights (2048 × 8192
    // and 8192 × 2048), median over allocations; the lowest and highest allocation's (0: not measured)
    double stream_gbs = 0, stream_gbs_lo = 0, stream_gbs_hi = 0;
    // The same for its smaller weights (2048 × 2048, 2048 × 256: a GQA model's K and V), which
    // stream slower where the threads split them (0: not measured; stream_gbs then stands for all).
    double stream_mid_gbs = 0, stream_small_gbs = 0;
    std::string buffer;     // the ggml buffer type the weights were in (CPU, CPU_REPACK, …)
};

struct MachineRoof {
    int threads = 1;
    double triad_gbs = 0;    // a = b + s*c, 24 bytes per element, best of the repetitions
    double peak_gflops = 0;  // f32 fused multiply-add, all lanes of the widest vector unit used
    // kind (f32, f16, bf16, int8) → G operations/s, a multiply-add counting 2; kinds the
    // CPU has no unit for are absent.
    std::map<std::string, double> peak_gops;
    // weight type (q4_0, q8_0, f16) → llama.cpp's kernel for it; empty where not measured.
    std::map<std::string, KernelRoof> kernels;
    // The peak for KIND, or the f32 peak where the kind was not measured.
    double peak_for(const std::string& kind) const;
};

// The AVX2 int8 roof's rate over the same loop with adds alone, one thread: below 1 on any
// CPU (each step's two multiplies run on fewer ports than an add), unless the compiler took
// the multiplies out of the loop. NaN without AVX2 (or off x86-64).
double int8_avx2_over_adds(bool quick);

// Proactive reclaim the kernel runs (DAMON pageout schemes under ROOT), as one line; "" if none.
std::string proactive_reclaim(const std::filesystem::path& root);

struct MachineBench {
    std::string host, cpu, isa;
    std::string reclaim;  // proactive_reclaim() when measured
    // Where the kernel roofs came from (ggml_kernel_roof and llama.cpp's commit), or why there are none.
    std::string kernels;
    std::vector<MachineRoof> roofs;

    // KERNEL_TOOL: ggml_kernel_roof to run for the kernel roofs ("" : the one built beside profinfer).
    static MachineBench run(const std::vector<int>& thread_counts, bool quick, const std::string& kernel_tool = "");
    // The roof at THREADS (nearest measured count at or below it).
    const MachineRoof& at(int threads) const;
    nlohmann::json to_json() const;
    static MachineBench from_json(const nlohmann::json& j);
    static MachineBench load(const std::filesystem::path& file);
};

}  // namespace profinfer
