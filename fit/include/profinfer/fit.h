#pragma once
// `profinfer fit`: the performance models (docs/models.md) from a results directory's
// studies — weight-MatMul time per backend, type, thread count and batch class (line in
// M·N·K·H beside the roofline, checked on held-out models), the Vulkan MatMul line, decode
// time per token from a model's hyperparameters (leave-one-model-out), what context adds,
// and MoE expert reuse against operator time. The fit stage sits above the experiments: it
// reads their tables and indexes. Written as models.json, read back by perf_models_reader.hpp.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace profinfer {

struct FitResult {
    nlohmann::json models;                       // what models.json holds
    std::string summary_md;                      // the tables of the fit, for the README
    std::vector<std::filesystem::path> written;  // figures and tables beside models.json
};

// Fits every model RESULTS_DIR has the studies for; writes figures and tables into
// OUT_DIR (the directory of models.json). Throws profinfer::Error naming what is missing.
FitResult fit_models(const std::filesystem::path& results_dir, const std::filesystem::path& out_dir);

}  // namespace profinfer
