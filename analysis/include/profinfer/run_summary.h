#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

// What `profinfer info` shows: one run's headline numbers, from the store only.
struct RunSummary {
    std::map<std::string, std::string> meta;
    int64_t tokens = 0;  // tokens processed (sum of batch sizes)
    int64_t decode_calls = 0, prefill_calls = 0;
    int64_t graphs = 0, cpu_graphs = 0;         // backend graphs, and CPU graphs (ggml_graph_compute)
    int64_t operators = 0;                      // graph nodes executed (nodes table)
    int64_t op_records = 0;                     // per-thread node records (ops table)
    int64_t op_types = 0, threads = 0;
    int64_t sched_switches = 0, sched_wakeups = 0, expert_records = 0;
    double counters_valid_share = 0;            // ops whose counter deltas are known (no migration)
    double ttft_ms = 0;         // duration of the first prefill call
    double median_tpot_ms = 0;  // median duration of the decode calls
    store::RunHealth health;  // status as it really is, losses per kind
    std::vector<std::string> attached_probes, missing_probes;  // "symbol (library): reason"

    static RunSummary load(const std::filesystem::path& db);
    nlohmann::json to_json() const;  // keys documented in docs/cli.md; stable
    std::string to_text() const;
};

}  // namespace profinfer
