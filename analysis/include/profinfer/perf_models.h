#pragma once
// The pieces of the performance models that the studies and the fit share: the weight
// MatMuls of a dense model's decode token from its card, and the MatMul line fitted for
// relative error. The fit itself is fit/ (`profinfer fit`); models.json is read back by
// perf_models_reader.hpp.
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

}  // namespace profinfer
