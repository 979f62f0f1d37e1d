#pragma once
// What the fit's models share (one file per model beside this one): the study tables they
// read, the weight-MatMul points by group, the MatMul line and its JSON, the held-out error
// statistics, and the context every model writes models.json and the README's tables into.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "profinfer/model_card.h"
#include "profinfer/machine_bench.h"
#include "profinfer/number_text.h"
#include "profinfer/perf_models.h"
#include "profinfer/regression.h"
#include "profinfer/stats.h"

namespace profinfer::fit {

namespace fs = std::filesystem;

// A study's CSV table; an error naming the study to run when it is missing.
Table read_table(const fs::path& f);
std::string text(const nlohmann::json& v);  // a cell as text, numbers included

// One weight-MatMul shape of matmul-dims/matmuls.csv: its median time (µs).
struct Point {
    std::string model;
    int64_t m = 0, n = 0, k = 0, h = 0;
    double us = 0;
};
// backend, type, threads, batch class (n=1 decode, n>1 prefill)
using GroupKey = std::tuple<std::string, std::string, int, std::string>;
using MatMulGroups = std::map<GroupKey, std::vector<Point>>;
MatMulGroups read_matmul_groups(const fs::path& matmuls_csv);

double bytes_per_elem(const std::string& type);
std::string compute_kind_of(const std::string& type);
LinearFit fit_points(const std::vector<const Point*>& pts);
nlohmann::json linear_json(const LinearFit& f);

// Held-out absolute errors (%): how many within ±10 %, the median and the 90th percentile.
struct ErrStats {
    size_t points = 0;
    double within_10pct = 0, median_abs_pct = 0, p90_abs_pct = 0;
};
ErrStats err_stats(const std::vector<double>& abs_pct);
nlohmann::json err_json(const ErrStats& e);

// The llama.cpp commit the sweep ran, from llama-bench's own output in the study's index.
std::string llama_commit(const fs::path& index);
// The facts of a study's sweep (its index.db: board, level, rounds, scale); none without one.
std::map<std::string, std::string> study_facts(const fs::path& study);
// The scale the study's models were synthesised at (its index's "scale"; full when it does
// not say): a card loaded at it has the shapes the points ran, not the real model's.
ModelCard::Scale study_scale(const fs::path& study);

struct FitContext {
    fs::path results_dir, out_dir;
    std::optional<MachineBench> machine;  // results_dir/machine.json, when measured
    nlohmann::json out;                   // models.json as it grows
    std::ostringstream md;                // the README's tables
};

// Each model adds its entries to c.out and its table to c.md.
Table fit_matmul(FitContext& c, const MatMulGroups& groups);  // out["matmul"]; returns the held-out predictions
void fit_offload(FitContext& c);                               // out["matmul"]: the Vulkan line (vulkan-offload)
Table fit_decode(FitContext& c, const MatMulGroups& groups);  // out["decode"]; returns the held-out models
// out["decode_roofs"] (decode-speed study + machine.json): the held-out predictions
Table fit_decode_roofs(FitContext& c);
void fit_context(FitContext& c);                               // out["attention"] (across-tokens)
void fit_moe(FitContext& c);                                   // out["moe"] (moe-experts, paper Fig. 13)
// Predicted against measured for the held-out MatMuls and models: the figures it wrote.
// CAPTION: the machine, level and rounds of the sweep (each figure adds its models).
std::vector<fs::path> draw_heldout(const fs::path& out_dir, const Table& matmul, const Table& decode,
                                   const std::string& caption);
// The decode model in machine terms, held out (fit_decode_roofs' table): the figure it wrote.
// FORMULA: the model's terms as the caption says them.
std::vector<fs::path> draw_decode_roofs(const fs::path& out_dir, const Table& heldout, const std::string& caption,
                                        const std::string& formula);

}  // namespace profinfer::fit
