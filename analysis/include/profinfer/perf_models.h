#pragma once
// The performance models `profinfer fit` exports (docs/models.md): from a results
// directory's sweeps (matmul-dims/matmuls.csv and table.csv, machine.json), least squares
// per backend, weight type, thread count and batch class for weight-MatMul time against
// M·N·K·H, beside a roofline-shaped model on the measured roofs, each checked on held-out
// models; and decode time per token from a model's hyperparameters, validated
// leave-one-model-out. Written as models.json, read back by perf_models_reader.hpp.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profinfer/perf_models_reader.hpp"
#include "profinfer/regression.h"

namespace profinfer {

struct ModelCard;

// The weight MatMuls of one decode token of a dense model (N = 1), from its card:
// Q, K, V, attention output, FFN gate, up and down per layer, and the output head.
// Throws profinfer::Error for an MoE card (its expert MatMuls are MUL_MAT_ID).
std::vector<perf::MatMulShape> card_matmuls(const ModelCard& card);

// Weight-MatMul time (µs) = intercept_us + us_per_mnkh · M·N·K·H, least squares for
// relative error (weights 1/time²: shapes span four orders of magnitude and each should
// be predicted to the same percentage). The one line the Fig. 10 study and `fit` both draw.
LinearFit fit_matmul_line(const std::vector<double>& mnkh, const std::vector<double>& us);

struct FitResult {
    nlohmann::json models;                       // what models.json holds
    std::string summary_md;                      // the tables of the fit, for the README
    std::vector<std::filesystem::path> written;  // figures and tables beside models.json
};

// Fits every model RESULTS_DIR has the sweeps for; writes figures and tables into
// OUT_DIR (the directory of models.json). Throws profinfer::Error naming what is missing.
FitResult fit_models(const std::filesystem::path& results_dir, const std::filesystem::path& out_dir);

}  // namespace profinfer
