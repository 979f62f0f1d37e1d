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
    auto tool = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("bench-machine", "Measure this machine's roofs: triad memory bandwidth, peak arithmetic rate per kind (f32, f16, bf16, int8) "
                                                    "and llama.cpp's own decode MatMul kernel per weight type (q4_0, q8_0, f16)");
    cmd->add_option("-o,--output", *out, "JSON file to write")->capture_default_str();
    cmd->add_option("--threads", *threads, "Thread counts to measure (default: 1 .. number of CPUs)");
    cmd->add_flag("--quick", *quick, "Smaller arrays and fewer repetitions (seconds, less exact)");
    cmd->add_option("--kernel-roof", *tool,
                    "ggml_kernel_roof to time llama.cpp's kernels with (default: the one built with profinfer; env PROFINFER_KERNEL_ROOF)");
    cmd->footer("The kernel roofs time ggml's MUL_MAT of a weight by one f32 column (a decode token) with the pinned llama.cpp,\n"
                "the weights where llama.cpp loads them (repacked where its CPU backend repacks): in cache (G ops/s) and\n"
                "streamed from memory (GB/s of weights). profinfer predict --machine uses them where the fit did.");
    cmd->callback([&action, out, threads, quick, tool] {
        action = [out, threads, quick, tool] {
            std::vector<int> t = *threads;
            if (t.empty())
                for (int i = 1; i <= int(std::thread::hardware_concurrency()); ++i) t.push_back(i);
            auto m = MachineBench::run(t, *quick, *tool);
            profinfer::OutputFile::write(*out, m.to_json().dump(2) + "\n");
            std::cerr << "units: " << m.isa << "\n";
            for (const auto& r : m.roofs) {
                std::cerr << r.threads << " threads: triad " << r.triad_gbs << " GB/s; peak G ops/s";
                for (const auto& [kind, g] : r.peak_gops) std::cerr << " " << kind << " " << g;
                std::cerr << "\n";
                for (const auto& [type, k] : r.kernels)
                    std::cerr << "  llama.cpp " << type << " decode MatMul (" << k.buffer << "): " << k.cache_gops << " G ops/s in cache, "
                              << k.stream_gbs << " GB/s of weights streamed\n";
            }
            std::cerr << "kernel roofs: " << m.kernels << "\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
