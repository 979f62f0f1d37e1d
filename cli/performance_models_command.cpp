// profinfer fit / predict / plan: the performance models (docs/models.md); plan's work is fit/src/plan.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/study_summary.h"
#include "profinfer/number_text.h"
#include "profinfer/intervals.h"
#include "profinfer/llama_install.h"
#include "profinfer/stats.h"
#include "profinfer/subprocess.h"
#include "profinfer/output_file.h"
#include "profinfer/fit.h"
#include "profinfer/plan.h"
#include "profinfer/perf_models.h"
#include "profinfer/machine_bench.h"
#include "subcommands.h"

namespace profinfer::cli {

void add_fit(CLI::App& app, std::function<int()>& action) {
    auto dir = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>("models.json");
    auto* cmd = app.add_subcommand("fit", "Fit the performance models on a results directory and export them as models.json");
    cmd->footer("Reads RESULTS_DIR/matmul-dims/{matmuls,points}.csv (the Fig. 10 study: profinfer experiment run\n"
                "experiments/specs/matmul-dims.toml) and RESULTS_DIR/machine.json (the roofs). Fits, per backend, weight\n"
                "type, thread count and batch class (N = 1, N > 1), weight-MatMul time = a + b*M*N*K*H and compares it\n"
                "with the roofline on the measured roofs, each on held-out models; then decode time per token from\n"
                "the model cards, leave-one-model-out; and, from RESULTS_DIR/decode-speed (warm untraced decode speeds:\n"
                "experiments/specs/decode-speed.toml), decode time in the machine's terms (bytes / triad, ops / peak), the\n"
                "model predict --machine carries to another machine. Beside models.json: held-out tables, figures, models.md.\n"
                "Schema and reader: docs/models.md, analysis/include/profinfer/perf_models_reader.hpp.");
    cmd->add_option("results_dir", *dir, "results/<board>")->required()->check(CLI::ExistingDirectory);
    cmd->add_option("-o,--output", *out, "The models file to write (figures go beside it)")->capture_default_str();
    cmd->callback([&action, dir, out] {
        action = [dir, out] {
            const std::filesystem::path o = std::filesystem::absolute(*out);
            FitResult r = fit_models(*dir, o.parent_path());
            OutputFile::write(o, r.models.dump(1) + "\n");
            OutputFile::write(o.parent_path() / "models.md", "# Performance models fitted on " + *dir + "\n\n" + r.summary_md);
            std::cout << r.summary_md << "\nwrote " << o.string() << ", " << (o.parent_path() / "models.md").string();
            for (const auto& f : r.written) std::cout << ", " << f.filename().string();
            std::cout << "\n";
            return 0;
        };
    });
}

void add_predict(CLI::App& app, std::function<int()>& action) {
    auto card = std::make_shared<std::string>();
    auto type = std::make_shared<std::string>("q4_0");
    auto backend = std::make_shared<std::string>("cpu");
    auto threads = std::make_shared<int>(2);
    auto models = std::make_shared<std::string>();
    auto machine_file = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto ctx = std::make_shared<int>(0);
    auto fa = std::make_shared<std::string>("on");
    auto* cmd = app.add_subcommand("predict", "Predict a dense model's decode speed from its card and fitted models");
    cmd->footer("Prints 'decode: X tokens/s [lo, hi]' (the 95 % interval the held-out models give) and, where models.json\n"
                "has MatMul lines for the thread count, each weight MatMul's predicted time per token; --json for scripts.\n"
                "With the decode-speed study fitted (models.json decode_roofs), decode is predicted from the machine's roofs:\n"
                "those of --machine (profinfer bench-machine on the machine to predict, a minute) or, without it, those of\n"
                "the machine the fit ran on. Otherwise the sum of the MatMul lines (the fitting machine only).\n"
                "Only what the fit covers is predicted: a backend, type or thread count without a model is an error; a\n"
                "model outside the fitted range of weight bytes is predicted and said to be outside it.");
    cmd->add_option("models", *models, "models.json from profinfer fit")->required()->check(CLI::ExistingFile);
    cmd->add_option("--card", *card, "Model card name (models/cards) or .toml file")->required();
    cmd->add_option("--type", *type, "Weight type")->capture_default_str();
    cmd->add_option("--threads", *threads, "Threads")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--backend", *backend, "Backend")->capture_default_str();
    cmd->add_option("--machine", *machine_file,
                    "machine.json of the machine to predict for (profinfer bench-machine -o machine.json); default: the fitting machine's roofs")
        ->check(CLI::ExistingFile);
    cmd->add_option("--ctx", *ctx, "Tokens already in the KV cache (needs the across-tokens study's model)")
        ->check(CLI::Range(0, 1 << 24))->capture_default_str();
    cmd->add_option("--fa", *fa, "Flash attention, for --ctx")->check(CLI::IsMember({"on", "off"}))->capture_default_str();
    cmd->add_flag("--json", *json, "JSON output");
    cmd->callback([&action, card, type, backend, threads, models, machine_file, json, ctx, fa] {
        action = [card, type, backend, threads, models, machine_file, json, ctx, fa] {
            const auto m = perf::Models::load(*models);
            const ModelCard c = ModelCard::load(*card, ModelCard::Scale::Full);
            const auto shapes = card_matmuls(c);
            nlohmann::json j{{"card", c.name}, {"type", *type}, {"backend", *backend}, {"threads", *threads}, {"ctx", *ctx}};
            double ms = 0, lo_ms = 0, hi_ms = 0;
            std::string outside;  // what of the card lies outside what the fit saw
            if (const nlohmann::json* e = m.decode_roofs_entry(*backend, *type)) {
                // The roofs of the machine asked for, or of the one the fit ran on.
                perf::Models::DecodeRoofs roofs;
                std::string cpu;
                const std::string kind = e->value("compute_kind", "int8");
                const auto names = perf::Models::decode_term_names(*e);
                const bool kernel = std::find(names.begin(), names.end(), "kernel_stream") != names.end();
                if (!machine_file->empty()) {
                    const MachineBench mb = MachineBench::load(*machine_file);
                    const MachineRoof& r = mb.at(*threads);
                    if (r.threads != *threads)
                        throw Error(*machine_file + " has no roofs at " + std::to_string(*threads) +
                                    " threads (profinfer bench-machine --threads " + std::to_string(*threads) + ")");
                    roofs = decode_roofs_of(r, *type), cpu = mb.cpu;
                    if (kernel && !(roofs.kernel_stream_gbs > 0))
                        throw Error(*machine_file + " has no roof of llama.cpp's " + *type + " kernel at " + std::to_string(*threads) +
                                    " threads, which this model is in (" + (mb.kernels.empty() ? "a bench-machine older than the kernel roofs" : mb.kernels) +
                                    "): run profinfer bench-machine again on that machine");
                } else {
                    for (const auto& r : e->at("fitted_on").at("roofs"))
                        if (r.value("threads", 0) == *threads) roofs = perf::Models::DecodeRoofs::from_json(r);
                    if (!(roofs.triad_gbs > 0))
                        throw Error(*models + " was fitted without " + std::to_string(*threads) +
                                    " threads: give the machine's roofs at that count (--machine machine.json)");
                    cpu = e->at("fitted_on").value("cpu", "");
                }
                const auto est = m.decode_ms_on(shapes, int(c.layers), *backend, *type, roofs);
                if (!est) throw Error("no prediction: the machine's roofs (triad " + format_double(roofs.triad_gbs) + " GB/s, peak " +
                                      format_double(roofs.peak_gops) + " Gops/s, " + *type + " kernel " + format_double(roofs.kernel_stream_gbs) +
                                      " GB/s) are not usable");
                ms = est->ms, lo_ms = est->lo_ms, hi_ms = est->hi_ms;
                const double mb = perf::Models::decode_weight_bytes(shapes, e->at("weight_bytes_per_elem").get<double>()) / 1e6;
                const auto& range = e->at("range").at("weight_mb");
                if (mb < range.at(0).get<double>() || mb > range.at(1).get<double>())
                    outside = "the card streams " + format_double(mb) + " MB of weights a token, outside the fitted " +
                              format_double(range.at(0).get<double>()) + "-" + format_double(range.at(1).get<double>()) + " MB";
                j["model"] = "roofs";
                j["machine"] = {{"cpu", cpu}, {"compute_kind", kind}, {"from", machine_file->empty() ? "the fitting machine" : *machine_file}};
                j["machine"].update(roofs.to_json(kernel));
            } else {
                if (!machine_file->empty())
                    throw Error(*models + " has no decode model in the machine's terms for backend " + *backend + ", type " + *type +
                                " (it comes from the decode-speed study: profinfer experiment run experiments/specs/decode-speed.toml, "
                                "then profinfer fit)");
                auto sum = m.decode_ms(shapes, int(c.layers), *backend, *type, *threads);
                if (!sum)
                    throw Error(*models + " has no decode model for backend " + *backend + ", type " + *type + ", " +
                                std::to_string(*threads) + " threads (profinfer fit covers what the matmul-dims sweep ran" +
                                (m.json().value("scale", "full") == "tiny"
                                     ? "; it ran the cards' tiny variants, which share one shape: no decode line fits them)"
                                     : ")"));
                ms = lo_ms = hi_ms = *sum;
                j["model"] = "matmul-sum";
            }
            double context = 0;
            if (*ctx > 0) {
                auto a = m.context_ms(*backend, *type, *threads, *fa, int(c.layers), int(c.heads), int(c.head_dim), *ctx);
                if (!a)
                    throw Error(*models + " has no context model for backend " + *backend + ", type " + *type + ", " +
                                std::to_string(*threads) + " threads, fa " + *fa + " (the across-tokens study's sweep)");
                context = *a;
                ms += context, lo_ms += context, hi_ms += context;
            }
            j["context_ms"] = context;
            j["decode_ms_per_token"] = ms;
            j["decode_tps"] = 1000 / ms;
            j["decode_tps_lo"] = 1000 / hi_ms;
            j["decode_tps_hi"] = 1000 / lo_ms;
            j["outside_fit"] = outside.empty() ? nlohmann::json(nullptr) : nlohmann::json(outside);
            j["matmuls"] = nlohmann::json::array();
            for (const auto& s : shapes)
                if (const auto us = m.matmul_us(*backend, *type, *threads, s.m, 1, s.k))
                    j["matmuls"].push_back({{"name", s.name}, {"m", s.m}, {"k", s.k}, {"per_token", s.per_token}, {"us", *us},
                                            {"us_per_token", *us * s.per_token}});
            if (*json) {
                std::cout << j.dump(1) << "\n";
                return 0;
            }
            if (j["model"] == "roofs" && j["machine"].contains("kernel_stream_gbs"))
                std::printf("decode: %.2f tokens/s [%.2f, %.2f] (95 %% interval; roofs of %s: llama.cpp's %s decode MatMul streams %.1f GB/s, %d threads)\n",
                            1000 / ms, 1000 / hi_ms, 1000 / lo_ms, j["machine"]["cpu"].get<std::string>().c_str(), type->c_str(),
                            j["machine"]["kernel_stream_gbs"].get<double>(), *threads);
            else if (j["model"] == "roofs")
                std::printf("decode: %.2f tokens/s [%.2f, %.2f] (95 %% interval; roofs of %s: triad %.1f GB/s, %s peak %.0f Gops/s, %d threads)\n",
                            1000 / ms, 1000 / hi_ms, 1000 / lo_ms, j["machine"]["cpu"].get<std::string>().c_str(),
                            j["machine"]["triad_gbs"].get<double>(), j["machine"]["compute_kind"].get<std::string>().c_str(),
                            j["machine"]["peak_gops"].get<double>(), *threads);
            else
                std::printf("decode: %.2f tokens/s\n", 1000 / ms);
            if (!outside.empty()) std::printf("note: %s\n", outside.c_str());
            if (*ctx > 0) std::printf("context: %d tokens add %.2f ms per token (flash attention %s)\n", *ctx, context, fa->c_str());
            if (!j["matmuls"].empty())
                std::printf("%-14s %7s %7s %9s %10s %12s\n", "matmul", "m", "k", "per_token", "us", "us_per_token");
            for (const auto& r : j["matmuls"])
                std::printf("%-14s %7lld %7lld %9d %10.1f %12.1f\n", r["name"].get<std::string>().c_str(),
                            (long long)r["m"].get<int64_t>(), (long long)r["k"].get<int64_t>(), r["per_token"].get<int>(),
                            r["us"].get<double>(), r["us_per_token"].get<double>());
            return 0;
        };
    });
}



void add_plan(CLI::App& app, std::function<int()>& action) {
    auto models = std::make_shared<std::string>();
    auto card = std::make_shared<std::string>();
    auto type = std::make_shared<std::string>("q4_0");
    auto threads = std::make_shared<int>(2);
    auto compare = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto reps = std::make_shared<int>(5);
    auto scale = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("plan", "Choose CPU or Vulkan per weight MatMul from fitted models, as --override-tensor patterns");
    cmd->footer("For each weight MatMul of the card's decode step, the backend models.json predicts fastest (cpu or\n"
                "vulkan; a backend without a model is not chosen). Prints the choice per weight and llama.cpp's\n"
                "-ot pattern that places the Vulkan ones ('none' when all stay on the CPU); run with -ngl 0 -nopo 1.\n"
                "--compare MODEL.gguf runs llama-bench (the Vulkan build, GGML_VK_VISIBLE_DEVICES=0) with the plan,\n"
                "all on the CPU (-ngl 0 -nopo 1) and all on Vulkan (-ngl 99), -p 32 -n 16, in --reps interleaved\n"
                "rounds (the experiment runner: DIR/compare/, resumable), and prints decode and prefill speed (median\n"
                "with a 95 % interval, from 5 rounds) side by side and the plan against the faster single backend;\n"
                "-o DIR writes plan.json, plan.md and plan.csv there.\n"
                "The card's shapes are taken at the scale the models were fitted on (models.json's \"scale\": a quick\n"
                "sweep fits the cards' tiny variants, and --compare then measures a tiny model) unless --scale says.");
    cmd->add_option("models", *models, "models.json from profinfer fit")->required()->check(CLI::ExistingFile);
    cmd->add_option("--card", *card, "Model card name (models/cards) or .toml file")->required();
    cmd->add_option("--type", *type, "Weight type")->capture_default_str();
    cmd->add_option("--threads", *threads, "Threads")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--compare", *compare, "A GGUF of the card to measure the plan against each single backend")
        ->check(CLI::ExistingFile);
    cmd->add_option("--reps", *reps, "Interleaved rounds of the three configurations")->check(CLI::Range(1, 100))->capture_default_str();
    cmd->add_option("-o,--output-dir", *out, "Write plan.json, plan.md, plan.csv here");
    cmd->add_option("--scale", *scale, "The card's shapes: full or tiny (default: the scale models.json was fitted at)")
        ->check(CLI::IsMember({"full", "tiny"}));
    cmd->callback([&action, models, card, type, threads, compare, out, reps, scale] {
        action = [models, card, type, threads, compare, out, reps, scale] {
            PlanOptions o{*models, *card, *type, *threads, *compare, *out, *reps, *scale};
            std::cout << make_plan(o);
            return 0;
        };
    });
}

}  // namespace profinfer::cli
