#include <iostream>

#include "profinfer/diff.h"
#include "subcommands.h"

namespace profinfer::cli {

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
        ->check(CLI::Range(0.0, 1000.0))->capture_default_str();
    cmd->add_option("--format", *format, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}))->capture_default_str();
    cmd->callback([&action, a, b, phase, format, threshold] {
        action = [a, b, phase, format, threshold] {
            warn_if_partial(*a);
            warn_if_partial(*b);
            std::cout << diff_table(*a, *b, *phase, *threshold).formatted(*format);
            return 0;
        };
    });
}

}  // namespace profinfer::cli
