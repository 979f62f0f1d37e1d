// profinfer fit / predict: the performance models (docs/models.md).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include "model_card.h"
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
                            std::to_string(*threads) + " threads (profinfer fit covers what the matmul-dims sweep ran" +
                            (m.json().value("scale", "full") == "tiny"
                                 ? "; it ran the cards' tiny variants, which share one shape: no decode line fits them)"
                                 : ")"));
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

// plan --compare: llama-bench's prompt and generated tokens per run (help text: -p 32 -n 16). A Vulkan
// run on lavapipe decodes about a token a second, so these keep the comparison a few minutes.
const std::string kComparePrompt = "32", kCompareGen = "16";

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

}  // namespace

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
            const auto m = perf::Models::load(*models);
            const std::string at = scale->empty() ? m.json().value("scale", "full") : *scale;
            const ModelCard c = ModelCard::load(*card, ModelCard::parse_scale(at));
            nlohmann::json plan{{"card", c.name}, {"scale", at}, {"type", *type}, {"threads", *threads}, {"weights", nlohmann::json::array()}};
            std::vector<std::string> on_vulkan;
            std::ostringstream md;
            md << "# Plan for " << c.name << " (" << (at == "tiny" ? "its tiny variant's shapes, " : "") << *type << ", " << *threads << " threads) from " << *models << "\n\n"
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
                // The plan, all on the CPU (-ngl 0 -nopo 1) and all on Vulkan (-ngl 99): llama-bench of
                // the Vulkan build untraced, run by the experiment runner in interleaved rounds
                // (OUT/compare/, resumable), each configuration's median with its interval, and the
                // plan against the faster single backend as a ratio with its interval.
                auto sweep = [&](const std::string& ngl, const std::string& nopo, const std::string& ot_value) {
                    return std::map<std::string, std::vector<std::string>>{
                        {"model", {c.name}}, {"type", {*type}},  {"threads", {std::to_string(*threads)}},
                        {"backend", {"vulkan"}}, {"prompt", {kComparePrompt}}, {"gen", {kCompareGen}}, {"ngl", {ngl}},
                        {"nopo", {nopo}},        {"ot", {ot_value}}, {"tracer", {"none"}}};
                };
                ExperimentSpec spec;
                spec.name = "plan-compare";
                spec.title = "The plan against each single backend";
                spec.paper = "§7";
                spec.sweeps = {sweep("0", "1", ot.empty() ? "none" : ot), sweep("0", "1", "none"), sweep("99", "0", "none")};
                spec.x = "ngl";
                spec.metrics = {"bench_tg_tps", "bench_pp_tps"};
                RunOptions opt;
                opt.profinfer = self_executable();
                opt.rounds = *reps;
                opt.model = *compare;
                const std::filesystem::path dir =
                    out->empty() ? std::filesystem::temp_directory_path() / ("profinfer-plan-" + std::to_string(getpid()))
                                 : std::filesystem::path(*out) / "compare";
                opt.out_dir = dir;
                const auto rep = run_experiment(spec, opt);
                if (rep.failed > 0) throw Error("llama-bench failed in " + std::to_string(rep.failed) + " runs (" + (dir / "index.db").string() + ")");
                summarise_experiment(spec, dir, false);
                const auto samples = study_samples(spec, dir, false);
                auto find = [&](const std::string& ngl, const std::string& ot_value) -> const PointSamples& {
                    for (const auto& p : samples)
                        if (p.params.at("ngl") == ngl && p.params.at("ot") == ot_value) return p;
                    throw Error("plan --compare: no runs of ngl " + ngl + ", ot " + ot_value + " in " + dir.string());
                };
                auto values = [](const ByRound& b) {
                    std::vector<double> v;
                    for (const auto& [r, x] : b) v.push_back(x);
                    return v;
                };
                struct Config {
                    std::string name, args;
                    const PointSamples* p;
                };
                const std::vector<Config> configs{
                    {"plan", ot.empty() ? "-ngl 0 -nopo 1" : "-ngl 0 -nopo 1 -ot \"" + ot + "\"", &find("0", ot.empty() ? "none" : ot)},
                    {"cpu", "-ngl 0 -nopo 1", &find("0", "none")},
                    {"vulkan", "-ngl 99", &find("99", "none")}};
                Table t{{"config", "decode_tps", "decode_lo", "decode_hi", "prefill_tps", "prefill_lo", "prefill_hi", "rounds", "arguments"}, {}};
                md << "\nMeasured: llama-bench -p " << kComparePrompt << " -n " << kCompareGen << " -r 1 of the Vulkan build (GGML_VK_VISIBLE_DEVICES=0), untraced, " << *reps
                   << " interleaved rounds (" << dir.string() << "): median [95 % bootstrap interval] over rounds:\n\n"
                   << "| config | decode tok/s | prefill tok/s | arguments |\n|---|---|---|---|\n";
                for (const auto& cfg : configs) {
                    const Interval tg = median_interval(values(cfg.p->of("bench_tg_tps")));
                    const Interval pp = median_interval(values(cfg.p->of("bench_pp_tps")));
                    t.rows.push_back({cfg.name, tg.median, tg.has_interval() ? nlohmann::json(tg.lo) : nlohmann::json(nullptr),
                                      tg.has_interval() ? nlohmann::json(tg.hi) : nlohmann::json(nullptr), pp.median,
                                      pp.has_interval() ? nlohmann::json(pp.lo) : nlohmann::json(nullptr),
                                      pp.has_interval() ? nlohmann::json(pp.hi) : nlohmann::json(nullptr), int64_t(tg.n), cfg.args});
                    md << "| " << cfg.name << " | " << format_with_interval(tg.median, tg.lo, tg.hi) << " | "
                       << format_with_interval(pp.median, pp.lo, pp.hi) << " | `" << cfg.args << "` |\n";
                    plan["measured"][cfg.name] = {{"decode_tps", tg.median}, {"prefill_tps", pp.median}, {"rounds", tg.n},
                                                  {"arguments", cfg.args}};
                }
                // The faster single backend (by median decode speed), and the plan against it.
                const auto& cpu_tg = configs[1].p->of("bench_tg_tps");
                const auto& vk_tg = configs[2].p->of("bench_tg_tps");
                const bool cpu_best = median_of(values(cpu_tg)) >= median_of(values(vk_tg));
                const Interval r = ratio_interval(configs[0].p->of("bench_tg_tps"), cpu_best ? cpu_tg : vk_tg);
                const Verdict v = judge(r, 1.0, true);
                const std::string said = v == Verdict::Reproduced      ? "faster than"
                                         : v == Verdict::WithinNoise   ? "as fast as (within noise)"
                                         : v == Verdict::NotReproduced ? "slower than"
                                                                       : "not comparable, with too few rounds for an interval, to";
                plan["plan_over_best_single"] = {{"best_single", cpu_best ? "cpu" : "vulkan"}, {"ratio", r.median},
                                                 {"lo", r.has_interval() ? nlohmann::json(r.lo) : nlohmann::json(nullptr)},
                                                 {"hi", r.has_interval() ? nlohmann::json(r.hi) : nlohmann::json(nullptr)},
                                                 {"verdict", said}};
                plan["as_fast_as_best_single_backend"] = v == Verdict::Reproduced || v == Verdict::WithinNoise;
                md << "\nDecode, plan / " << (cpu_best ? "cpu" : "vulkan") << " (the faster single backend): "
                   << format_with_interval(r.median, r.lo, r.hi) << " (n = " << r.n << "): the plan is " << said
                   << " the best single backend"
                   << (v == Verdict::NotReproduced ? ": the models predicted wrong (see the Vulkan model's held-out error in models.md)" : "")
                   << ".\n";
                if (!out->empty()) OutputFile::write(std::filesystem::path(*out) / "plan.csv", t.to_csv());
                if (out->empty()) std::filesystem::remove_all(dir);
            }
            if (!out->empty()) {
                std::filesystem::create_directories(*out);
                OutputFile::write(std::filesystem::path(*out) / "plan.json", plan.dump(1) + "\n");
                OutputFile::write(std::filesystem::path(*out) / "plan.md", md.str());
            }
            std::cout << md.str();
            return 0;
        };
    });
}

}  // namespace profinfer::cli
