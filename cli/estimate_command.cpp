#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "profinfer/probe_cost.h"
#include "profinfer/recorder.h"
#include "profinfer/tracing_cost.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_estimate(CLI::App& app, std::function<int()>& action) {
    auto trace = std::make_shared<std::string>();
    auto seconds = std::make_shared<double>(1.0);
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand(
        "estimate",
        "Predict each recording level's slowdown of a target's decode on this machine, before recording it at that "
        "level: this machine's probe-hit and sample costs, measured now on profinfer itself (root), times what one "
        "decode call of the target hits (from TRACE: a recording of it at any level; a few calls are enough)");
    cmd->add_option("trace", *trace,
                    "A recording of the target: op or full predict every level; graph and op-sampled (no node count) up "
                    "to op-sampled; token the token level only")
        ->required();
    cmd->add_option("--seconds", *seconds, "How long to measure the costs (about; split among the measures)")
        ->check(number_in(0.1, 60))
        ->capture_default_str();
    cmd->add_flag("--json", *json, "JSON instead of a table");
    cmd->footer(
        "Model: a probe hit costs the hitting thread the measured hit (trap and handler, after the caches were streamed "
        "through, as between a decode's nodes); token level hits llama_decode's entry and return, graph level each "
        "graph's too, op level every node on every thread (each thread pays its own, in parallel); a CPU-clock sample "
        "costs the sampled thread the measured sample (full's wait split at record's default --sample-hz; op-sampled "
        "the same where it cannot sample on the kernel's tick, and its record only where it can); the recorder stores every record on the target's CPUs (predicted_slowdown_pct: no CPU spare) or "
        "on another (with_a_spare_cpu_pct), except at op and full, whose default (--consumer hold) holds the records "
        "while no CPU is spare and stores them when one idles or at the end (stored_as_read_pct: --consumer idle, on "
        "the target's CPUs). Not counted: scheduler events (full), start-up before the first decode, the storing "
        "after the end. docs/recording.md.");
    cmd->callback([&action, trace, seconds, json] {
        action = [trace, seconds, json] {
            store::Database db(*trace, store::Database::Mode::ReadOnly);
            warn_if_partial(db);
            const WorkloadFacts f = workload_facts(db);
            std::cerr << "profinfer: measuring this machine's probe and sample costs (" << *seconds << " s)\n";
            const ProbeCosts c = measure_probe_costs(*seconds);
            const RecordOptions defaults;
            // op-sampled as record's default takes it: on the kernel's tick where it can.
            const bool on_tick = c.tick_hz > 0;
            const auto levels = estimate_levels(f, HitCosts{c.trap_ns, c.node_hit_ns, c.sample_ns, c.cold_hit_ns, c.record_ns},
                                                on_tick ? c.tick_hz : int(defaults.op_sample_hz), int(defaults.sample_hz), on_tick);
            if (*json) {
                nlohmann::json j{{"trace", *trace},
                                 {"threads", f.threads},
                                 {"nodes_per_thread", f.nodes_per_thread},
                                 {"graphs_per_call", f.graphs_per_call},
                                 {"traced_call_ms", f.traced_call_ms},
                                 {"trap_ns", c.trap_ns},
                                 {"hit_ns", c.node_hit_ns},
                                 {"cold_hit_ns", c.cold_hit_ns},
                                 {"sample_ns", c.sample_ns},
                                 {"record_ns", c.record_ns},
                                 {"op_sampled_on_tick_hz", c.tick_hz},
                                 {"levels", nlohmann::json::array()}};
                for (const auto& e : levels)
                    j["levels"].push_back({{"level", e.level},
                                           {"hits_per_call", e.hits_per_call},
                                           {"samples_per_call", e.samples_per_call},
                                           {"records_per_call", e.records_per_call},
                                           {"added_us", e.added_us},
                                           {"recorder_us", e.recorder_us},
                                           {"slowdown_pct", e.slowdown_pct},
                                           {"held", e.held},
                                           {"stored_as_read_slowdown_pct", e.stored_as_read_slowdown_pct},
                                           {"spare_cpu_slowdown_pct", e.spare_cpu_slowdown_pct}});
                std::cout << j.dump(2) << "\n";
                return 0;
            }
            auto known = [](double v) {
                std::ostringstream o;
                if (std::isnan(v)) return std::string("?");
                o << std::fixed << std::setprecision(2) << v;
                return o.str();
            };
            std::cout << std::fixed << std::setprecision(2) << "this machine: probe hit " << c.cold_hit_ns
                      << " ns between streamed caches (" << c.node_hit_ns << " ns hot, the trap alone " << c.trap_ns
                      << " ns), CPU-clock sample " << c.sample_ns << " ns, a record stored " << c.record_ns << " ns\n"
                      << "the target (" << *trace << ", --level " << f.level << "): " << known(f.threads) << " threads, "
                      << known(f.nodes_per_thread) << " nodes per thread and decode call, " << known(f.graphs_per_call)
                      << " graphs per call, " << f.traced_call_ms << " ms per call as traced\n"
                      << "level       hits/call  samples/call  records/call  added_us  predicted_slowdown_pct  "
                         "stored_as_read_pct  with_a_spare_cpu_pct\n";
            for (const auto& e : levels)
                std::cout << std::left << std::setw(12) << e.level << std::right << std::setw(9) << e.hits_per_call
                          << std::setw(14) << e.samples_per_call << std::setw(14) << e.records_per_call << std::setw(10)
                          << e.added_us << std::setw(24) << e.slowdown_pct << std::setw(20)
                          << e.stored_as_read_slowdown_pct << std::setw(22) << e.spare_cpu_slowdown_pct << "\n";
            if (levels.size() < 5)
                std::cout << "(levels left out: a --level " << f.level << " trace does not tell "
                          << (std::isnan(f.graphs_per_call) ? "its graphs" : "its nodes") << ")\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
