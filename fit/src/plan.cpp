// profinfer plan: CPU or Vulkan per weight MatMul from the fitted models, and (--compare) the
// plan measured against each single backend by the experiment runner.
#include "profinfer/plan.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/intervals.h"
#include "profinfer/model_card.h"
#include "profinfer/number_text.h"
#include "profinfer/output_file.h"
#include "profinfer/perf_models.h"
#include "profinfer/statistics.h"
#include "profinfer/study_summary.h"
#include "profinfer/table.h"

namespace profinfer {

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

namespace {

// The plan, all on the CPU (-ngl 0 -nopo 1) and all on Vulkan (-ngl 99): llama-bench of the
// Vulkan build untraced, run by the experiment runner in interleaved rounds (OUT/compare/,
// resumable), each configuration's median with its interval, and the plan against the
// faster single backend as a ratio with its interval.
void compare_plan(const PlanOptions& o, const ModelCard& c, const std::string& ot, nlohmann::json& plan, std::ostringstream& md) {
    auto sweep = [&](const std::string& ngl, const std::string& nopo, const std::string& ot_value) {
        return std::map<std::string, std::vector<std::string>>{
            {"model", {c.name}}, {"type", {o.type}},  {"threads", {std::to_string(o.threads)}},
            {"backend", {"vulkan"}}, {"prompt", {kComparePrompt}}, {"gen", {kCompareGen}}, {"ngl", {ngl}},
            {"nopo", {nopo}},        {"ot", {ot_value}}, {"tracer", {"none"}}};
    };
    ExperimentSpec spec;
    spec.name = "plan-compare";
    spec.title = "The plan against each single backend";
    spec.paper = "§7";
    // A plan that moves no weight MatMul is the CPU configuration itself (the same arguments):
    // measured once, and never compared with itself.
    const bool plan_is_cpu = ot.empty();
    spec.sweeps = {sweep("0", "1", "none"), sweep("99", "0", "none")};
    if (!plan_is_cpu) spec.sweeps.insert(spec.sweeps.begin(), sweep("0", "1", ot));
    spec.x = "ngl";
    spec.metrics = {"bench_tg_tps", "bench_pp_tps"};
    RunOptions opt;
    opt.profinfer = self_executable();
    opt.rounds = o.reps;
    opt.model = o.compare;
    const std::filesystem::path dir =
        o.out.empty() ? std::filesystem::temp_directory_path() / ("profinfer-plan-" + std::to_string(getpid()))
                     : std::filesystem::path(o.out) / "compare";
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
    md << "\nMeasured: llama-bench -p " << kComparePrompt << " -n " << kCompareGen << " -r 1 of the Vulkan build (GGML_VK_VISIBLE_DEVICES=0), untraced, " << o.reps
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
    if (plan_is_cpu && cpu_best) {
        // The plan is the best single backend's configuration: no ratio to measure.
        plan["plan_over_best_single"] = {{"best_single", "cpu"}, {"ratio", nullptr}, {"lo", nullptr}, {"hi", nullptr},
                                         {"verdict", "the CPU backend itself"}};
        plan["as_fast_as_best_single_backend"] = true;
        md << "\nDecode: the plan moves no weight MatMul, so it is the CPU configuration itself (the same llama-bench "
              "arguments, measured once), and the CPU is the faster single backend here: there is no plan / best ratio "
              "to measure — a plan that keeps everything on the faster backend is that backend.\n";
    } else {
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
    }
    if (!o.out.empty()) OutputFile::write(std::filesystem::path(o.out) / "plan.csv", t.to_csv());
    if (o.out.empty()) std::filesystem::remove_all(dir);
}

}  // namespace

std::string make_plan(const PlanOptions& o) {
    const auto m = perf::Models::load(o.models);
    const std::string at = o.scale.empty() ? m.json().value("scale", "full") : o.scale;
    const ModelCard c = ModelCard::load(o.card, ModelCard::parse_scale(at));
    nlohmann::json plan{{"card", c.name}, {"scale", at}, {"type", o.type}, {"threads", o.threads}, {"weights", nlohmann::json::array()}};
    std::vector<std::string> on_vulkan;
    std::ostringstream md;
    md << "# Plan for " << c.name << " (" << (at == "tiny" ? "its tiny variant's shapes, " : "") << o.type << ", " << o.threads << " threads) from " << o.models << "\n\n"
       << "| weight MatMul | m × k | per token | CPU µs | Vulkan µs | choice |\n|---|---|---|---|---|---|\n";
    for (const auto& s : card_matmuls(c)) {
        const auto cpu = m.matmul_us("cpu", o.type, o.threads, s.m, 1, s.k);
        const auto vk = m.matmul_us("vulkan", o.type, o.threads, s.m, 1, s.k);
        const std::string pattern = weight_pattern(s.name, c);
        std::string choice = "cpu", why;
        if (!cpu && !vk) throw Error(o.models + " has no N = 1 MatMul model for " + o.type + " at " + std::to_string(o.threads) + " threads");
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
    if (!o.compare.empty()) compare_plan(o, c, ot, plan, md);
    if (!o.out.empty()) {
        std::filesystem::create_directories(o.out);
        OutputFile::write(std::filesystem::path(o.out) / "plan.json", plan.dump(1) + "\n");
        OutputFile::write(std::filesystem::path(o.out) / "plan.md", md.str());
    }
    return md.str();
}

}  // namespace profinfer
