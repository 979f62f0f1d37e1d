#pragma once
#include <CLI/CLI.hpp>
#include <functional>

// Each add_* registers one subcommand on APP and, when it is the one parsed, sets
// ACTION to the function that carries it out.
namespace profinfer::cli {
void add_record(CLI::App& app, std::function<int()>& action);
void add_info(CLI::App& app, std::function<int()>& action);
void add_model(CLI::App& app, std::function<int()>& action);
void add_dag(CLI::App& app, std::function<int()>& action);
void add_timeline(CLI::App& app, std::function<int()>& action);
void add_stat(CLI::App& app, std::function<int()>& action);
void add_bench_machine(CLI::App& app, std::function<int()>& action);
void add_report(CLI::App& app, std::function<int()>& action);
}  // namespace profinfer::cli
