#pragma once
// ProfStat (paper §4.3): tables over a recording — per op type, per operator name, per
// llama_decode call, per thread (compute vs wait, paper Fig. 6) and per expert (MoE
// activations and reuse distance, Fig. 13).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace profinfer {

struct Table {
    std::vector<std::string> columns;
    std::vector<std::vector<nlohmann::json>> rows;  // numbers or strings

    std::string to_text() const;  // aligned columns
    std::string to_csv() const;
    nlohmann::json to_json() const;
    // The table as FORMAT: table (aligned text), csv or json — what --format chooses.
    std::string formatted(const std::string& format) const;  // array of objects keyed by column

    // The inverse of to_csv: a header line, then rows; numbers become numbers, empty cells
    // null. Throws profinfer::Error on a row whose width differs from the header's.
    static Table from_csv(const std::string& text);
    // Column index by name; throws profinfer::Error when absent.
    size_t column(const std::string& name) const;
};

// BY: op-type, op, token, thread, expert, expert-reuse, expert-step, expert-call, matmul. Throws profinfer::Error for another.
Table stats_table(const std::filesystem::path& db, const std::string& by);

// The Wilson score interval of a proportion K/N (95 % at z = 1.96): for shares estimated
// from samples (--wait sampled).
std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z = 1.96);

}  // namespace profinfer
