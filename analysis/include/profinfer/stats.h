#pragma once
// ProfStat (paper §4.3): tables over a recording — per op type, per operator name, per
// llama_decode call, per thread (compute vs wait, paper Fig. 6) and per expert (MoE
// activations and reuse distance, Fig. 13).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <optional>
#include <vector>

#include "profinfer/store.h"

#include "profinfer/table.h"

namespace profinfer {

// The ways `profinfer stat --by` cuts a recording, each with what its rows are: the one list
// the CLI's option and help follow, and docs/cli.md's table (checked by a test).
struct StatView {
    const char* name;
    const char* rows;
};
const std::vector<StatView>& stat_views();
// Their names, "a, b, c" with LAST_JOINER before the last (", or ", " or ").
std::string stat_view_names(const char* last_joiner = " or ");

// The table of view BY (every stat_views() name but roofline, which is roofline_table's, for
// it needs the machine's roofs). Throws profinfer::Error for another.
Table stats_table(store::Database& db, const std::string& by);

// How a trace splits a thread's part of a node into compute and wait, the one rule every
// view and study uses: exact where barriers were traced (--wait exact or both: a part's
// wait is end − compute end), else sampled where CPU-clock samples were taken (--wait
// sampled: the share of its samples in barrier code), else none (--level op: no split).
enum class WaitSplit { Exact, Sampled, None };
WaitSplit wait_split_of(store::Database& db);
const char* to_string(WaitSplit w);
// The wait share (%) of thread parts whose sums are given, by that rule; empty with none
// (or no time, or no sample).
std::optional<double> wait_share_pct(WaitSplit w, double wait_ns, double part_ns, double wait_samples, double samples);

// The Wilson score interval of a proportion K/N (95 % at z = 1.96): for shares estimated
// from samples (--wait sampled).
std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z = 1.96);

}  // namespace profinfer
