// profinfer: one command-line program, one subcommand per job (architecture.md).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "profinfer/error.h"
#include "profinfer/recorder.h"
#include "subcommands.h"

int main(int argc, char** argv) {
    CLI::App app{
        "profinfer — eBPF profiler for unmodified llama.cpp: records tokens, graphs, operators,\n"
        "scheduler events and counters into SQLite, and analyses the recordings."};
    app.require_subcommand(1);
    app.set_version_flag("--version", PROFINFER_VERSION);

    std::function<int()> action;
    profinfer::cli::add_record(app, action);
    profinfer::cli::add_info(app, action);
    profinfer::cli::add_dag(app, action);
    profinfer::cli::add_timeline(app, action);
    profinfer::cli::add_stat(app, action);
    profinfer::cli::add_bench_machine(app, action);
    profinfer::cli::add_report(app, action);
    profinfer::cli::add_model(app, action);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        return action ? action() : 0;
    } catch (const profinfer::Error& e) {
        std::cerr << "profinfer: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "profinfer: internal error: " << e.what() << "\n";
        return 2;
    }
}
