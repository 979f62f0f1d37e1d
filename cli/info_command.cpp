#include <iostream>

#include "profinfer/run_summary.h"
#include "profinfer/text_escape.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_info(CLI::App& app, std::function<int()>& action) {
    auto db = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("info", "Summarise a recorded run: tokens, TTFT, TPOT, probes, lost events");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_flag("--json", *json, "JSON with the stable keys documented in docs/cli.md");
    cmd->callback([&action, db, json] {
        action = [db, json] {
            store::Database d(*db, store::Database::Mode::ReadOnly);  // the run, opened once
            warn_if_partial(d);
            auto s = RunSummary::load(d);
            if (*json)
                std::cout << json_text(s.to_json(), 2) << "\n";
            else
                std::cout << s.to_text();
            return 0;
        };
    });
}

}  // namespace profinfer::cli
