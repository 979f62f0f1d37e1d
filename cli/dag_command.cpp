#include <iostream>

#include "profinfer/dag.h"
#include "profinfer/error.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_dag(CLI::App& app, std::function<int()>& action) {
    struct Options {
        std::string db, out, block, colour = "time";
        int token = -1, layer = -1;
    };
    auto o = std::make_shared<Options>();
    auto* cmd = app.add_subcommand("dag", "ProfDAG: the operator graph of one decode iteration, coloured by time or bandwidth");
    cmd->footer(
        "Needs a recording at --level op or full. Nodes: operators (op, name, shape, time from the first\n"
        "thread's start to the last thread's end, bytes, counters summed over threads); edges: from the\n"
        "operator that produced each source; weights get none.\n"
        "Example: profinfer dag run.db --layer 3 --block attn -o attn.svg");
    cmd->add_option("db", o->db, "Trace database")->required();
    cmd->add_option("--token", o->token, "llama_decode call, from 0 (default: the middle decode call)")
        ->check(number_in(0, std::numeric_limits<double>::infinity()));
    cmd->add_option("--layer", o->layer, "Only this transformer layer")->check(number_in(0, std::numeric_limits<double>::infinity()));
    cmd->add_option("--block", o->block, "With --layer: attn or ffn")->check(CLI::IsMember({"attn", "ffn"}));
    cmd->add_option("--color,--colour", o->colour, "time or bandwidth")->check(CLI::IsMember({"time", "bandwidth"}))->capture_default_str();
    cmd->add_option("-o,--output", o->out, "out.dot, out.svg or out.json")->required();
    cmd->callback([&action, o] {
        action = [o] {
            store::Database d(o->db, store::Database::Mode::ReadOnly);  // the run, opened once
            warn_if_partial(d);
            TraceGraphs trace(d);
            int call = o->token >= 0 ? o->token : trace.default_call();
            Dag dag = Dag::build(trace, call);
            if (dag.nodes.empty())
                throw profinfer::Error("call " + std::to_string(call) + " has no operator records: record with --level op or full");
            dag = dag.filtered(o->layer >= 0 ? std::optional<int>(o->layer) : std::nullopt, o->block);
            dag.write(o->out, o->colour == "time" ? Dag::Colour::Time : Dag::Colour::Bandwidth, o->db);
            std::cerr << "profinfer: DAG of call " << call << ": " << dag.nodes.size() << " operators, " << dag.edges.size()
                      << " edges → " << o->out << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
