#include <iostream>

#include "profinfer/store.h"
#include "subcommands.h"

namespace profinfer::cli {

void warn_if_partial(const std::filesystem::path& db) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    std::string w = store::health_warning(db, store::run_health(d));
    if (!w.empty()) std::cerr << w << "\n";
}

}  // namespace profinfer::cli
