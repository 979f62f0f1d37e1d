#pragma once
#include <string>

namespace profinfer {

// llama.cpp names a layer's tensors "<what>-<layer>": "ffn_moe_up-12" → 12; -1 when the
// name has no layer suffix ("norm", "result_output").
int layer_of(const std::string& name);

}  // namespace profinfer
