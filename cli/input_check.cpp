#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "profinfer/number_text.h"
#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "subcommands.h"

namespace profinfer::cli {

void warn_if_partial(store::Database& d) {
    std::string w = store::health_warning(d.path(), store::run_health(d));
    if (!w.empty()) std::cerr << w << "\n";
    if (std::string note = operator_sampling_note(d); !note.empty()) std::cerr << note << "\n";
}

CLI::Validator number_in(double lo, double hi) {
    auto show = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%g", v);
        return std::string(b);
    };
    const std::string range = std::isinf(hi) ? "at least " + show(lo) : show(lo) + " to " + show(hi);
    return CLI::Validator(
        [lo, hi, range](std::string& text) -> std::string {
            size_t used = 0;
            const double v = leading_number(text, &used).value_or(0);
            if (!used || used != text.size() || std::isnan(v) || v < lo || v > hi)
                return "'" + text + "' is not a number " + range;
            return {};
        },
        "NUMBER " + range);
}

}  // namespace profinfer::cli
