#include <cmath>
#include <fstream>
#include <optional>
#include <regex>
#include <set>

#include "profinfer/error.h"
#include "profinfer/experiment_index.h"
#include "profinfer/statistics.h"
#include "profinfer/study_text.h"
#include "profinfer/table.h"
#include "profinfer/trace_metrics.h"
#include "profinfer/tracing_cost.h"
#include "study_parts.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// What the program printed about its own speed: llama-bench's JSON array (one object per
// test), or a peer's JSON line (evalcb_peer, ort_peer: prefill_tps, decode_tps, its own
// costs; serve_peer: the server's throughput and its own medians of TTFT and TPOT; attach_peer:
// the target's speed in windows with a recorder attached and without, and the slowdown). bench_tg_tps / bench_pp_tps: the program's own decode / prompt speed.
void program_metrics(const std::string& output, nlohmann::json& m) {
    m["bench_pp_tps"] = nullptr;
    m["bench_tg_tps"] = nullptr;
    const auto j = nlohmann::json::parse(output.empty() ? "[]" : output, nullptr, false);
    if (j.is_array()) {
        for (const auto& t : j) {
            if (!t.is_object()) continue;
            if (t.value("n_gen", 0) > 0) m["bench_tg_tps"] = t.value("avg_ts", 0.0);
            else if (t.value("n_prompt", 0) > 0) m["bench_pp_tps"] = t.value("avg_ts", 0.0);
        }
        return;
    }
    // A peer: its last line.
    std::string line = output;
    while (!line.empty() && line.back() == '\n') line.pop_back();
    if (auto nl = line.rfind('\n'); nl != std::string::npos) line = line.substr(nl + 1);
    const auto peer = nlohmann::json::parse(line, nullptr, false);
    if (!peer.is_object()) return;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"decode_tps", "bench_tg_tps"}, {"prefill_tps", "bench_pp_tps"}, {"dump_dot_ms", "dump_dot_ms"},
             {"dump_dot_pct_of_decode", "dump_dot_pct_of_decode"}, {"serve_tps", "serve_tps"},
             {"ttft_ms", "ttft_ms"}, {"tpot_ms", "tpot_ms"}, {"decode_share_pct", "decode_share_pct"}, {"attach_slowdown_pct", "attach_slowdown_pct"},
             {"attached_tps", "attached_tps"}, {"detached_tps", "detached_tps"}, {"unmatched_calls", "unmatched_calls"},
             {"duet_slowdown_pct", "duet_slowdown_pct"}, {"traced_tps", "duet_traced_tps"},
             {"untraced_tps", "duet_untraced_tps"}, {"predicted_pct", "predicted_slowdown_pct"},
             {"traced_calls_pct", "traced_calls_pct"}, {"window_recorder_cpu_ms_s", "duet_recorder_cpu_ms_s"},
             {"window_traced_wait_ms_s", "duet_traced_wait_ms_s"}, {"window_untraced_wait_ms_s", "duet_untraced_wait_ms_s"},
             {"stream_gbs", "kernel_stream_gbs"}, {"stream_mid_gbs", "kernel_stream_mid_gbs"},
             {"stream_small_gbs", "kernel_stream_small_gbs"}, {"cache_gops", "kernel_cache_gops"}})
        if (peer.contains(from) && peer[from].is_number()) m[to] = peer[from];
}

}  // namespace

// Every metric of a point, with the unit its axis and table show.
const std::vector<MetricInfo>& study_metrics() {
    static const std::vector<MetricInfo> kMetrics = {
        {"decode_tps", "tokens/s"},          {"prefill_tps", "tokens/s"},      {"bench_tg_tps", "tokens/s"},
        {"bench_pp_tps", "tokens/s"},        {"op_ms_per_token", "ms"},        {"mul_mat_share_pct", "%"}, {"prefill_mul_mat_share_pct", "%"},
        {"attention_share_pct", "%"},        {"wait_share_pct", "%"},          {"preempted_per_token", "preemptions/token"},
        {"gpu_graph_share_pct", "%"},        {"kq_over_weight_ratio", "ratio"}, {"kq_node_ms", "ms"}, {"moe_ms_per_token", "ms"},
        {"moe_first_call_ms", "ms"},         {"moe_major_faults_per_token", "faults/token"}, {"moe_reuse_time_r", "r"},
        {"moe_first_call_major_faults", "faults"}, {"wait_share_matmul_pct", "%"}, {"wait_share_other_pct", "%"}, {"wait_share_activation_pct", "%"},
        {"cpu_s", "s"},                      {"paired_window_pct", "%"},       {"budget_achieved_pct", "%"},
        {"traced_calls_pct", "%"},           {"dump_dot_ms", "ms"},            {"dump_dot_pct_of_decode", "%"},
        {"weight_stream_gbs", "GB/s"},       {"weight_stream_roof_pct", "% of triad"},
        {"attention_growth_ratio", "ratio"}, {"attention_step_ratio", "ratio"}, {"attention_in_block_ratio", "ratio"}, {"weight_matmul_growth_ratio", "ratio"},
        {"attn_block_ops", "nodes"},         {"ffn_block_ops", "nodes"},
        {"serve_tps", "generated tokens/s"}, {"ttft_ms", "ms"},           {"tpot_ms", "ms"}, {"decode_share_pct", "% of the server's request time"},
        {"attach_slowdown_pct", "% of decode speed"}, {"attached_tps", "tokens/s"}, {"detached_tps", "tokens/s"},
        {"unmatched_calls", "calls"},
        {"duet_slowdown_pct", "% of decode speed"}, {"duet_traced_tps", "tokens/s"}, {"duet_untraced_tps", "tokens/s"},
        {"predicted_slowdown_pct", "% of decode speed"},
        {"duet_recorder_cpu_ms_s", "ms CPU per s"}, {"duet_traced_wait_ms_s", "ms waiting to run per s"},
        {"duet_untraced_wait_ms_s", "ms waiting to run per s"},
        {"kernel_stream_gbs", "GB/s of weights"}, {"kernel_stream_mid_gbs", "GB/s of weights"},
        {"kernel_stream_small_gbs", "GB/s of weights"}, {"kernel_cache_gops", "G ops/s"},
        {"decode_tps_before_hog", "tokens/s"}, {"decode_tps_during_hog", "tokens/s"}, {"decode_tps_after_hog", "tokens/s"},
        {"parallel_pct", "% of decode time"}, {"parallel_pct_before_hog", "% of decode time"},
        {"parallel_pct_during_hog", "% of decode time"}, {"parallel_pct_after_hog", "% of decode time"}};
    return kMetrics;
}

const std::string& unit_of(const std::string& metric) {
    static const std::string none;
    for (const auto& m : study_metrics())
        if (m.name == metric) return m.unit;
    return none;
}

bool numeric(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789.-") == std::string::npos;
}

PointSamples Recorded::samples() const {
    PointSamples s{params, {}};
    for (size_t i = 0; i < dbs.size(); ++i)
        for (const auto& [name, v] : metrics[i].items())
            if (v.is_number()) s.metrics[name][dbs[i].first] = v.get<double>();
    return s;
}

nlohmann::json machine_json(const fs::path& out_dir) {
    for (const fs::path& f : {out_dir.parent_path() / "machine.json", out_dir.parent_path().parent_path() / "machine.json"}) {
        std::ifstream in(f);
        if (!in) continue;
        const auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_discarded()) return j;
    }
    return nullptr;
}

// The machine's triad bandwidth at THREADS (the roof of the largest thread count measured up
// to THREADS), 0 without a machine.json.
double triad_gbs(const nlohmann::json& machine, int threads) {
    double best = 0;
    int best_threads = 0;
    if (machine.is_object())
        for (const auto& r : machine.value("roofs", nlohmann::json::array()))
            if (int t = r.value("threads", 0); t <= threads && t > best_threads) best_threads = t, best = r.value("triad_gbs", 0.0);
    return best;
}

namespace {

// What a traced run's trace says: its metrics (trace_metrics) and the tracing-cost measures a
// run makes on itself.
nlohmann::json trace_derived(store::Database& trace, const std::string& tracer) {
    nlohmann::json m = trace_metrics(trace);
    if (tracer.size() > 7 && tracer.substr(tracer.size() - 7) == "-paired")
        m["paired_window_pct"] = number_or_null(median_of(paired_window_slowdowns_pct(trace)));
    if (tracer.rfind("budget-", 0) == 0) {
        m["budget_achieved_pct"] = number_or_null(achieved_overhead_pct(trace));
        m["traced_calls_pct"] = number_or_null(traced_calls_pct(trace));
    }
    return m;
}

struct KeptMetrics {
    std::string id;
    int round;
    int calls_dropped;
    std::string metrics;
};

// A summary from the traces keeps, beside what it was asked for, each trace's metrics with its
// warm-up (the first calls of each phase) left out, so a clone without the traces can still ask
// whether a verdict rests on the warm-up (`summarise --drop-first-calls 2`; the committed
// studies are checked that way). A study recorded again and summarised once keeps both.
constexpr int kWarmUpCalls = 2;

}  // namespace

std::vector<Recorded> read_runs(const ExperimentSpec& spec, const fs::path& out_dir, bool quick, StudyFacts& facts,
                                int calls_dropped) {
    if (calls_dropped < 0) throw Error("the calls left out of each trace are 0 or more, not " + std::to_string(calls_dropped));
    facts.calls_dropped = calls_dropped;
    const fs::path index = out_dir / "index.db";
    std::vector<Recorded> points;
    std::map<std::string, size_t> at;
    const nlohmann::json machine = machine_json(out_dir);
    for (const auto& p : spec.points(quick)) {
        at[p.id()] = points.size();
        points.push_back({p.id(), p.params, {}, {}});  // parameters as the sweep has them now
    }
    store::ExperimentIndex ix(index, store::ExperimentIndex::Mode::Read);
    {
        auto f = ix.facts();
        if (f.count("board")) facts.board = f["board"];
        facts.machine = f["machine"], facts.machine_note = f["machine_note"], facts.trap_us = f["trap_us"];
    }
    std::vector<KeptMetrics> kept;  // computed from traces here, for the index
    for (const auto& run : ix.done_runs()) {
        auto it = at.find(run.id);
        if (it == at.end()) continue;  // the other sweep's point
        Recorded& r = points[it->second];
        facts.recording_s += run.seconds;
        const fs::path db = run.db;
        r.dbs.push_back({run.round, db});
        // A traced run's metrics: from its trace where it is here (kept in the index), else as
        // the index kept them (a clone: traces are not committed).
        nlohmann::json m = nlohmann::json::object();
        if (!db.empty() && fs::exists(db)) {
            store::Database trace(db, store::Database::Mode::ReadOnly);
            if (facts.calls_dropped) trace.drop_first_calls(facts.calls_dropped);
            m = trace_derived(trace, r.params.at("tracer"));
            kept.push_back({run.id, run.round, facts.calls_dropped, m.dump()});
            if (!facts.calls_dropped) {  // the same trace, its warm-up now left out
                trace.drop_first_calls(kWarmUpCalls);
                kept.push_back({run.id, run.round, kWarmUpCalls, trace_derived(trace, r.params.at("tracer")).dump()});
            }
        } else if (!db.empty()) {
            const auto stored = ix.trace_metrics(run.id, run.round, facts.calls_dropped);
            if (!stored)
                throw Error("the trace of " + run.id + " round " + std::to_string(run.round) + " (" + db.string() +
                            ") is not here, and " + index.string() + " keeps no metrics of it" +
                            (facts.calls_dropped ? " with its first " + std::to_string(facts.calls_dropped) + " calls left out"
                                                 : "") +
                            ": summarise the study where its traces are, or record it again here");
            m = nlohmann::json::parse(*stored);
        }
        program_metrics(run.bench, m);  // an untraced run: the program's own numbers only
        m["cpu_s"] = run.cpu_s ? nlohmann::json(*run.cpu_s) : nlohmann::json(nullptr);
        if (m.contains("weight_stream_gbs") && m["weight_stream_gbs"].is_number()) {
            const double roof = triad_gbs(machine, std::stoi(r.params.at("threads")));
            m["weight_stream_roof_pct"] = roof > 0 ? nlohmann::json(100 * m["weight_stream_gbs"].get<double>() / roof)
                                                   : nlohmann::json(nullptr);
        }
        r.metrics.push_back(std::move(m));
    }
    if (!kept.empty()) {
        store::ExperimentIndex w(index, store::ExperimentIndex::Mode::Write);
        for (const auto& k : kept) w.put_trace_metrics(k.id, k.round, k.calls_dropped, k.metrics);
    }
    std::vector<Recorded> done;
    for (auto& p : points)
        if (!p.dbs.empty()) done.push_back(std::move(p));
    return done;
}

std::vector<PointSamples> study_samples(const ExperimentSpec& spec, const fs::path& out_dir, bool quick) {
    StudyFacts facts;
    std::vector<PointSamples> out;
    for (const auto& r : read_runs(spec, out_dir, quick, facts)) out.push_back(r.samples());
    return out;
}

Study::Study(const ExperimentSpec& spec_, const fs::path& out_dir_, bool quick_, int calls_dropped)
    : spec(spec_), out_dir(out_dir_), quick(quick_), points(read_runs(spec_, out_dir_, quick_, facts, calls_dropped)) {
    if (points.empty()) throw Error(spec.name + ": no point is done yet");
    min_n = SIZE_MAX;
    for (const auto& p : points) max_n = std::max(max_n, p.dbs.size()), min_n = std::min(min_n, p.dbs.size());
    for (const auto& p : points) samples.push_back(p.samples());
    // Columns: the parameters that vary, and x and series.
    for (const auto& [name, value] : points.front().params) {
        std::set<std::string> values;
        for (const auto& r : points) values.insert(r.params.at(name));
        if (values.size() > 1 || name == spec.x || name == spec.series) varying.push_back(name);
    }
}

Interval Study::interval_of(size_t i, const std::string& metric) const {
    std::vector<double> v;
    if (auto it = samples[i].metrics.find(metric); it != samples[i].metrics.end())
        for (const auto& [round, x] : it->second) v.push_back(x);
    return median_interval(v);
}

double Study::cv_pct(size_t i, const std::string& metric) const {
    auto it = samples[i].metrics.find(metric);
    if (it == samples[i].metrics.end() || it->second.size() < 2) return double(NAN);
    double sum = 0, sq = 0;
    for (const auto& [round, x] : it->second) sum += x;
    const double n = double(it->second.size()), mean = sum / n;
    for (const auto& [round, x] : it->second) sq += (x - mean) * (x - mean);
    return 100 * std::sqrt(sq / (n - 1)) / mean;
}

std::string Study::machine() const { return machine_of(out_dir, facts.board); }

std::string category_label(const std::string& param, const std::string& value) {
    if (param == "ngl" && value == "99") return "all (99)";
    if (param != "ot") return value;
    static const std::regex rule(R"(^(?:blk\\\.\[0-9\]\+\\\.)?(\w+)\\\.weight=(\w+)$)");
    std::smatch m;
    return std::regex_match(value, m, rule) ? m[1].str() + " → " + m[2].str() : value;
}

std::string machine_of(const fs::path& out_dir, const std::string& board) {
    const auto j = machine_json(out_dir);
    return j.is_object() ? j.value("cpu", std::string("?")) + " (" + board + ")" : board;
}

std::string rounds_text(size_t lo, size_t hi) {
    return (lo == hi ? std::to_string(hi) : std::to_string(lo) + "–" + std::to_string(hi)) +
           (hi == 1 ? " round" : " rounds");
}
std::string rounds_text(size_t n) { return rounds_text(n, n); }

}  // namespace profinfer
