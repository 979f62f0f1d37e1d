#pragma once
// The synthetic models' one naming rule in the cache: CACHE/models/CARD-TYPE[-ROUTING][-SCALE].gguf
// (ROUTING for MoE cards, without its colon: zipf1; SCALE when not full).
#include <filesystem>
#include <string>

namespace profinfer {

std::filesystem::path cached_model_path(const std::string& card, const std::string& type, const std::string& scale = "full",
                                        const std::string& moe_routing = "zipf:1");

}  // namespace profinfer
