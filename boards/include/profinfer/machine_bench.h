#pragma once
// What this machine can sustain, for the roofline: STREAM-like triad bandwidth and the
// peak f32 FMA rate, at each thread count.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace profinfer {

struct MachineRoof {
    int threads = 1;
    double triad_gbs = 0;    // a = b + s*c, 24 bytes per element, best of the repetitions
    double peak_gflops = 0;  // f32 fused multiply-add, all lanes of the widest vector unit used
};

struct MachineBench {
    std::string host, cpu, isa;
    std::vector<MachineRoof> roofs;

    static MachineBench run(const std::vector<int>& thread_counts, bool quick);
    // The roof at THREADS (nearest measured count at or below it).
    const MachineRoof& at(int threads) const;
    nlohmann::json to_json() const;
    static MachineBench from_json(const nlohmann::json& j);
    static MachineBench load(const std::filesystem::path& file);
};

}  // namespace profinfer
