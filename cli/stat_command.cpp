#include <iostream>

#include "profinfer/stats.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_stat(CLI::App& app, std::function<int()>& action) {
    auto db = std::make_shared<std::string>();
    auto by = std::make_shared<std::string>("op-type");
    auto format = std::make_shared<std::string>("table");
    auto* cmd = app.add_subcommand("stat", "ProfStat: statistics per op type, operator, call, thread or expert");
    cmd->footer(
        "op-type/op: critical-path time (first thread start to last thread compute end) and share;\n"
        "token: per llama_decode call, MatMul and KQ/KQV time; thread: compute vs wait per op type and\n"
        "thread index (wait needs --level full); expert: MoE activations and reuse distance (--level full).");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_option("--by", *by, "op-type, op, token, thread or expert")
        ->check(CLI::IsMember({"op-type", "op", "token", "thread", "expert"}))
        ->capture_default_str();
    cmd->add_option("--format", *format, "table, csv or json")->check(CLI::IsMember({"table", "csv", "json"}))->capture_default_str();
    cmd->callback([&action, db, by, format] {
        action = [db, by, format] {
            Table t = stats_table(*db, *by);
            if (*format == "csv")
                std::cout << t.to_csv();
            else if (*format == "json")
                std::cout << t.to_json().dump(1) << "\n";
            else
                std::cout << t.to_text();
            return 0;
        };
    });
}

}  // namespace profinfer::cli
