#include <iostream>

#include "profinfer/error.h"
#include "profinfer/report.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_report(CLI::App& app, std::function<int()>& action) {
    auto in = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>("report.html");
    auto machine = std::make_shared<std::string>("machine.json");
    auto* cmd = app.add_subcommand("report", "One self-contained HTML report of a run (or of every .db under a directory)");
    cmd->add_option("input", *in, "run.db or a results directory")->required();
    cmd->add_option("-o,--output", *out, "HTML file")->capture_default_str();
    cmd->add_option("--machine", *machine, "Roofs from profinfer bench-machine (roofline omitted if absent)")
        ->capture_default_str();
    cmd->callback([&action, in, out, machine] {
        action = [in, out, machine] {
            write_report(*in, *out, *machine);  // each run opened once, its warnings said as it is read
            std::cerr << "profinfer: report → " << *out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
