// profinfer fit / predict: the performance models (docs/models.md).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <iostream>
#include <sstream>

#include "model_card.h"
#include "profinfer/error.h"
#include "profinfer/llama_install.h"
#include "profinfer/stats.h"
#include "profinfer/subprocess.h"
#include "profinfer/output_file.h"
#include "profinfer/perf_models.h"
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
                "the model cards, leave-one-model-out. Beside models.json: held-out tables, figures and models.md.\n"
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
    auto json = std::make_shared<bool>(false);
    auto ctx = std::make_shared<int>(0);
    auto fa = std::make_shared<std::string>("on");
    auto* cmd = app.add_subcommand("predict", "Predict a dense model's decode speed from its card and fitted models");
    cmd->footer("Prints 'decode: X tokens/s' and each weight MatMul's predicted time per token; --json for scripts.\n"
                "Only what the fit covers is predicted: a backend, type or thread count without a model is an error.");
    cmd->add_option("models", *models, "models.json from profinfer fit")->required()->check(CLI::ExistingFile);
    cmd->add_option("--card", *card, "Model card name (models/cards) or .toml file")->required();
    cmd->add_option("--type", *type, "Weight type")->capture_default_str();
    cmd->add_option("--threads", *threads, "Threads")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--backend", *backend, "Backend")->capture_default_str();
    cmd->add_option("--ctx", *ctx, "Tokens already in the KV cache (needs the across-tokens study's model)")
        ->check(CLI::Range(0, 1 << 24))->capture_default_str();
    cmd->add_option("--fa", *fa, "Flash attention, for --ctx")->check(CLI::IsMember({"on", "off"}))->capture_default_str();
    cmd->add_flag("--json", *json, "JSON output");
    cmd->callback([&action, card, type, backend, threads, models, json, ctx, fa] {
        action = [card, type, backend, threads, models, json, ctx, fa] {
            const auto m = perf::Models::load(*models);
            const ModelCard c = ModelCard::load(*card, ModelCard::Scale::Full);
            const auto shapes = card_matmuls(c);
            auto ms = m.decode_ms(shapes, int(c.layers), *backend, *type, *threads);
            if (!ms)
                throw Error(*models + " has no decode model for backend " + *backend + ", type " + *type + ", " +
                            std::to_string(*threads) + " threads (profinfer fit covers what the matmul-dims sweep ran)");
            double context = 0;
            if (*ctx > 0) {
                auto a = m.context_ms(*backend, *type, *threads, *fa, int(c.layers), int(c.heads), int(c.head_dim), *ctx);
                if (!a)
                    throw Error(*models + " has no context model for backend " + *backend + ", type " + *type + ", " +
                                std::to_string(*threads) + " threads, fa " + *fa + " (the across-tokens study's sweep)");
                context = *a;
                *ms += context;
            }
            nlohmann::json j{{"card", c.name}, {"type", *type}, {"backend", *backend}, {"threads", *threads}, {"ctx", *ctx},
                             {"context_ms", context},
                             {"decode_ms_per_token", *ms}, {"decode_tps", 1000 / *ms}, {"matmuls", nlohmann::json::array()}};
            for (const auto& s : shapes) {
                const double us = *m.matmul_us(*backend, *type, *threads, s.m, 1, s.k);
                j["matmuls"].push_back({{"name", s.name}, {"m", s.m}, {"k", s.k}, {"per_token", s.per_token}, {"us", us},
                                        {"us_per_token", us * s.per_token}});
            }
            if (*json) {
                std::cout << j.dump(1) << "\n";
                return 0;
            }
            std::printf("decode: %.2f tokens/s\n", 1000 / *ms);
            if (*ctx > 0) std::printf("context: %d tokens add %.2f ms per token (flash attention %s)\n", *ctx, context, fa->c_str());
            std::printf("%-14s %7s %7s %9s %10s %12s\n", "matmul", "m", "k", "per_token", "us", "us_per_token");
            for (const auto& r : j["matmuls"])
                std::printf("%-14s %7lld %7lld %9d %10.1f %12.1f\n", r["name"].get<std::string>().c_str(),
                            (long long)r["m"].get<int64_t>(), (long long)r["k"].get<int64_t>(), r["per_token"].get<int>(),
                            r["us"].get<double>(), r["us_per_token"].get<double>());
            return 0;
        };
    });
}


namespace {

// The GGUF tensor a card's weight MatMul multiplies by, as an --override-tensor regex;
// empty when it cannot be moved alone (a tied output head is the token embedding table).
std::string weight_pattern(const std::string& shape, const ModelCard& c) {
    static const std::map<std::string, std::string> kWeight = {{"Qcur", "attn_q"},       {"Kcur", "attn_k"},
                                                               {"Vcur", "attn_v"},       {"attn_out", "attn_output"},
                                                               {"ffn_gate", "ffn_gate"}, {"ffn_up", "ffn_up"},
                                                               {"ffn_out", "ffn_down"}};
    if (shape == "result_output") return c.tied_embeddings ? "" : "output\\.weight";
    auto it = kWeight.find(shape);
    return it == kWeight.end() ? "" : "blk\\.[0-9]+\\." + it->second + "\\.weight";
}

struct BenchResult {
    double pp = NAN, pp_sd = NAN, tg = NAN, tg_sd = NAN;
};

BenchResult bench(const std::vector<std::string>& argv) {
    auto r = run_process(argv);
    if (r.status != 0) throw Error("llama-bench failed (exit " + std::to_string(r.status) + "): " + r.err.substr(0, 400));
    BenchResult b;
    for (const auto& t : nlohmann::json::parse(r.out)) {
        if (t.value("n_gen", 0) > 0) b.tg = t.value("avg_ts", NAN), b.tg_sd = t.value("stddev_ts", NAN);
        else if (t.value("n_prompt", 0) > 0) b.pp = t.value("avg_ts", NAN), b.pp_sd = t.value("stddev_ts", NAN);
    }
    return b;
}

}  // namespace

void add_plan(CLI::App& app, std::function<int()>& action) {
    auto models = std::make_shared<std::string>();
    auto card = std::make_shared<std::string>();
    auto type = std::make_shared<std::string>("q4_0");
    auto threads = std::make_shared<int>(2);
    auto compare = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto reps = std::make_shared<int>(3);
    auto* cmd = app.add_subcommand("plan", "Choose CPU or Vulkan per weight MatMul from fitted models, as --override-tensor patterns");
    cmd->footer("For each weight MatMul of the card's decode step, the backend models.json predicts fastest (cpu or\n"
                "vulkan; a backend without a model is not chosen). Prints the choice per weight and llama.cpp's\n"
                "-ot pattern that places the Vulkan ones ('none' when all stay on the CPU); run with -ngl 0 -nopo 1.\n"
                "--compare MODEL.gguf runs llama-bench (the Vulkan build, GGML_VK_VISIBLE_DEVICES=0) with the plan,\n"
                "all on the CPU (-ngl 0 -nopo 1) and all on Vulkan (-ngl 99), -p 64 -n 32, in --reps interleaved\n"
                "rounds, and prints decode and prefill speed (median ± sd over rounds) side by side;\n"
                "-o DIR writes plan.json, plan.md and plan.csv there.");
    cmd->add_option("models", *models, "models.json from profinfer fit")->required()->check(CLI::ExistingFile);
    cmd->add_option("--card", *card, "Model card name (models/cards) or .toml file")->required();
    cmd->add_option("--type", *type, "Weight type")->capture_default_str();
    cmd->add_option("--threads", *threads, "Threads")->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--compare", *compare, "A GGUF of the card to measure the plan against each single backend")
        ->check(CLI::ExistingFile);
    cmd->add_option("--reps", *reps, "Interleaved rounds of the three configurations")->check(CLI::Range(1, 100))->capture_default_str();
    cmd->add_option("-o,--output-dir", *out, "Write plan.json, plan.md, plan.csv here");
    cmd->callback([&action, models, card, type, threads, compare, out, reps] {
        action = [models, card, type, threads, compare, out, reps] {
            const auto m = perf::Models::load(*models);
            const ModelCard c = ModelCard::load(*card, ModelCard::Scale::Full);
            nlohmann::json plan{{"card", c.name}, {"type", *type}, {"threads", *threads}, {"weights", nlohmann::json::array()}};
            std::vector<std::string> on_vulkan;
            std::ostringstream md;
            md << "# Plan for " << c.name << " (" << *type << ", " << *threads << " threads) from " << *models << "\n\n"
               << "| weight MatMul | m × k | per token | CPU µs | Vulkan µs | choice |\n|---|---|---|---|---|---|\n";
            for (const auto& s : card_matmuls(c)) {
                const auto cpu = m.matmul_us("cpu", *type, *threads, s.m, 1, s.k);
                const auto vk = m.matmul_us("vulkan", *type, *threads, s.m, 1, s.k);
                const std::string pattern = weight_pattern(s.name, c);
                std::string choice = "cpu", why;
                if (!cpu && !vk) throw Error(*models + " has no N = 1 MatMul model for " + *type + " at " + std::to_string(*threads) + " threads");
                if (vk && (!cpu || *vk < *cpu)) {
                    if (pattern.empty()) why = " (predicted faster on Vulkan, but the tied output head cannot move alone)";
                    else choice = "vulkan", on_vulkan.push_back(pattern);
                }
                plan["weights"].push_back({{"matmul", s.name}, {"m", s.m}, {"k", s.k}, {"per_token", s.per_token},
                                           {"cpu_us", cpu ? nlohmann::json(*cpu) : nlohmann::json(nullptr)},
                                           {"vulkan_us", vk ? nlohmann::json(*vk) : nlohmann::json(nullptr)},
                                           {"choice", choice}, {"pattern", pattern}});
                char b[256];
                std::snprintf(b, sizeof b, "| %s | %lld × %lld | %d | %s | %s | %s%s |\n", s.name.c_str(), (long long)s.m,
                              (long long)s.k, s.per_token, cpu ? std::to_string(int64_t(*cpu)).c_str() : "–",
                              vk ? std::to_string(int64_t(*vk)).c_str() : "–", choice.c_str(), why.c_str());
                md << b;
            }
            std::string ot;
            for (const auto& p : on_vulkan) ot += (ot.empty() ? "" : ";") + p + "=Vulkan0";
            plan["override_tensor"] = ot.empty() ? "none" : ot;
            md << "\nPlan: " << (ot.empty() ? "every weight MatMul on the CPU (no -ot)" : "`-ngl 0 -nopo 1 -ot \"" + ot + "\"`") << "\n";
            if (!compare->empty()) {
                setenv("GGML_VK_VISIBLE_DEVICES", "0", 1);  // lavapipe is a CPU-type device ggml-vulkan hides otherwise
                const std::string b = LlamaInstall::locate("vulkan", false).program("llama-bench").string();
                const std::vector<std::string> base{b, "-m", *compare, "-t", std::to_string(*threads), "-p", "64", "-n", "32",
                                                    "-r", "1", "-o", "json"};
                struct Config {
                    std::string name;
                    std::vector<std::string> extra;
                };
                std::vector<Config> configs{{"cpu", {"-ngl", "0", "-nopo", "1"}}, {"vulkan", {"-ngl", "99"}}};
                Config p{"plan", {"-ngl", "0", "-nopo", "1"}};
                if (!ot.empty()) p.extra.insert(p.extra.end(), {"-ot", ot});
                configs.insert(configs.begin(), p);
                // Interleaved rounds (one llama-bench run per configuration per round), so that
                // a drifting machine weighs on every configuration alike; median and sd over rounds.
                const std::string base_cmd = [&] {
                    std::string c;
                    for (const auto& a : base) c += (c.empty() ? "" : " ") + a;
                    return c;
                }();
                std::map<std::string, std::vector<BenchResult>> runs;
                for (int round = 0; round < *reps; ++round)
                    for (const auto& cfg : configs) {
                        auto argv = base;
                        argv.insert(argv.end(), cfg.extra.begin(), cfg.extra.end());
                        std::cerr << "profinfer plan: round " << round + 1 << "/" << *reps << ": " << cfg.name << " …\n";
                        runs[cfg.name].push_back(bench(argv));
                    }
                auto stats = [](std::vector<double> v) {
                    std::sort(v.begin(), v.end());
                    const size_t n = v.size();
                    const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
                    double mean = 0, sd = 0;
                    for (double x : v) mean += x / double(n);
                    for (double x : v) sd += (x - mean) * (x - mean);
                    return std::pair{med, n > 1 ? std::sqrt(sd / double(n - 1)) : 0.0};
                };
                Table t{{"config", "decode_tps", "decode_sd", "prefill_tps", "prefill_sd", "rounds", "command"}, {}};
                md << "\nMeasured: llama-bench -p 64 -n 32 -r 1, " << *reps << " interleaved rounds, median ± sd over rounds "
                   << "(GGML_VK_VISIBLE_DEVICES=0):\n\n| config | decode tok/s | prefill tok/s | arguments |\n|---|---|---|---|\n";
                double best_single = 0, planned = 0, sd_max = 0;
                for (const auto& cfg : configs) {
                    std::vector<double> tg, pp;
                    for (const auto& r : runs[cfg.name]) tg.push_back(r.tg), pp.push_back(r.pp);
                    const auto [tgm, tgs] = stats(tg);
                    const auto [ppm, pps] = stats(pp);
                    std::string extra;
                    for (const auto& a : cfg.extra) extra += " " + a;
                    t.rows.push_back({cfg.name, tgm, tgs, ppm, pps, *reps, base_cmd + extra});
                    char line[512];
                    std::snprintf(line, sizeof line, "| %s | %.2f ± %.2f | %.1f ± %.1f | `%s` |\n", cfg.name.c_str(), tgm, tgs, ppm,
                                  pps, extra.c_str());
                    md << line;
                    plan["measured"][cfg.name] = {{"decode_tps", tgm}, {"decode_sd", tgs}, {"prefill_tps", ppm},
                                                  {"prefill_sd", pps}, {"rounds", *reps}, {"command", base_cmd + extra}};
                    sd_max = std::max(sd_max, tgs);
                    if (cfg.name == "plan") planned = tgm;
                    else best_single = std::max(best_single, tgm);
                }
                // Within two standard deviations of the best single backend counts as as fast.
                const bool ok = planned >= best_single - 2 * sd_max;
                plan["as_fast_as_best_single_backend"] = ok;
                md << "\nThe plan is " << (ok ? "as fast as" : "slower than") << " the best single backend in decode ("
                   << planned << " vs " << best_single << " tok/s)"
                   << (ok ? "." : ": the models predicted wrong (see the Vulkan model's held-out error in models.md).") << "\n";
                if (!out->empty()) OutputFile::write(std::filesystem::path(*out) / "plan.csv", t.to_csv());
            }
            if (!out->empty()) {
                OutputFile::write(std::filesystem::path(*out) / "plan.json", plan.dump(1) + "\n");
                OutputFile::write(std::filesystem::path(*out) / "plan.md", md.str());
            }
            std::cout << md.str();
            return 0;
        };
    });
}

}  // namespace profinfer::cli
