#pragma once
// ggml-vulkan's own per-operator device times. With GGML_VK_PERF_LOGGER set, the stock
// library closes every graph with timestamp queries around each node and prints, per
// graph, "Vulkan Timings:" and a line per operator name and shape
//   MUL_MAT_VEC q4_0 m=2048 n=1 k=2048: 16 x 98.5 us = 1576 us (…)
// on stderr (ggml-vulkan.cpp, vk_perf_logger). The experiment runner keeps that stderr
// beside a point's trace (vulkan_timings_file); this reads it back. Device time, measured
// by the device's timestamps, not by profinfer: what the host-side gpu_events cannot give.
#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

namespace profinfer {

struct VulkanOpTiming {
    std::string name;       // the logger's whole name: "MUL_MAT_VEC q4_0 m=2048 n=1 k=2048"
    std::string op;         // MUL_MAT, MUL_MAT_VEC, …; other operators: the name's first word
    std::string fused;      // MatMuls timed as one fused kernel: the fusion (MUL_MAT_ADD: + the ADD after it)
    std::string type;       // MatMuls: the weight's type (q4_0, f16, …); else empty
    int64_t m = 0, n = 0, k = 0;  // MatMuls: output rows, columns (tokens), inner dimension
    bool batched = false;   // a "batch=" MatMul (KQ, KQV over heads), not a weight's
    int64_t count = 0;      // nodes timed, over every graph printed
    double total_us = 0;    // their device time
    double mean_us() const { return count ? total_us / double(count) : 0; }
};

// Every "Vulkan Timings:" block in IN summed per name, in order of first appearance.
std::vector<VulkanOpTiming> parse_vulkan_timings(std::istream& in);

// Where the runner keeps a point round's stderr with the logger's output: beside its trace
// (points/<id>-rN.db → points/<id>-rN.vulkan-timings.txt).
std::filesystem::path vulkan_timings_file(const std::filesystem::path& db);

}  // namespace profinfer
