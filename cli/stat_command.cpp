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
    cmd->footer(
        "op-type/op: operator time (view node_times, docs/trace-store.md) and share;\n"
        "token: per llama_decode call, MatMul and attention time; block: per layer, attention (norm to the\n"
        "residual ADD closing it), ffn or moe, and the rest outside the layers (view block_times); request: per\n"
        "request a server served (its batches' sequence ids: llama-server, llama-parallel): prompt and\n"
        "generated tokens, time to first token, time per output token, operator time by token share; thread: compute vs wait per op type and\n"
        "thread index (wait needs --level full); expert: MoE activations and reuse distance (--level full);\n"
        "expert-reuse: decode's reuse-distance histogram over every layer and expert (--level full);\n"
        "expert-step: the experts each layer used at each decode step (--level full);\n"
        "expert-call: per call and MoE node, its time and its experts' mean reuse distance (Fig. 13);\n"
        "matmul: each weight MatMul's median time by M, N, K, H (the KQ/KQV attention MatMuls left out);\n"
        "gpu: a GPU-API backend's host side (Vulkan): node dispatches per op type, submits, fence waits;\n"
        "roofline: intensity, achieved vs this machine's roof (--machine, from profinfer bench-machine) and\n"
        "a verdict per operator: memory-bound, compute-bound or overhead-dominated.");
    cmd->add_option("db", *db, "Trace database")->required();
    cmd->add_option("--by", *by, "op-type, op, token, block, request, thread, expert, expert-reuse, expert-step, expert-call, matmul, gpu or roofline")
        ->check(CLI::IsMember({"op-type", "op", "token", "block", "request", "thread", "expert", "expert-reuse", "expert-step", "expert-call", "matmul", "gpu", "roofline"}))
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
