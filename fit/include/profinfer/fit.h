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

#include "profinfer/machine_bench.h"
#include "profinfer/perf_models.h"

namespace profinfer {

// The roofs a decode model in the machine's terms divides by, for weights of TYPE, from one
// thread count's bench-machine roofs (its kernel's rates where it measured TYPE's kernel): the
// fit reads the fitting machine's this way, `predict --machine` another machine's.
perf::Models::DecodeRoofs decode_roofs_of(const MachineRoof& r, const std::string& type);

struct FitResult {
    nlohmann::json models;                       // what models.json holds
    std::string summary_md;                      // the tables of the fit, for the README
    std::vector<std::filesystem::path> written;  // figures and tables beside models.json
};

// Fits every model RESULTS_DIR has the studies for; writes figures and tables into
// OUT_DIR (the directory of models.json). Throws profinfer::Error naming what is missing.
FitResult fit_models(const std::filesystem::path& results_dir, const std::filesystem::path& out_dir);

}  // namespace profinfer
