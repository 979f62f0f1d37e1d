#include <iostream>
#include <sstream>

#include "profinfer/diff.h"
#include "profinfer/store.h"
#include "subcommands.h"

namespace profinfer::cli {

namespace {
// The model a recorded command ran (-m/--model FILE), by file name; "" when not given.
std::string model_of(const std::string& command) {
    std::istringstream words(command);
    std::string w, prev;
    while (words >> w) {
        if (prev == "-m" || prev == "--model") return std::filesystem::path(w).filename().string();
        if (w.rfind("--model=", 0) == 0) return std::filesystem::path(w.substr(8)).filename().string();
        prev = w;
    }
    return "";
}

// Two recordings of other models or levels differ for reasons no operator explains: said
// in one line, and compared all the same (by op type and operator name).
void warn_if_unrelated(store::Database& da, store::Database& db) {
    const auto& a = da.path();
    const auto& b = db.path();
    auto ma = da.meta(), mb = db.meta();
    std::vector<std::string> differ;
    using K = store::MetaKey;
    const std::string model_a = model_of(ma[K::Command]), model_b = model_of(mb[K::Command]);
    if (model_a != model_b) differ.push_back("model " + model_a + " vs " + model_b);
    if (ma[K::Level] != mb[K::Level]) differ.push_back("level " + ma[K::Level] + " vs " + mb[K::Level]);
    if (ma[K::Host] != mb[K::Host]) differ.push_back("host " + ma[K::Host] + " vs " + mb[K::Host]);
    if (differ.empty()) return;
    std::string line;
    for (const auto& d : differ) line += (line.empty() ? "" : ", ") + d;
    std::cerr << "profinfer: warning: " << a.string() << " and " << b.string() << " are not runs of one setup (" << line
              << "): differences include more than what changed\n";
}
}  // namespace

void add_diff(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<std::string>();
    auto b = std::make_shared<std::string>();
    auto phase = std::make_shared<std::string>("decode");
    auto format = std::make_shared<std::string>("table");
    auto threshold = std::make_shared<double>(5.0);
    auto* cmd = app.add_subcommand("diff", "What got faster or slower from A to B, per op type and per operator");
    cmd->footer("Times are per llama_decode call of the phase compared, so runs of different lengths compare;\n"
                "change_pct = (B - A) / A; verdict: faster or slower beyond --threshold, else same.");
    cmd->add_option("a", *a, "Trace database A (the baseline)")->required();
    cmd->add_option("b", *b, "Trace database B")->required();
    cmd->add_option("--phase", *phase, "decode, prefill or all")->check(CLI::IsMember({"decode", "prefill", "all"}))
        ->capture_default_str();
    cmd->add_option("--threshold", *threshold, "Percent change below which a row is 'same'")
        ->check(number_in(0, 1000))->capture_default_str();
    cmd->add_option("--format", *format, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}))->capture_default_str();
    cmd->callback([&action, a, b, phase, format, threshold] {
        action = [a, b, phase, format, threshold] {
            store::Database da(*a, store::Database::Mode::ReadOnly), db(*b, store::Database::Mode::ReadOnly);
            warn_if_partial(da);
            warn_if_partial(db);
            warn_if_unrelated(da, db);
            std::cout << diff_table(da, db, *phase, *threshold).formatted(*format);
            return 0;
        };
    });
}

}  // namespace profinfer::cli
