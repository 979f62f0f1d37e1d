#pragma once
// The operator graph of one llama_decode call as recorded in a trace store: nodes in
// execution order with their per-thread records, sources, counters and bytes moved.
// Every view (DAG, statistics, roofline) reads the store through this.
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

using store::kCounterSlots;
using CounterValues = std::array<std::optional<int64_t>, kCounterSlots>;

struct ThreadPart {
    int ith = 0, nth = 0;
    int64_t tid = 0, start_ns = 0, compute_end_ns = 0, end_ns = 0;
    int start_cpu = 0, end_cpu = 0;
    CounterValues counters;
};

struct SourceRef {
    uint64_t tensor = 0, view_src = 0;
    int type = -1;  // -1 when not recorded (slots past the third)
    std::array<int64_t, 4> ne{};
};

// The bytes an operator reads and writes, from its shapes and types: what it moves (the rows
// GET_ROWS gathers, the rows SET_ROWS writes, the experts MUL_MAT_ID uses), not the size of
// the tensors it touches. estimate: an upper bound, not a count (MUL_MAT_ID over several
// tokens: which experts they share is not in the shapes; a source's shape not recorded).
struct Traffic {
    uint64_t bytes = 0;
    bool estimate = false;
};

struct Node {
    int index = 0;  // execution order within the call
    int64_t graph_seq = 0;
    uint64_t tensor = 0;
    uint64_t view_src = 0;  // the base tensor when the node writes into a view
    std::string name, op;
    int type = 0;
    std::array<int64_t, 4> ne{};
    std::vector<SourceRef> srcs;
    std::vector<ThreadPart> threads;  // empty for the second node of a fused kernel
    int fused_with = -1;              // index of the partner node of a fused kernel
    std::string base;                 // name without the layer suffix (view node_names)
    int layer = -1;                   // the name's "-N" suffix, -1 without one
    bool matmul = false;              // MUL_MAT or MUL_MAT_ID (view node_names)
    bool attention = false;           // KQ/KQV MatMul or FLASH_ATTN_EXT (view node_names)
    // The node's time as view node_times defines it (docs/trace-store.md); 0 for the
    // second node of a fused kernel, whose time is the first's.
    int64_t start_ns = 0, end_ns = 0;

    double time_ms() const { return (end_ns - start_ns) / 1e6; }
    Traffic traffic() const;         // bytes moved (see Traffic)
    uint64_t bytes() const;          // traffic().bytes
    std::optional<int64_t> counter(int slot) const;  // summed over threads; empty if any is unknown
};

struct DecodeCall {
    int index = 0;
    std::string phase;
    int64_t n_tokens = 0, start_ns = 0, end_ns = 0;
};

class TraceGraphs {
public:
    // DB: an open trace, read while this lives.
    explicit TraceGraphs(store::Database& db);
    const std::vector<DecodeCall>& calls() const { return calls_; }
    // The middle decode call (the paper's "target decode iteration"), or the last call. A
    // trace with a hog's window (the interference study's, meta hog_start_ns/hog_stop_ns): the
    // middle of the decode calls wholly inside it, where there are any (Fig. 8's point).
    int default_call() const;
    // CALL lies wholly inside the trace's hog window (false without one).
    bool inside_hog_window(int call) const;
    std::vector<Node> nodes(int call) const;
    std::vector<std::string> counter_names() const { return db_.counter_names(); }  // by slot; "" where unused
    store::Database& db() { return db_; }

private:
    store::Database& db_;
    std::vector<DecodeCall> calls_;
    std::optional<store::HogWindow> hog_;  // the trace's hog window, if it has one
};

}  // namespace profinfer
