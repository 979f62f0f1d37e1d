#pragma once
#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <limits>

#include "profinfer/store.h"

// Each add_* registers one subcommand on APP and, when it is the one parsed, sets
// ACTION to the function that carries it out.
namespace profinfer::cli {
void add_record(CLI::App& app, std::function<int()>& action);
void add_info(CLI::App& app, std::function<int()>& action);
void add_model(CLI::App& app, std::function<int()>& action);
void add_dag(CLI::App& app, std::function<int()>& action);
void add_timeline(CLI::App& app, std::function<int()>& action);
void add_export(CLI::App& app, std::function<int()>& action);
void add_stat(CLI::App& app, std::function<int()>& action);
void add_bench_machine(CLI::App& app, std::function<int()>& action);
void add_report(CLI::App& app, std::function<int()>& action);
void add_experiment(CLI::App& app, std::function<int()>& action);
void add_diff(CLI::App& app, std::function<int()>& action);
void add_fit(CLI::App& app, std::function<int()>& action);
void add_predict(CLI::App& app, std::function<int()>& action);
void add_plan(CLI::App& app, std::function<int()>& action);
void add_board(CLI::App& app, std::function<int()>& action);
void add_estimate(CLI::App& app, std::function<int()>& action);
void add_watch(CLI::App& app, std::function<int()>& action);

// Every analysis command reads its input through this first: one warning line on
// stderr for a run that is not complete or lost data; an error for a trace format newer
// than this profinfer.
void warn_if_partial(store::Database& db);
}  // namespace profinfer::cli

namespace profinfer::cli {
// A number from LO to HI (either may be infinite): NaN is refused, and the bounds are
// printed as a person would write them ("0 to 100", "at least 0"), not to 309 digits.
CLI::Validator number_in(double lo, double hi);
}  // namespace profinfer::cli
