#include <iostream>

#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "subcommands.h"

namespace profinfer::cli {

void warn_if_partial(const std::filesystem::path& db) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    std::string w = store::health_warning(db, store::run_health(d));
    if (!w.empty()) std::cerr << w << "\n";
    if (std::string note = operator_sampling_note(d); !note.empty()) std::cerr << note << "\n";
}

}  // namespace profinfer::cli
