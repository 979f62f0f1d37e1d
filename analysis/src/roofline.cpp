#include "profinfer/roofline.h"

#include <algorithm>
#include <map>

#include "profinfer/error.h"
#include "profinfer/ggml_types.h"

namespace profinfer {

namespace {
double elems(const std::array<int64_t, 4>& ne) { return double(ne[0]) * ne[1] * ne[2] * ne[3]; }
}  // namespace

double node_flops(const Node& n) {
    const auto* s0 = n.srcs.size() > 0 ? &n.srcs[0] : nullptr;
    const auto* s1 = n.srcs.size() > 1 ? &n.srcs[1] : nullptr;
    if (n.matmul && s0) return 2.0 * s0->ne[0] * elems(n.ne);  // 2·K per output
    if (n.op == "FLASH_ATTN_EXT" && s0 && s1)  // QK^T and (softmax)V: 2·2·D·KV per query and head
        return 4.0 * s0->ne[0] * s1->ne[1] * s0->ne[1] * s0->ne[2];
    static const std::map<std::string, double> per_element = {
        {"SOFT_MAX", 5}, {"RMS_NORM", 3}, {"NORM", 5}, {"ROPE", 6}, {"SWIGLU", 5}, {"GEGLU", 8},
        {"GELU", 8},     {"SILU", 4},     {"TANH", 4}, {"SCALE", 1}, {"ADD", 1},    {"MUL", 1}};
    auto it = per_element.find(n.op);
    return elems(n.ne) * (it == per_element.end() ? 0.0 : it->second);
}

std::string compute_kind(const Node& n) {
    if (n.matmul && !n.srcs.empty()) {
        switch (n.srcs[0].type) {
            case 0: return "f32";
            case 1: return "f16";
            case 30: return "bf16";
            default:
                // Quantised weights: the activations are quantised to 8 bits and the
                // products are int8 dot products.
                if (const GgmlType* t = ggml_type(uint32_t(n.srcs[0].type)); t && t->block_elems > 1) return "int8";
                return "f32";
        }
    }
    return "f32";
}

namespace {
// Counters that count DRAM traffic, and the bytes per event: Arm's L3D_CACHE_REFILL
// (0x2A, a 64-byte line read) and MEM_ACCESS_WR (0x67, 16 bytes, Cortex-A76), and the
// last-level-cache misses of other CPUs (a line each).
double dram_bytes_per_event(const std::string& counter) {
    static const std::map<std::string, double> m = {
        {"l3d_cache_refill", 64}, {"r2a", 64}, {"L3D_CACHE_REFILL", 64}, {"mem_access_wr", 16}, {"r67", 16},
        {"MEM_ACCESS_WR", 16},    {"LLC-load-misses", 64}, {"cache-misses", 64}};
    auto it = m.find(counter);
    return it == m.end() ? 0 : it->second;
}
}  // namespace

Table roofline_table(store::Database& db, const MachineBench& machine) {
    TraceGraphs trace(db);
    std::vector<std::pair<int, double>> dram_counters;  // (slot, bytes per event)
    const auto names = trace.counter_names();
    for (int k = 0; k < kCounterSlots; ++k)
        if (double b = dram_bytes_per_event(names[k]); b > 0) dram_counters.push_back({k, b});
    struct Acc {
        std::string name, op, kind;
        int count = 0, threads = 0;
        double time_s = 0, flops = 0, bytes = 0;
        double counted_bytes = 0;  // from DRAM counters, when the run has them
        bool counted = true;
        bool bytes_estimated = false;  // some node's bytes an upper bound (Traffic::estimate)
    };
    std::map<std::pair<std::string, std::string>, Acc> by;
    for (const auto& call : trace.calls()) {
        if (call.phase != "decode") continue;
        for (const auto& n : trace.nodes(call.index)) {
            if (n.threads.empty()) continue;  // fused partner: its kernel is counted with the first node
            auto& a = by[{n.base, n.op}];
            a.name = n.base, a.op = n.op, a.kind = compute_kind(n), ++a.count;
            a.threads = std::max(a.threads, n.threads.front().nth);
            a.time_s += n.time_ms() / 1e3;
            a.flops += node_flops(n);
            const Traffic tr = n.traffic();
            a.bytes += double(tr.bytes);
            a.bytes_estimated |= tr.estimate;
            for (auto [slot, per_event] : dram_counters) {
                auto v = n.counter(slot);
                v ? void(a.counted_bytes += *v * per_event) : void(a.counted = false);
            }
        }
    }
    if (by.empty()) throw Error("no decode-call operator records: record with --level op or full");
    // counter_gbs: DRAM traffic measured by hardware counters (null without them).
    // flops, bytes: per node (mean over its calls), from shapes and types (node_flops,
    // Node::traffic); bytes_are: "moved" (what the op reads and writes) or "upper bound".
    Table t{{"name", "op", "count", "mean_us", "flops", "bytes", "bytes_are", "flops_per_byte", "gflops", "gbs", "counter_gbs", "roof_kind", "roof_gflops", "roof_pct",
             "verdict"},
            {}};
    std::vector<Acc> rows;
    for (auto& [k, a] : by) rows.push_back(a);
    std::sort(rows.begin(), rows.end(), [](const Acc& x, const Acc& y) { return x.time_s > y.time_s; });
    for (const auto& a : rows) {
        const auto& roof = machine.at(a.threads);
        const double peak = roof.peak_for(a.kind);
        const double intensity = a.bytes > 0 ? a.flops / a.bytes : 0;
        const double gflops = a.time_s > 0 ? a.flops / a.time_s / 1e9 : 0;
        const double gbs = a.time_s > 0 ? a.bytes / a.time_s / 1e9 : 0;
        const double roof_gflops = std::min(peak, roof.triad_gbs * intensity);
        // Operators without arithmetic (copies, views, lookups) are judged by bandwidth alone.
        const double share = a.flops > 0 ? (roof_gflops > 0 ? gflops / roof_gflops : 0) : gbs / roof.triad_gbs;
        std::string verdict = share < kOverheadShare                          ? "overhead-dominated"
                              : intensity < peak / roof.triad_gbs ? "memory-bound"
                                                                               : "compute-bound";
        const nlohmann::json counter_gbs = !dram_counters.empty() && a.counted && a.time_s > 0
                                               ? nlohmann::json(a.counted_bytes / a.time_s / 1e9)
                                               : nlohmann::json(nullptr);
        t.rows.push_back({a.name, a.op, a.count, a.time_s / a.count * 1e6, a.flops / a.count, a.bytes / a.count,
                          a.bytes_estimated ? "upper bound" : "moved", intensity, gflops, gbs, counter_gbs, a.kind, roof_gflops,
                          100.0 * share, verdict});
    }
    return t;
}

}  // namespace profinfer
