#include "profinfer/cache.h"

#include <cstdlib>

namespace profinfer {

std::filesystem::path cache_dir() {
    if (const char* c = std::getenv("PROFINFER_CACHE"); c && *c) return c;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "profinfer";
}

}  // namespace profinfer
