#pragma once
// Records shaped like the decode steps of a 2-thread llama.cpp run, fed to a TraceWriter
// as the kernel side sends them: each node's details once (a reused graph), then per step
// one llama_decode call around one CPU graph whose nodes each thread reports in batches
// of PI_OP_BATCH. Shared by the writer's and the analysis' micro-benchmarks and `profinfer
// estimate` (what storing a record costs here).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "profinfer/events.h"
#include "struct_layout.h"
#include "trace_writer.h"

namespace profinfer::bench {

template <class T>
T record(uint32_t kind, uint32_t tid = 100) {
    T e{};
    e.h.kind = kind;
    e.h.size = sizeof(T);
    e.h.pid = 100;
    e.h.tid = tid;
    return e;
}

class SyntheticDecode {
public:
    SyntheticDecode(TraceWriter& writer, const GgmlLayout& layout, int nodes, int threads = 2)
        : w_(writer), nodes_(nodes), threads_(threads), mul_mat_(op_code(layout, "MUL_MAT")), add_(op_code(layout, "ADD")) {}

    // One decode step: the call, its graph, every node on every thread. Returns the
    // records written.
    uint64_t step() {
        const uint64_t seq = ++seq_, call_start = ts_;
        if (seq == 1) describe_nodes(seq);
        for (int ith = 0; ith < threads_; ++ith) {
            auto o = record<pi_op_event>(PI_EV_OP, 100 + ith);
            uint64_t t = call_start + 10;
            for (int n = 0; n < nodes_; ++n) {
                auto& e = o.ops[o.n++];
                e.graph_seq = seq, e.tensor = tensor(n), e.ith = ith, e.nth = threads_;
                e.start_ns = t + 7 * ith, e.compute_end_ns = t + 500, e.end_ns = t + 1000;
                for (auto& c : e.counters) c = ~0ULL;
                t += 1000;
                if (o.n == PI_OP_BATCH || n == nodes_ - 1) w_.write(&o, sizeof o), o.n = 0;
            }
        }
        ts_ = call_start + 10 + 1000ull * nodes_ + 10;
        auto g = record<pi_graph_event>(PI_EV_GRAPH);
        g.graph_seq = seq, g.start_ns = call_start + 5, g.end_ns = ts_ - 5, g.api = 2, g.n_nodes = nodes_;
        w_.write(&g, sizeof g);
        auto k = record<pi_token_event>(PI_EV_TOKEN);
        k.start_ns = call_start, k.end_ns = ts_, k.n_tokens = 1;
        w_.write(&k, sizeof k);
        ts_ += 100;
        return uint64_t(threads_) * nodes_ + 2 + (seq == 1 ? nodes_ : 0);
    }

private:
    static uint32_t op_code(const GgmlLayout& layout, const std::string& op) {
        return uint32_t(std::find(layout.op_names.begin(), layout.op_names.end(), op) - layout.op_names.begin());
    }
    static uint64_t tensor(int n) { return 0x100000 + 0x200 * uint64_t(n); }
    // Alternating MUL_MAT (a weight and the previous node) and ADD nodes, named by layer.
    void describe_nodes(uint64_t seq) {
        for (int n = 0; n < nodes_; ++n) {
            auto e = record<pi_node_event>(PI_EV_NODE);
            e.graph_seq = seq, e.ts_ns = ts_;
            e.dst.addr = tensor(n);
            e.dst.op = n % 2 ? add_ : mul_mat_;
            e.dst.ne[0] = 2048, e.dst.ne[1] = e.dst.ne[2] = e.dst.ne[3] = 1;
            e.src[0] = 0x900000 + 0x200 * uint64_t(n);  // a weight: no producer
            e.src[1] = n ? tensor(n - 1) : 0x800000;
            for (int s = 0; s < 2; ++s) e.src_shape[s].addr = e.src[s], e.src_shape[s].ne[0] = 2048, e.src_shape[s].ne[1] = 1;
            std::snprintf(e.name, sizeof e.name, "%s-%d", n % 2 ? "ffn_add" : "ffn_mm", n / 32);
            w_.write(&e, sizeof e);
        }
    }
    TraceWriter& w_;
    const int nodes_, threads_;
    const uint32_t mul_mat_, add_;
    uint64_t seq_ = 0, ts_ = 1000;
};

}  // namespace profinfer::bench
