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

struct MachineRoof {
    int threads = 1;
    double triad_gbs = 0;    // a = b + s*c, 24 bytes per element, best of the repetitions
    double peak_gflops = 0;  // f32 fused multiply-add, all lanes of the widest vector unit used
    // kind (f32, f16, bf16, int8) → G operations/s, a multiply-add counting 2; kinds the
    // CPU has no unit for are absent.
    std::map<std::string, double> peak_gops;
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
    std::vector<MachineRoof> roofs;

    static MachineBench run(const std::vector<int>& thread_counts, bool quick);
    // The roof at THREADS (nearest measured count at or below it).
    const MachineRoof& at(int threads) const;
    nlohmann::json to_json() const;
    static MachineBench from_json(const nlohmann::json& j);
    static MachineBench load(const std::filesystem::path& file);
};

}  // namespace profinfer
