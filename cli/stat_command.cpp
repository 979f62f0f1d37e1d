#include <iostream>

#include "profinfer/roofline.h"
#include "profinfer/stats.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_stat(CLI::App& app, std::function<int()>& action) {
    auto db = std::make_shared<std::string>();
    auto by = std::make_shared<std::string>("op-type");
    auto format = std::make_shared<std::string>("table");
    auto machine = std::make_shared<std::string>("machine.json");
    auto* cmd = app.add_subcommand("stat", "ProfStat: statistics per op type, operator, call, block, thread, expert or GPU-backend host event");
    std::string footer;
    std::vector<std::string> names;
    for (const auto& v : stat_views()) {
        footer += std::string(footer.empty() ? "" : ";\n") + v.name + ": " + v.rows;
        names.push_back(v.name);
    }
    cmd->footer(footer + ".");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_option("--by", *by, stat_view_names())
        ->check(CLI::IsMember(names))
        ->capture_default_str();
    cmd->add_option("--format", *format, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}))->capture_default_str();
    cmd->add_option("--machine", *machine, "Roofs for --by roofline (profinfer bench-machine -o FILE)")->capture_default_str();
    cmd->callback([&action, db, by, format, machine] {
        action = [db, by, format, machine] {
            store::Database d(*db, store::Database::Mode::ReadOnly);  // the run, opened once
            warn_if_partial(d);
            Table t = *by == "roofline" ? roofline_table(d, MachineBench::load(*machine)) : stats_table(d, *by);
            std::cout << t.formatted(*format);
            if (*by == "request" && t.rows.empty())
                std::cerr << "profinfer: no requests: this recording's llama_decode batches carry no sequence ids "
                             "(llama_batch_get_one, as llama-simple and llama-bench use); they come from a server's "
                             "batches (llama-server, llama-parallel)\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
