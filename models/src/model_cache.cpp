#include "profinfer/model_cache.h"

#include <algorithm>

#include "profinfer/model_card.h"
#include "profinfer/cache.h"

namespace profinfer {

std::filesystem::path cached_model_path(const std::string& card, const std::string& type, const std::string& scale,
                                        const std::string& moe_routing) {
    const bool moe = ModelCard::load(card, ModelCard::parse_scale(scale)).experts > 0;
    std::string routing = moe_routing;
    routing.erase(std::remove(routing.begin(), routing.end(), ':'), routing.end());
    return cache_dir() / "models" /
           (card + "-" + type + (moe ? "-" + routing : "") + (scale == "full" ? "" : "-" + scale) + ".gguf");
}

}  // namespace profinfer
