#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

// What `profinfer info` shows: one run's headline numbers, from the store only.
// When an operator gate (--budget, --qos-min-tps) recorded operators on some calls only:
// one line saying so, for every view that shows operator figures; empty otherwise.
std::string operator_sampling_note(store::Database& db);

// The decode speed every study and view reports: TPOT, the median duration of the run's
// decode calls (view calls, phase decode), in ms — decode tokens/s is 1000 / TPOT. (A
// program's own speed, e.g. llama-bench's avg_ts, is reported apart, as bench_tg_tps.)
// Empty without a decode call; N: the decode calls it rests on.
std::optional<double> median_tpot_ms(store::Database& db, int64_t* n = nullptr);

struct RunSummary {
    store::Meta meta;
    int64_t tokens = 0;  // tokens processed (sum of batch sizes)
    int64_t decode_calls = 0, prefill_calls = 0;
    // Every llama_decode call the recorder saw (table tokens: a call in flight at attach
    // included), and the span from the first's start to the last's end (CLOCK_MONOTONIC ns,
    // read inside llama_decode); 0 without a call.
    int64_t calls_recorded = 0, first_call_start_ns = 0, last_call_end_ns = 0;
    int64_t graphs = 0, cpu_graphs = 0;         // backend graphs, and CPU graphs (ggml_graph_compute)
    // Counts cover the recorded llama_decode calls (docs/trace-store.md, view call_graphs).
    int64_t operators = 0;                      // graph nodes executed, fused partners included
    int64_t op_records = 0;                     // per-thread node records
    int64_t op_types = 0;
    int64_t threads = 0;                        // distinct OS threads (tids) that ran nodes
    int64_t thread_slots = 0;                   // distinct ggml thread indices (ith): the compute width
    int64_t outside_calls = 0;                  // nodes recorded outside any call (in flight at attach)
    int64_t ops_untraced_calls = 0;             // calls an operator gate (--budget, QoS) left out, or begun while the operator probes went in
    int64_t sched_switches = 0, sched_wakeups = 0, expert_records = 0;
    int64_t cpu_samples = 0;  // --level op-sampled: samples taken in the CPU graphs
    double counters_valid_share = 0;            // ops whose counter deltas are known (no migration)
    // Each counter asked for: "counted", "read 0 on every operator: …" or "unavailable: reason".
    std::vector<std::pair<std::string, std::string>> counters;
    std::optional<double> ttft_ms;         // duration of the first prefill call; none without one
    std::optional<double> median_tpot_ms;  // median duration of the decode calls; none without any
    store::RunHealth health;  // status as it really is, losses per kind
    std::vector<std::string> attached_probes, missing_probes;  // "symbol (library): reason"

    static RunSummary load(store::Database& db);
    nlohmann::json to_json() const;  // keys documented in docs/cli.md; stable
    std::string to_text() const;
};

}  // namespace profinfer
