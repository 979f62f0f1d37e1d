#include "profinfer/output_file.h"
#include <fstream>
#include <iostream>

#include "profinfer/error.h"
#include "profinfer/timeline.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_timeline(CLI::App& app, std::function<int()>& action) {
    auto db = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("timeline", "ProfTime: the recording as a Chrome trace (open in ui.perfetto.dev)");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_option("-o,--output", *out, "trace.json")->required();
    cmd->callback([&action, db, out] {
        action = [db, out] {
            warn_if_partial(*db);
            auto j = timeline_json(*db);
            profinfer::OutputFile::write(*out, j.dump() + "\n");
            std::cerr << "profinfer: " << j["traceEvents"].size() << " trace events → " << *out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
