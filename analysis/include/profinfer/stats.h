#pragma once
// ProfStat (paper §4.3): tables over a recording — per op type, per operator name, per
// llama_decode call, per thread (compute vs wait, paper Fig. 6) and per expert (MoE
// activations and reuse distance, Fig. 13).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "profinfer/table.h"

namespace profinfer {

// BY: op-type, op, token, thread, expert, expert-reuse, expert-step, expert-call, matmul. Throws profinfer::Error for another.
Table stats_table(const std::filesystem::path& db, const std::string& by);

// The Wilson score interval of a proportion K/N (95 % at z = 1.96): for shares estimated
// from samples (--wait sampled).
std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z = 1.96);

}  // namespace profinfer
