#include <unistd.h>

#include <iostream>

#include "profinfer/board.h"
#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/probe_cost.h"
#include "profinfer/study_summary.h"
#include "profinfer/results_readme.h"
#include "subcommands.h"

namespace fs = std::filesystem;

namespace profinfer::cli {

void add_experiment(CLI::App& app, std::function<int()>& action) {
    auto* cmd = app.add_subcommand("experiment", "The experiment harness: run one study's sweep, resumably (docs/experiments.md)");
    cmd->require_subcommand(1);
    auto spec = std::make_shared<std::string>();
    auto board = std::make_shared<std::string>("host");
    auto out = std::make_shared<std::string>();
    auto quick = std::make_shared<bool>(false);
    auto dry = std::make_shared<bool>(false);
    auto rounds = std::make_shared<int>(0);
    auto* run = cmd->add_subcommand("run", "Record every point of SPEC (experiments/specs/*.toml) that is not done yet, "
                                           "then write its table and figures");
    run->add_option("spec", *spec, "Experiment spec (TOML)")->required()->check(CLI::ExistingFile);
    run->add_option("--board", *board, "Board the results are for: host, or the board profile this machine is (profinfer board detect); others --dry-run only")->capture_default_str();
    run->add_option("-o,--output", *out, "Results directory (default: results/BOARD/NAME)");
    run->add_flag("--quick", *quick, "The spec's quick sweep; points this machine cannot run are skipped with the reason");
    run->add_flag("--dry-run", *dry, "Print the points and their commands; run nothing (any board)");
    run->add_option("--rounds", *rounds,
                    "Interleaved rounds (each records every point once, in an order that changes between rounds); "
                    "default: the spec's rounds (5), or quick_rounds (2) with --quick")
        ->check(CLI::Range(1, 1000));
    run->footer("A run resumes where an earlier one stopped, per (point, round). The summary gives per point the median\n"
                "of each metric over the rounds with a 95 % bootstrap interval (none below 5 rounds), and computes the\n"
                "verdict of each of the spec's [[claim]]s (verdicts.csv, table.md).");
    run->callback([&action, spec, board, out, quick, dry, rounds] {
        action = [spec, board, out, quick, dry, rounds] {
            auto s = ExperimentSpec::load(*spec);
            RunOptions opt;
            opt.profinfer = self_executable();
            opt.board = *board;
            opt.quick = *quick;
            opt.dry_run = *dry;
            opt.rounds = *rounds;
            opt.out_dir = out->empty() ? fs::path("results") / *board / s.name : fs::path(*out);
            if (*board != "host") {  // a board with no profile: the error lists the known ones
                const BoardProfile profile = board_profile(*board);
                opt.pin_cpus = profile.pin_cpus;
                opt.counters = profile.counter_list();
                opt.backends = profile.backends;
                opt.backend_notes = profile.backend_notes;
                if (!profile.scale.empty()) s.scale = profile.scale;  // e.g. tiny on an emulated board
            }
            if (*board != "host" && !*dry) {
                const auto here = detect_board(MachineFacts::read(), board_profiles());
                if (here.name != *board)
                    throw Error("board '" + *board + "' is not this machine (this is '" + here.name + "': " + here.why +
                                "); run it on the board, or add --dry-run to see its plan");
            }
            if (!*dry) {
                // Which machine records the study, and what a uprobe trap costs on it (root and
                // uprobes; unmeasured otherwise): its index keeps both, its README says them.
                opt.machine = MachineFacts::read().identity();
                try {
                    opt.trap_ns = measure_probe_costs(0.3).trap_ns;
                } catch (const Error&) {
                }
            }
            auto rep = run_experiment(s, opt);
            if (*dry) return 0;
            std::cerr << "profinfer: " << s.name << ": " << rep.done << " recorded, " << rep.already_done
                      << " already done, " << rep.skipped << " skipped, " << rep.failed << " failed of " << rep.points
                      << " points × " << rep.rounds << " rounds\n";
            if (rep.done + rep.already_done > 0) {
                for (const auto& f : summarise_experiment(s, opt.out_dir, *quick)) std::cerr << "  " << f.string() << "\n";
            }
            return rep.failed > 0 ? 1 : 0;
        };
    });
    auto dir = std::make_shared<std::string>();
    auto* readme = cmd->add_subcommand("readme", "Write RESULTS_DIR/README.md whole from the studies summarised there: every "
                                                 "claim's verdict, each study's rounds and spread (nothing typed by hand)");
    readme->add_option("results_dir", *dir, "results/BOARD (or results/BOARD/quick)")->required()->check(CLI::ExistingDirectory);
    readme->callback([&action, dir] {
        action = [dir] {
            std::cout << write_results_readme(*dir).string() << "\n";
            return 0;
        };
    });
    auto farm = std::make_shared<std::string>();
    auto* merge = cmd->add_subcommand("merge", "Merge what make farm brought back (FARM/<board>/<study>/index.db) into "
                                               "FARM/farm.db and write each study's boards side by side into FARM/compare/");
    merge->add_option("farm_dir", *farm, "The farm's results (make farm's FARM_RESULTS)")->required()->check(CLI::ExistingDirectory);
    merge->callback([&action, farm] {
        action = [farm] {
            const FarmMerge m = merge_farm(*farm);
            std::cerr << "profinfer: " << (fs::path(*farm) / "farm.db").string() << ": " << m.runs << " runs of " << m.boards
                      << " boards\n";
            for (const auto& f : m.written) std::cout << f.string() << "\n";
            return 0;
        };
    });
    auto* sum = cmd->add_subcommand("summarise", "Write the table and figures of an experiment from what it has recorded");
    sum->add_option("spec", *spec, "Experiment spec (TOML)")->required()->check(CLI::ExistingFile);
    sum->add_option("--board", *board, "Board the results are for")->capture_default_str();
    sum->add_option("-o,--output", *out, "Results directory (default: results/BOARD/NAME)");
    sum->add_flag("--quick", *quick, "Summarise the quick sweep's points");
    auto dropped = std::make_shared<int>(0);
    sum->add_option("--drop-first-calls", *dropped,
                    "Leave the first N llama_decode calls of each phase (prompt, decode) of each trace out of its metrics, "
                    "a phase keeping its last call (a run's warm-up: its first page faults); without the traces, what "
                    "the index kept for that N")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    sum->callback([&action, spec, board, out, quick, dropped] {
        action = [spec, board, out, quick, dropped] {
            const auto s = ExperimentSpec::load(*spec);
            const fs::path dir = out->empty() ? fs::path("results") / *board / s.name : fs::path(*out);
            for (const auto& f : summarise_experiment(s, dir, *quick, *dropped)) std::cout << f.string() << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
