#include "profinfer/output_file.h"
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "profinfer/error.h"
#include "profinfer/machine_bench.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_bench_machine(CLI::App& app, std::function<int()>& action) {
    auto out = std::make_shared<std::string>("machine.json");
    auto threads = std::make_shared<std::vector<int>>();
    auto quick = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("bench-machine", "Measure this machine's roofs: triad memory bandwidth and peak arithmetic rate per kind (f32, f16, bf16, int8)");
    cmd->add_option("-o,--output", *out, "JSON file to write")->capture_default_str();
    cmd->add_option("--threads", *threads, "Thread counts to measure (default: 1 .. number of CPUs)");
    cmd->add_flag("--quick", *quick, "Smaller arrays and fewer repetitions (seconds, less exact)");
    cmd->callback([&action, out, threads, quick] {
        action = [out, threads, quick] {
            std::vector<int> t = *threads;
            if (t.empty())
                for (int i = 1; i <= int(std::thread::hardware_concurrency()); ++i) t.push_back(i);
            auto m = MachineBench::run(t, *quick);
            profinfer::OutputFile::write(*out, m.to_json().dump(2) + "\n");
            std::cerr << "units: " << m.isa << "\n";
            for (const auto& r : m.roofs) {
                std::cerr << r.threads << " threads: triad " << r.triad_gbs << " GB/s; peak G ops/s";
                for (const auto& [kind, g] : r.peak_gops) std::cerr << " " << kind << " " << g;
                std::cerr << "\n";
            }
            return 0;
        };
    });
}

}  // namespace profinfer::cli
