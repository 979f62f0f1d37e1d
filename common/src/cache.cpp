#include "profinfer/cache.h"
#include "profinfer/knobs.h"

#include <cstdlib>

namespace profinfer {

std::filesystem::path cache_dir() {
    if (const auto c = knob(Knob::Cache); c && !c->empty()) return *c;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "profinfer";
}

}  // namespace profinfer
