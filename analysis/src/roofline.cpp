#include "profinfer/roofline.h"

#include <algorithm>
#include <map>

#include "profinfer/error.h"

namespace profinfer {

namespace {
double elems(const std::array<int64_t, 4>& ne) { return double(ne[0]) * ne[1] * ne[2] * ne[3]; }
}  // namespace

double node_flops(const Node& n) {
    const auto* s0 = n.srcs.size() > 0 ? &n.srcs[0] : nullptr;
    const auto* s1 = n.srcs.size() > 1 ? &n.srcs[1] : nullptr;
    if ((n.op == "MUL_MAT" || n.op == "MUL_MAT_ID") && s0) return 2.0 * s0->ne[0] * elems(n.ne);  // 2·K per output
    if (n.op == "FLASH_ATTN_EXT" && s0 && s1)  // QK^T and (softmax)V: 2·2·D·KV per query and head
        return 4.0 * s0->ne[0] * s1->ne[1] * s0->ne[1] * s0->ne[2];
    static const std::map<std::string, double> per_element = {
        {"SOFT_MAX", 5}, {"RMS_NORM", 3}, {"NORM", 5}, {"ROPE", 6}, {"SWIGLU", 5}, {"GEGLU", 8},
        {"GELU", 8},     {"SILU", 4},     {"TANH", 4}, {"SCALE", 1}, {"ADD", 1},    {"MUL", 1}};
    auto it = per_element.find(n.op);
    return elems(n.ne) * (it == per_element.end() ? 0.0 : it->second);
}

Table roofline_table(const std::filesystem::path& db, const MachineBench& machine) {
    TraceGraphs trace(db);
    struct Acc {
        std::string name, op;
        int count = 0, threads = 0;
        double time_s = 0, flops = 0, bytes = 0;
    };
    std::map<std::pair<std::string, std::string>, Acc> by;
    for (const auto& call : trace.calls()) {
        if (call.phase != "decode") continue;
        for (const auto& n : trace.nodes(call.index)) {
            if (n.threads.empty()) continue;  // fused partner: its kernel is counted with the first node
            std::string base = n.layer >= 0 ? n.name.substr(0, n.name.rfind('-')) : n.name;
            auto& a = by[{base, n.op}];
            a.name = base, a.op = n.op, ++a.count;
            a.threads = std::max(a.threads, n.threads.front().nth);
            a.time_s += n.time_ms() / 1e3;
            a.flops += node_flops(n);
            a.bytes += double(n.bytes());
        }
    }
    if (by.empty()) throw Error("no decode-call operator records: record with --level op or full");
    Table t{{"name", "op", "count", "mean_us", "flops_per_byte", "gflops", "gbs", "roof_gflops", "roof_pct", "verdict"}, {}};
    std::vector<Acc> rows;
    for (auto& [k, a] : by) rows.push_back(a);
    std::sort(rows.begin(), rows.end(), [](const Acc& x, const Acc& y) { return x.time_s > y.time_s; });
    for (const auto& a : rows) {
        const auto& roof = machine.at(a.threads);
        const double intensity = a.bytes > 0 ? a.flops / a.bytes : 0;
        const double gflops = a.time_s > 0 ? a.flops / a.time_s / 1e9 : 0;
        const double gbs = a.time_s > 0 ? a.bytes / a.time_s / 1e9 : 0;
        const double roof_gflops = std::min(roof.peak_gflops, roof.triad_gbs * intensity);
        // Operators without arithmetic (copies, views, lookups) are judged by bandwidth alone.
        const double share = a.flops > 0 ? (roof_gflops > 0 ? gflops / roof_gflops : 0) : gbs / roof.triad_gbs;
        std::string verdict = share < kOverheadShare                          ? "overhead-dominated"
                              : intensity < roof.peak_gflops / roof.triad_gbs ? "memory-bound"
                                                                               : "compute-bound";
        t.rows.push_back({a.name, a.op, a.count, a.time_s / a.count * 1e6, intensity, gflops, gbs, roof_gflops,
                          100.0 * share, verdict});
    }
    return t;
}

}  // namespace profinfer
