#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>

#include "profinfer/gguf_writer.h"
#include "profinfer/model_card.h"
#include "profinfer/moe_routing.h"

namespace profinfer {

struct SynthOptions {
    gguf::TensorType type = gguf::TensorType::F16;  // type of the weight matrices
    uint64_t seed = 42;
    MoeRouting routing;  // MoE cards only: how tokens choose experts (moe_routing.h)
    // Called with (bytes written, total bytes) while writing; may be empty.
    std::function<void(uint64_t, uint64_t)> progress;
};

// The GGUF layout (metadata, tokenizer, tensors with the real shapes) of a card.
gguf::Layout model_layout(const ModelCard& card, gguf::TensorType type);

// Writes a GGUF v3 model for CARD to OUT: streamed, deterministic for a given seed,
// and atomic — on any failure (including SIGINT/SIGTERM) no file is left at OUT.
// Returns the file size.
uint64_t synthesise_model(const ModelCard& card, const SynthOptions& opts, const std::filesystem::path& out);

}  // namespace profinfer
