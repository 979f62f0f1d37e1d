// profinfer: one command-line program, one subcommand per job (docs/architecture.md).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/knobs.h"
#include "profinfer/recorder.h"
#include "subcommands.h"

namespace {
std::string first_line(std::string s) {
    if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
    return s;
}
}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "profinfer — eBPF profiler for unmodified llama.cpp: records tokens, graphs, operators,\n"
        "scheduler events and counters into SQLite, and analyses the recordings."};
    app.require_subcommand(1);
    app.set_version_flag("--version", PROFINFER_VERSION);
    app.footer(profinfer::knobs_help({{"eval-callback peer", profinfer::evalcb_peer().string()}}));

    std::function<int()> action;
    profinfer::cli::add_record(app, action);
    profinfer::cli::add_estimate(app, action);
    profinfer::cli::add_watch(app, action);
    profinfer::cli::add_info(app, action);
    profinfer::cli::add_dag(app, action);
    profinfer::cli::add_timeline(app, action);
    profinfer::cli::add_export(app, action);
    profinfer::cli::add_stat(app, action);
    profinfer::cli::add_bench_machine(app, action);
    profinfer::cli::add_report(app, action);
    profinfer::cli::add_model(app, action);
    profinfer::cli::add_diff(app, action);
    profinfer::cli::add_experiment(app, action);
    profinfer::cli::add_fit(app, action);
    profinfer::cli::add_predict(app, action);
    profinfer::cli::add_plan(app, action);
    profinfer::cli::add_board(app, action);

    // A reader that goes away (gnuplot, dot, `| head`) is an error to report, not a signal to die of.
    signal(SIGPIPE, SIG_IGN);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "profinfer: error: " << first_line(e.what()) << " (see profinfer "
                  << (app.get_subcommands().empty() ? std::string() : app.get_subcommands().front()->get_name() + " ")
                  << "--help)\n";
        return 2;
    } catch (const profinfer::Error& e) {  // an option's value refused while parsing (e.g. --memory-limit)
        std::cerr << "profinfer: error: " << e.what() << "\n";
        return 2;
    }
    try {
        int status = action ? action() : 0;
        // Output redirected to a full disk must not look like success.
        std::cout.flush();
        if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout))
            throw profinfer::Error(std::string("writing standard output: ") + std::strerror(errno ? errno : EIO));
        return status;
    } catch (const profinfer::Error& e) {
        std::cerr << "profinfer: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "profinfer: internal error: " << e.what() << "\n";
        return 2;
    }
}
