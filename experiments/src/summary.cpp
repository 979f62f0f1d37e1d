#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <set>
#include <fstream>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/experiment.h"
#include "profinfer/experiment_index.h"
#include "profinfer/figures.h"
#include "profinfer/machine_bench.h"
#include "profinfer/output_file.h"
#include "profinfer/dag.h"
#include "profinfer/ggml_types.h"
#include "profinfer/gzip_stream.h"
#include "profinfer/intervals.h"
#include "profinfer/tracing_cost.h"
#include "profinfer/plotter.h"
#include "profinfer/regression.h"
#include "profinfer/run_summary.h"
#include "profinfer/timeline.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {



bool numeric(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789.-") == std::string::npos;
}

}  // namespace

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
             {"ttft_ms", "ttft_ms"}, {"tpot_ms", "tpot_ms"}, {"attach_slowdown_pct", "attach_slowdown_pct"},
             {"attached_tps", "attached_tps"}, {"detached_tps", "detached_tps"}, {"unmatched_calls", "unmatched_calls"},
             {"duet_slowdown_pct", "duet_slowdown_pct"}, {"traced_tps", "duet_traced_tps"},
             {"untraced_tps", "duet_untraced_tps"}, {"predicted_pct", "predicted_slowdown_pct"},
             {"traced_calls_pct", "traced_calls_pct"}})
        if (peer.contains(from) && peer[from].is_number()) m[to] = peer[from];
}

}  // namespace

nlohmann::json point_metrics(store::Database* trace, const std::string& bench_json) {
    nlohmann::json m = nlohmann::json::object();
    program_metrics(bench_json, m);
    if (!trace) return m;  // an untraced run: the program's own numbers only
    store::Database& db = *trace;
    {
        int64_t calls = 0;
        const auto tpot = median_tpot_ms(db, &calls);  // the one decode speed (run_summary.h)
        m["decode_calls"] = calls;
        m["decode_tps"] = tpot ? number_or_null(1000.0 / *tpot) : nlohmann::json(nullptr);
    }
    {
        store::Statement st(db.handle(), "SELECT sum(n_tokens), sum(dur_ns) FROM calls WHERE phase = 'prefill'");
        st.step();
        m["prefill_tps"] = st.column_is_null(0) ? nlohmann::json(nullptr)
                                                 : nlohmann::json(st.column_double(0) * 1e9 / st.column_double(1));
    }
    {
        // Operator time of the decode calls (view node_times), and its MatMul and attention shares.
        store::Statement st(db.handle(),
                            "SELECT sum(dur_ns), sum(CASE WHEN matmul THEN dur_ns ELSE 0 END), "
                            "sum(CASE WHEN attention THEN dur_ns ELSE 0 END), count(DISTINCT call) FROM node_times "
                            "WHERE phase = 'decode'");
        st.step();
        const double op = st.column_double(0);
        const int64_t calls = st.column_int(3);
        m["op_ms_per_token"] = calls ? nlohmann::json(op / 1e6 / double(calls)) : nlohmann::json(nullptr);
        m["mul_mat_share_pct"] = op > 0 ? nlohmann::json(100.0 * st.column_double(1) / op) : nlohmann::json(nullptr);
        m["attention_share_pct"] = op > 0 ? nlohmann::json(100.0 * st.column_double(2) / op) : nlohmann::json(nullptr);
    }
    {
        store::Statement st(db.handle(),
                            "SELECT sum(wait_ns), sum(compute_ns + wait_ns), sum(wait_samples), sum(samples) FROM "
                            "thread_parts WHERE phase = 'decode'");
        st.step();
        // Wait is only measured at --level full, by the trace's one split rule (stats.h).
        const auto w = wait_share_pct(wait_split_of(db), st.column_double(0), st.column_double(1), st.column_double(2),
                                      st.column_double(3));
        m["wait_share_pct"] = w ? nlohmann::json(*w) : nlohmann::json(nullptr);
    }
    {
        // Times a target thread lost its CPU while runnable (preempted), per decode call:
        // the scheduler events of --level full; null without them.
        const int64_t switches = db.scalar("SELECT count(*) FROM sched_switch");
        const auto meta = db.meta();
        const std::string pid = meta[store::MetaKey::Pid];
        const int64_t decode = m["decode_calls"].get<int64_t>();
        m["preempted_per_token"] =
            switches > 0 && decode > 0 && !pid.empty()
                ? nlohmann::json(double(db.scalar("SELECT count(*) FROM sched_switch WHERE prev_state = 0 AND prev_tgid = " +
                                                  std::to_string(meta.integer(store::MetaKey::Pid)))) /
                                 double(decode))
                : nlohmann::json(nullptr);
    }
    {
        // Paper Fig. 8 before / during / after: the hog's window (noted in the trace by the
        // runner), and decode speed (1000 / median time per decode call, as decode_tps) of the
        // calls that began before, inside and after it. Null without a hog.
        const auto w = store::hog_window(db.meta());
        for (const char* part : {"before", "during", "after"}) m[std::string("decode_tps_") + part + "_hog"] = nullptr;
        if (w) {
            const int64_t a = w->start_ns, b = w->stop_ns;
            std::vector<double> tpot[3];
            store::Statement st(db.handle(), "SELECT start_ns, dur_ns FROM calls WHERE phase = 'decode'");
            while (st.step()) tpot[st.column_int(0) < a ? 0 : st.column_int(0) <= b ? 1 : 2].push_back(st.column_int(1) / 1e6);
            const char* parts[] = {"before", "during", "after"};
            for (int k = 0; k < 3; ++k)
                if (!tpot[k].empty()) m[std::string("decode_tps_") + parts[k] + "_hog"] = number_or_null(1000.0 / median_of(tpot[k]));
        }
    }
    {
        // Paper Fig. 9 within one generation: attention time per decode step at the end of the
        // run (its last tenth of decode calls, median) over the start (first tenth), and the
        // same for the weight MatMuls. Null under 20 decode calls with operator records.
        std::vector<double> att, mm;
        store::Statement st(db.handle(),
                            "SELECT sum(CASE WHEN attention THEN dur_ns ELSE 0 END), sum(CASE WHEN matmul AND NOT "
                            "attention THEN dur_ns ELSE 0 END) FROM node_times WHERE phase = 'decode' "
                            "GROUP BY call ORDER BY call");
        while (st.step()) att.push_back(st.column_double(0)), mm.push_back(st.column_double(1));
        auto growth = [](const std::vector<double>& v) -> nlohmann::json {
            if (v.size() < 20) return nullptr;
            const size_t tenth = v.size() / 10;
            const double first = median_of({v.begin(), v.begin() + long(tenth)}), last = median_of({v.end() - long(tenth), v.end()});
            return first > 0 ? nlohmann::json(last / first) : nlohmann::json(nullptr);
        };
        m["attention_growth_ratio"] = growth(att);
        m["weight_matmul_growth_ratio"] = growth(mm);
    }
    {
        // Paper Fig. 7: the share of decode call time that belongs to a non-CPU backend
        // (Vulkan here): its graphs (recording and submitting: ggml-vulkan computes
        // asynchronously) and the backend synchronizes that wait for the device. Null when
        // every graph ran on the CPU.
        store::Statement st(db.handle(),
                            "SELECT (SELECT coalesce(sum(g.end_ns - g.start_ns), 0) FROM call_graphs g WHERE g.phase = "
                            "'decode' AND g.api = 'backend' AND g.backend IS NOT NULL AND g.backend != 'CPU') + "
                            "(SELECT coalesce(sum(e.end_ns - e.start_ns), 0) FROM gpu_events e JOIN calls c ON e.start_ns "
                            ">= c.start_ns AND e.end_ns <= c.end_ns AND c.phase = 'decode' WHERE e.kind = 'synchronize'), "
                            "(SELECT sum(dur_ns) FROM calls WHERE phase = 'decode')");
        st.step();
        const double gpu = st.column_double(0), total = st.column_double(1);
        m["gpu_graph_share_pct"] = gpu > 0 && total > 0 ? nlohmann::json(100.0 * gpu / total) : nlohmann::json(nullptr);
    }
    {
        // Paper Fig. 11's mechanism: the rate decode's weight MatMuls (KQ/KQV excluded) stream
        // their weights, bytes of the weight (src0, at its type's size) over the nodes' time,
        // on up to 16 decode calls spread over the run. Near the machine's triad roof, decode
        // is memory-bound (weight_stream_roof_pct, where the results have a machine.json).
        TraceGraphs trace(db);
        std::vector<int> decode;
        for (const auto& c : trace.calls())
            if (c.phase == "decode") decode.push_back(c.index);
        double bytes = 0, ns = 0;
        const size_t step = std::max<size_t>(1, decode.size() / 16);
        for (size_t i = 0; i < decode.size(); i += step)
            for (const auto& n : trace.nodes(decode[i])) {
                if (n.op != "MUL_MAT" || n.base == "kq" || n.base == "kqv" || n.srcs.empty() || n.srcs[0].type < 0) continue;
                const auto& ne = n.srcs[0].ne;
                bytes += double(ggml_bytes(uint32_t(n.srcs[0].type), uint64_t(ne[0] * ne[1] * ne[2] * ne[3])));
                ns += double(n.end_ns - n.start_ns);
            }
        m["weight_stream_gbs"] = ns > 0 ? nlohmann::json(bytes / ns) : nlohmann::json(nullptr);
        // Paper Fig. 3/4: graph nodes per block of the middle layer (attention norm → the ADD
        // closing attention; from there to l_out), in the middle decode call: the table of
        // operators per block and model (Gemma 2's post-norms and soft-capping add six).
        m["attn_block_ops"] = m["ffn_block_ops"] = nullptr;
        if (!decode.empty()) try {
            const Dag dag = Dag::build(trace, trace.default_call());
            int max_layer = -1;
            for (const auto& n : dag.nodes) max_layer = std::max(max_layer, n.layer);
            if (max_layer >= 0) {
                m["attn_block_ops"] = dag.filtered(max_layer / 2, "attn").nodes.size();
                m["ffn_block_ops"] = dag.filtered(max_layer / 2, "ffn").nodes.size();
            }
        } catch (const Error&) {
            // no operator records in that call (--level token or graph)
        }
    }
    {
        // Paper Fig. 3/4 within self-attention (flash attention off): the heavier of the KQ and
        // KQV MatMuls against the heaviest weight MatMul of the block (Q, K, V, output
        // projection), decode time summed over the layers; > 1: KQ or KQV is the heaviest node.
        store::Statement st(db.handle(),
                            "SELECT (SELECT max(t) FROM (SELECT sum(dur_ns) AS t FROM node_times WHERE phase = 'decode' AND "
                            "op = 'MUL_MAT' AND base IN ('kq', 'kqv') GROUP BY base)), (SELECT max(t) FROM (SELECT "
                            "sum(dur_ns) AS t FROM node_times WHERE phase = 'decode' AND op = 'MUL_MAT' AND base IN "
                            "('Qcur', 'Kcur', 'Vcur', 'attn_out') GROUP BY base))");
        st.step();
        m["kq_over_weight_ratio"] = !st.column_is_null(0) && st.column_double(1) > 0
                                        ? nlohmann::json(st.column_double(0) / st.column_double(1))
                                        : nlohmann::json(nullptr);
    }
    {
        // Paper Fig. 13 at steady state: the MoE MatMuls' (MUL_MAT_ID) time and major faults
        // per decode call after the first; the first decode call (cold: it reads the experts
        // never read before) on its own. Null without MoE nodes (faults: without the counter).
        std::string faults = "NULL";
        const auto names = db.counter_names();
        for (size_t k = 0; k < names.size(); ++k)
            if (names[k] == "major-faults") faults = "sum(c" + std::to_string(k) + ")";
        const std::string first = "(SELECT min(call) FROM calls WHERE phase = 'decode')";
        const std::string sql =
                            "SELECT (SELECT sum(dur_ns) FROM node_times WHERE phase = 'decode' AND op = 'MUL_MAT_ID' AND call "
                            "> " + first + "), (SELECT count(*) FROM calls WHERE phase = 'decode' AND call > " + first +
                                "), (SELECT sum(dur_ns) FROM node_times WHERE op = 'MUL_MAT_ID' AND call = " + first +
                                "), (SELECT " + faults + " FROM thread_parts WHERE phase = 'decode' AND op = 'MUL_MAT_ID' AND "
                                "call > " + first + "), (SELECT " + faults + " FROM thread_parts WHERE op = 'MUL_MAT_ID' "
                                "AND call = " + first + ")";
        store::Statement st(db.handle(), sql.c_str());
        st.step();
        const bool moe = !st.column_is_null(0) && st.column_int(1) > 0;
        const double calls = double(st.column_int(1));
        m["moe_ms_per_token"] = moe ? nlohmann::json(st.column_double(0) / 1e6 / calls) : nlohmann::json(nullptr);
        m["moe_first_call_ms"] = st.column_is_null(2) ? nlohmann::json(nullptr) : nlohmann::json(st.column_double(2) / 1e6);
        m["moe_major_faults_per_token"] =
            moe && !st.column_is_null(3) ? nlohmann::json(st.column_double(3) / calls) : nlohmann::json(nullptr);
        m["moe_first_call_major_faults"] = st.column_is_null(4) ? nlohmann::json(nullptr) : nlohmann::json(st.column_double(4));
        // Fig. 13's own relation, per run: Pearson r of ffn_moe_up's time against its experts'
        // mean reuse distance over the steady-state decode calls (no expert used for the first time).
        m["moe_reuse_time_r"] = nullptr;
        if (moe) {
            std::vector<double> dist, us;
            for (const auto& r : stats_table(db, "expert-call").to_json())
                if (r["phase"] == "decode" && r["node"] == "ffn_moe_up" && r["first_uses"] == 0 &&
                    r["mean_reuse_distance"].is_number())
                    dist.push_back(r["mean_reuse_distance"].get<double>()), us.push_back(r["time_us"].get<double>());
            try {
                m["moe_reuse_time_r"] = pearson(dist, us).r;
            } catch (const Error&) {
                // too few steady-state calls, or no variation: no r
            }
        }
    }
    {
        // Paper Fig. 6 from the exact split (--wait exact: a probe on every barrier): the
        // share of its decode time the most-waiting thread spends waiting, in MatMul nodes and
        // in every other node. Null where barriers were not traced or one thread ran.
        auto most_waiting = [&](const char* which) {
            const std::string sql = std::string("SELECT max(w) FROM (SELECT 100.0 * sum(wait_ns) / sum(compute_ns + wait_ns) AS w "
                                            "FROM thread_parts WHERE phase = 'decode' AND nth > 1 AND barriers > 0 AND ") +
                                    which + " GROUP BY ith)";
            store::Statement st(db.handle(), sql.c_str());
            st.step();
            return st.column_is_null(0) ? nlohmann::json(nullptr) : nlohmann::json(st.column_double(0));
        };
        m["wait_share_matmul_pct"] = most_waiting("matmul");
        m["wait_share_other_pct"] = most_waiting("NOT matmul");
    }
    return m;
}

namespace {

struct MetricInfo {
    std::string name, unit;
};
// Every metric of a point, with the unit its axis and table show.
const std::vector<MetricInfo> kMetrics = {
    {"decode_tps", "tokens/s"},          {"prefill_tps", "tokens/s"},      {"bench_tg_tps", "tokens/s"},
    {"bench_pp_tps", "tokens/s"},        {"op_ms_per_token", "ms"},        {"mul_mat_share_pct", "%"},
    {"attention_share_pct", "%"},        {"wait_share_pct", "%"},          {"preempted_per_token", "preemptions/token"},
    {"gpu_graph_share_pct", "%"},        {"kq_over_weight_ratio", "ratio"}, {"moe_ms_per_token", "ms"},
    {"moe_first_call_ms", "ms"},         {"moe_major_faults_per_token", "faults/token"}, {"moe_reuse_time_r", "r"},
    {"moe_first_call_major_faults", "faults"}, {"wait_share_matmul_pct", "%"}, {"wait_share_other_pct", "%"},
    {"cpu_s", "s"},                      {"paired_window_pct", "%"},       {"budget_achieved_pct", "%"},
    {"traced_calls_pct", "%"},           {"dump_dot_ms", "ms"},            {"dump_dot_pct_of_decode", "%"},
    {"weight_stream_gbs", "GB/s"},       {"weight_stream_roof_pct", "% of triad"},
    {"attention_growth_ratio", "ratio"}, {"weight_matmul_growth_ratio", "ratio"},
    {"attn_block_ops", "nodes"},         {"ffn_block_ops", "nodes"},
    {"serve_tps", "generated tokens/s"}, {"ttft_ms", "ms"},           {"tpot_ms", "ms"},
    {"attach_slowdown_pct", "% of decode speed"}, {"attached_tps", "tokens/s"}, {"detached_tps", "tokens/s"},
    {"unmatched_calls", "calls"},
    {"duet_slowdown_pct", "% of decode speed"}, {"duet_traced_tps", "tokens/s"}, {"duet_untraced_tps", "tokens/s"},
    {"predicted_slowdown_pct", "% of decode speed"},
    {"decode_tps_before_hog", "tokens/s"}, {"decode_tps_during_hog", "tokens/s"}, {"decode_tps_after_hog", "tokens/s"}};

const std::string& unit_of(const std::string& metric) {
    static const std::string none;
    for (const auto& m : kMetrics)
        if (m.name == metric) return m.unit;
    return none;
}

std::string fmt3(double v) { return format_number(v); }

}  // namespace

std::string rounds_text(size_t lo, size_t hi) {
    return (lo == hi ? std::to_string(hi) : std::to_string(lo) + "–" + std::to_string(hi)) +
           (hi == 1 ? " round" : " rounds");
}
std::string rounds_text(size_t n) { return rounds_text(n, n); }

namespace {

std::string with_interval(const Interval& i) { return format_with_interval(i.median, i.lo, i.hi); }

nlohmann::json cell(const std::string& text) {
    if (!numeric(text)) return text;
    if (text.find('.') == std::string::npos) return int64_t(std::stoll(text));  // threads, ctx, ...: integers
    return std::stod(text);
}

// A point of the study with every round recorded for it.
struct Recorded {
    std::string id;
    std::map<std::string, std::string> params;
    std::vector<std::pair<int, fs::path>> dbs;  // (round, trace DB), by round
    std::vector<nlohmann::json> metrics;        // per entry of dbs
    PointSamples samples() const {
        PointSamples s{params, {}};
        for (size_t i = 0; i < dbs.size(); ++i)
            for (const auto& [name, v] : metrics[i].items())
                if (v.is_number()) s.metrics[name][dbs[i].first] = v.get<double>();
        return s;
    }
};

// The runs done of the sweep's points, from the index, point by point in the sweep's order.
// results/<board>/machine.json beside the study (the study's folder is results/<board>/NAME,
// or results/<board>/quick/NAME); null when there is none.
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

// What the index says of the study as a whole.
struct StudyFacts {
    std::string board = "host";
    double recording_s = 0;  // the runs' own time, summed
};

std::vector<Recorded> read_runs(const ExperimentSpec& spec, const fs::path& out_dir, bool quick, StudyFacts& facts) {
    const fs::path index = out_dir / "index.db";
    std::vector<Recorded> points;
    std::map<std::string, size_t> at;
    const nlohmann::json machine = machine_json(out_dir);
    for (const auto& p : spec.points(quick)) {
        at[p.id()] = points.size();
        points.push_back({p.id(), p.params, {}, {}});  // parameters as the sweep has them now
    }
    store::ExperimentIndex ix(index, store::ExperimentIndex::Mode::Read);
    if (auto f = ix.facts(); f.count("board")) facts.board = f["board"];
    for (const auto& run : ix.done_runs()) {
        auto it = at.find(run.id);
        if (it == at.end()) continue;  // the other sweep's point
        Recorded& r = points[it->second];
        facts.recording_s += run.seconds;
        const fs::path db = run.db;
        r.dbs.push_back({run.round, db});
        std::optional<store::Database> trace;  // the run's trace, opened once for every measure
        if (!db.empty()) trace.emplace(db, store::Database::Mode::ReadOnly);
        nlohmann::json m = point_metrics(trace ? &*trace : nullptr, run.bench);
        m["cpu_s"] = run.cpu_s ? nlohmann::json(*run.cpu_s) : nlohmann::json(nullptr);
        // The tracing-cost measures a run makes on itself.
        const std::string& tracer = r.params.at("tracer");
        if (!db.empty() && tracer.size() > 7 && tracer.substr(tracer.size() - 7) == "-paired")
            m["paired_window_pct"] = number_or_null(median_of(paired_window_slowdowns_pct(*trace)));
        if (!db.empty() && tracer.rfind("budget-", 0) == 0) {
            m["budget_achieved_pct"] = number_or_null(achieved_overhead_pct(*trace));
            m["traced_calls_pct"] = number_or_null(traced_calls_pct(*trace));
        }
        if (m.contains("weight_stream_gbs") && m["weight_stream_gbs"].is_number()) {
            const double roof = triad_gbs(machine, std::stoi(r.params.at("threads")));
            m["weight_stream_roof_pct"] = roof > 0 ? nlohmann::json(100 * m["weight_stream_gbs"].get<double>() / roof)
                                                   : nlohmann::json(nullptr);
        }
        r.metrics.push_back(std::move(m));
    }
    std::vector<Recorded> done;
    for (auto& p : points)
        if (!p.dbs.empty()) done.push_back(std::move(p));
    return done;
}

// The machine the results are for, for captions: results/<board>/machine.json's CPU.
// A category as a figure's axis prints it: an --override-tensor rule by the weight it moves
// and where ("attn_q → Vulkan0", not the whole regular expression), -ngl 99 as every layer;
// other values as they are.
std::string category_label(const std::string& param, const std::string& value) {
    if (param == "ngl" && value == "99") return "all (99)";
    if (param != "ot") return value;
    static const std::regex rule(R"(^(?:blk\\\.\[0-9\]\+\\\.)?(\w+)\\\.weight=(\w+)$)");
    std::smatch m;
    return std::regex_match(value, m, rule) ? m[1].str() + " → " + m[2].str() : value;
}

}  // namespace

std::string machine_of(const fs::path& out_dir, const std::string& board) {
    const auto j = machine_json(out_dir);
    return j.is_object() ? j.value("cpu", std::string("?")) + " (" + board + ")" : board;
}

namespace {

// The parameters naming a point's group for a comparison: those the selectors do not fix
// and that differ between the points.
std::string group_name(const std::map<std::string, std::string>& params, const std::vector<PointSamples>& points,
                       const std::map<std::string, std::string>& fixed_a, const std::map<std::string, std::string>& fixed_b) {
    std::string g;
    for (const auto& [k, v] : params) {
        if (fixed_a.count(k) || fixed_b.count(k)) continue;
        bool varies = false;
        for (const auto& q : points) varies |= q.params.at(k) != v;
        if (varies) g += (g.empty() ? "" : ", ") + k + "=" + v;
    }
    return g;
}

// Paper Table 5's view: every point against its group's baseline point (spec.baseline), in
// the same rounds: the program's decode (a server's: its throughput) and prompt slowdown and
// the CPU time it adds, each
// the median of per-round ratios' bootstrap (ratio_interval), and the decode slowdown as a
// multiple of the bpftrace floor's.
void write_vs_baseline(const ExperimentSpec& spec, const std::vector<PointSamples>& points, const fs::path& out_dir,
                       std::vector<fs::path>& written) {
    std::map<std::string, const PointSamples*> base;
    for (const auto& p : points)
        if (p.matches(spec.baseline)) base[group_name(p.params, points, spec.baseline, {})] = &p;
    Table t;
    t.columns = {"point", "group", "n", "decode_slowdown_pct", "decode_slowdown_lo", "decode_slowdown_hi",
                 "prefill_slowdown_pct", "prefill_slowdown_lo", "prefill_slowdown_hi", "cpu_pct", "cpu_lo", "cpu_hi",
                 "x_floor"};
    std::ostringstream md;
    md << "# " << spec.title << ": each point against its baseline (" << spec.name << ")\n\n"
       << "Per point, against the point of its group with";
    for (const auto& [k, v] : spec.baseline) md << " " << k << "=" << v;
    md << ", in the same rounds: slowdown = 100 × (1 − its speed / the baseline's), CPU = 100 × (its CPU time / the "
          "baseline's − 1) (the run's whole CPU time, tracer included); each the median over the rounds of the round's own "
          "ratio (both measured in that round) with a 95 % bootstrap interval over rounds (for program=server the decode "
          "column is the server's throughput, serve_tps); × floor: the decode slowdown over the bpftrace floor's in the same group.\n\n"
       << "| point | group | n | decode slowdown % | prefill slowdown % | CPU time % | × floor |\n|---|---|---|---|---|---|---|\n";
    struct Row {
        std::string name, group;
        Interval d, p, c;
    };
    std::vector<Row> rows;
    std::map<std::string, double> floor;  // the bpftrace floor's decode slowdown, per group
    for (const auto& p : points) {
        if (p.matches(spec.baseline)) continue;
        const std::string g = group_name(p.params, points, spec.baseline, {});
        auto b = base.find(g);
        if (b == base.end()) continue;  // no baseline in its group (e.g. runs measured against themselves)
        std::string name;
        for (const auto& [k, v] : p.params)
            if (spec.baseline.count(k)) name += (name.empty() ? "" : ", ") + k + "=" + v;
        auto slowdown = [](Interval r) {  // ratio → 100 (1 − r), the interval's ends swapped
            Interval o = r;
            o.median = 100 * (1 - r.median), o.lo = 100 * (1 - r.hi), o.hi = 100 * (1 - r.lo);
            return o;
        };
        Interval c = ratio_interval(p.of("cpu_s"), b->second->of("cpu_s"));
        c.median = 100 * (c.median - 1), c.lo = 100 * (c.lo - 1), c.hi = 100 * (c.hi - 1);
        // A server's speed is its throughput (serve_tps): the "decode" column holds it.
        const char* speed = p.params.at("program") == "server" ? "serve_tps" : "bench_tg_tps";
        rows.push_back({name, g, slowdown(ratio_interval(p.of(speed), b->second->of(speed))),
                        slowdown(ratio_interval(p.of("bench_pp_tps"), b->second->of("bench_pp_tps"))), c});
        if (p.params.at("tracer") == "bpftrace") floor[g] = rows.back().d.median;
    }
    for (const auto& r : rows) {
        // Against the floor measured in the same group (model, threads): none there, none given.
        const auto f = floor.find(r.group);
        const double x = f != floor.end() && std::isfinite(f->second) && f->second > 0 ? r.d.median / f->second : NAN;
        t.rows.push_back({r.name, r.group, int64_t(r.d.n), number_or_null(r.d.median), number_or_null(r.d.lo),
                          number_or_null(r.d.hi), number_or_null(r.p.median), number_or_null(r.p.lo), number_or_null(r.p.hi),
                          number_or_null(r.c.median), number_or_null(r.c.lo), number_or_null(r.c.hi), number_or_null(x)});
        md << "| " << r.name << " | " << (r.group.empty() ? "–" : r.group) << " | " << r.d.n << " | " << with_interval(r.d)
           << " | " << with_interval(r.p) << " | " << with_interval(r.c) << " | " << fmt3(x) << " |\n";
    }
    OutputFile::write(out_dir / "vs-baseline.csv", t.to_csv());
    OutputFile::write(out_dir / "vs-baseline.md", md.str());
    written.push_back(out_dir / "vs-baseline.csv");
    written.push_back(out_dir / "vs-baseline.md");
}

// Operator times against the eval callback's, per round: the program evalcb recorded at
// tracer op, and the same round's callback run (its nodes CSV).
void write_fidelity(const std::vector<Recorded>& points, const fs::path& out_dir, std::vector<fs::path>& written) {
    Table t;
    t.columns = {"round", "operators", "median_rel_err_pct", "callback_slower_pct", "profinfer_ms", "callback_ms",
                 "coverage_pct"};
    std::vector<double> err, slower;
    for (const auto& traced : points) {
        if (traced.params.at("program") != "evalcb" || traced.params.at("tracer") != "op") continue;
        for (const auto& cb : points) {
            if (cb.params.at("program") != "evalcb" || cb.params.at("tracer") != "evalcb") continue;
            auto same = traced.params;
            same["tracer"] = "evalcb";
            if (same != cb.params) continue;
            for (const auto& [round, db] : traced.dbs)
                for (const auto& [cb_round, cb_db] : cb.dbs) {
                    if (cb_round != round) continue;
                    // The callback run wrote its nodes next to where its DB would be.
                    const fs::path nodes = out_dir / "points" / (cb.id + "-r" + std::to_string(round) + ".db.nodes.csv");
                    if (!fs::exists(nodes)) continue;
                    store::Database trace(db, store::Database::Mode::ReadOnly);
                    const Fidelity f = fidelity_against_callback(trace, nodes);
                    std::string cover;
                    for (const auto& [th, pct] : f.coverage_pct) cover += (cover.empty() ? "" : " ") + th + ":" + fmt3(pct);
                    t.rows.push_back({int64_t(round), int64_t(f.operators), number_or_null(f.median_rel_err_pct),
                                      number_or_null(f.callback_slower_pct), f.profinfer_ms, f.callback_ms, cover});
                    err.push_back(f.median_rel_err_pct), slower.push_back(f.callback_slower_pct);
                }
        }
    }
    if (t.rows.empty()) return;
    std::ostringstream md;
    md << "# Fidelity: profinfer's operator times against llama.cpp's eval callback\n\n"
       << "Per round: evalcb_peer recorded by `profinfer record --level op` (the callback off) against the same "
          "program with the eval callback timestamping every node (its own run of the round); per (name, op) the mean "
          "time of each, decode calls after the first. Over the rounds: median relative error "
       << with_interval(median_interval(err)) << " %, callback slower in " << with_interval(median_interval(slower))
       << " % of the operators.\n\n| round | operators | median rel. error % | callback slower % | profinfer ms | "
          "callback ms | thread coverage % |\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : t.rows)
        md << "| " << r[0].dump() << " | " << r[1].dump() << " | " << fmt3(r[2].is_number() ? r[2].get<double>() : NAN)
           << " | " << fmt3(r[3].is_number() ? r[3].get<double>() : NAN) << " | " << fmt3(r[4].get<double>()) << " | "
           << fmt3(r[5].get<double>()) << " | " << r[6].get<std::string>() << " |\n";
    OutputFile::write(out_dir / "fidelity.csv", t.to_csv());
    OutputFile::write(out_dir / "fidelity.md", md.str());
    written.push_back(out_dir / "fidelity.csv");
    written.push_back(out_dir / "fidelity.md");
}

}  // namespace

std::vector<PointSamples> study_samples(const ExperimentSpec& spec, const fs::path& out_dir, bool quick) {
    StudyFacts facts;
    std::vector<PointSamples> out;
    for (const auto& r : read_runs(spec, out_dir, quick, facts)) out.push_back(r.samples());
    return out;
}

Testbed Testbed::here() {
    Testbed t;
    t.cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CPU_CYCLES;
    a.disabled = 1;
    a.exclude_kernel = 1;
    const int fd = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    t.pmu = fd >= 0;
    if (fd >= 0) close(fd);
    return t;
}

std::vector<ClaimResult> evaluate_claims(const ExperimentSpec& spec, const std::vector<PointSamples>& all_points,
                                         const Testbed& here, const std::vector<PointSamples>& fits) {
    std::vector<ClaimResult> out;
    for (const auto& c : spec.claims) {
        const std::vector<PointSamples>& points = c.on == "fits" ? fits : all_points;
        std::string untestable = c.not_testable;
        if (untestable.empty() && c.requires_cpus > here.cpus)
            untestable = "needs " + std::to_string(c.requires_cpus) + " CPUs or more; this machine has " +
                         std::to_string(here.cpus);
        if (untestable.empty() && c.requires_pmu && !here.pmu)
            untestable = "needs hardware performance counters; this machine has no PMU";
        if (!untestable.empty()) {
            out.push_back({&c, "", Interval{}, Verdict::NotTestable, untestable});
            continue;
        }
        // Each side's points, grouped by the parameters neither side fixes.
        std::map<std::string, const PointSamples*> as, bs;
        for (const auto& p : points) {
            if (p.matches(c.a)) as[group_name(p.params, points, c.a, c.b)] = &p;
            if (!c.value && p.matches(c.b)) bs[group_name(p.params, points, c.a, c.b)] = &p;
        }
        if (as.empty()) {
            out.push_back({&c, "", Interval{}, Verdict::NotTestable,
                           std::string(c.on == "fits" ? "no fitted line" : "no recorded point") + " matches a"});
            continue;
        }
        for (const auto& [group, a] : as) {
            ClaimResult r{&c, group, Interval{}, Verdict::NotTestable, ""};
            const ByRound& av = a->of(c.metric);
            if (c.value) {
                std::vector<double> v;
                for (const auto& [round, x] : av) v.push_back(x);
                r.estimate = median_interval(v);
                r.verdict = judge(r.estimate, *c.value, c.expect_greater);
            } else if (auto b = bs.find(group); b == bs.end()) {
                r.reason = "no recorded point matches b" + (group.empty() ? "" : " for " + group);
            } else {
                const std::string& metric_b = c.metric_b.empty() ? c.metric : c.metric_b;
                const ByRound& bv = b->second->of(metric_b);
                // A ratio to b means something only where b is above 0 (a speed always is; a
                // slowdown inside its noise crosses 0 and makes the ratio swing through ±∞).
                const auto not_positive = std::count_if(bv.begin(), bv.end(), [](const auto& x) { return !(x.second > 0); });
                if (av.empty() || bv.empty()) {
                    // Name the side that has no value: a point measured on one side only
                    // (a hog that starts before the first decode call has no "before").
                    r.reason = (av.empty() ? c.metric + " was not measured in a" : "") +
                               (av.empty() && bv.empty() ? "; " : "") +
                               (bv.empty() ? metric_b + " was not measured in b" : "");
                } else if (not_positive > 0) {
                    r.reason = "b is not above 0 in " + std::to_string(not_positive) + " of its " + rounds_text(bv.size()) +
                               ": a ratio to it says nothing";
                } else {
                    r.estimate = ratio_interval(av, bv);
                    r.verdict = judge(r.estimate, c.factor, c.expect_greater);
                }
            }
            if (r.verdict == Verdict::NotTestable && r.reason.empty())
                r.reason = r.estimate.n == 0 ? c.metric + " was not measured in a"
                                             : "n = " + rounds_text(r.estimate.n) + ": too few for an interval (at least " +
                                                   std::to_string(kMinRoundsForInterval) + ")";
            out.push_back(r);
        }
    }
    return out;
}

std::vector<fs::path> summarise_experiment(const ExperimentSpec& spec, const fs::path& out_dir, bool quick) {
    StudyFacts facts;
    const std::vector<Recorded> points = read_runs(spec, out_dir, quick, facts);
    const std::string& board = facts.board;
    if (points.empty()) throw Error(spec.name + ": no point is done yet");
    const size_t n_sweep = spec.points(quick).size();
    size_t max_n = 0, min_n = SIZE_MAX;
    for (const auto& p : points) max_n = std::max(max_n, p.dbs.size()), min_n = std::min(min_n, p.dbs.size());
    std::vector<PointSamples> samples;
    for (const auto& p : points) samples.push_back(p.samples());
    auto interval_of = [&](size_t i, const std::string& metric) {
        std::vector<double> v;
        if (auto it = samples[i].metrics.find(metric); it != samples[i].metrics.end())
            for (const auto& [round, x] : it->second) v.push_back(x);
        return median_interval(v);
    };
    // Coefficient of variation over the rounds (sample standard deviation / mean), in %.
    auto cv_pct = [&](size_t i, const std::string& metric) {
        auto it = samples[i].metrics.find(metric);
        if (it == samples[i].metrics.end() || it->second.size() < 2) return double(NAN);
        double sum = 0, sq = 0;
        for (const auto& [round, x] : it->second) sum += x;
        const double n = double(it->second.size()), mean = sum / n;
        for (const auto& [round, x] : it->second) sq += (x - mean) * (x - mean);
        return 100 * std::sqrt(sq / (n - 1)) / mean;
    };
    // Columns: the parameters that vary, n, then every metric's median and interval.
    std::vector<std::string> varying;
    for (const auto& [name, value] : points.front().params) {
        std::set<std::string> values;
        for (const auto& r : points) values.insert(r.params.at(name));
        if (values.size() > 1 || name == spec.x || name == spec.series) varying.push_back(name);
    }
    std::vector<fs::path> written;
    Table t, all;
    t.columns = varying;
    t.columns.push_back("n");
    t.columns.push_back("decode_tps_cv_pct");  // run-to-run spread: coefficient of variation over the rounds
    all.columns = {"id"};
    for (const auto& [name, value] : points.front().params) all.columns.push_back(name);
    all.columns.push_back("n");
    // The table shows the metrics this study measured; points.csv has them all.
    std::vector<MetricInfo> shown;
    for (const auto& m : kMetrics) {
        bool measured = false;
        for (const auto& p : samples) measured |= p.metrics.count(m.name) > 0;
        if (measured) shown.push_back(m);
        for (Table* tab : {&t, &all}) {
            if (tab == &t && !measured) continue;
            tab->columns.push_back(m.name);
            tab->columns.push_back(m.name + "_lo");
            tab->columns.push_back(m.name + "_hi");
        }
    }
    std::vector<std::vector<std::string>> md_rows;
    for (size_t i = 0; i < points.size(); ++i) {
        const auto& r = points[i];
        std::vector<nlohmann::json> cells, every{r.id};
        std::vector<std::string> md;
        for (const auto& v : varying) cells.push_back(cell(r.params.at(v))), md.push_back(r.params.at(v));
        for (const auto& [name, value] : r.params) every.push_back(value);
        cells.push_back(int64_t(r.dbs.size()));
        const double cv = cv_pct(i, "decode_tps");
        cells.push_back(number_or_null(cv));
        every.push_back(int64_t(r.dbs.size()));
        md.push_back(std::to_string(r.dbs.size()));
        md.push_back(fmt3(cv));
        for (const auto& m : kMetrics) {
            const Interval iv = interval_of(i, m.name);
            const bool is_shown =
                std::any_of(shown.begin(), shown.end(), [&](const MetricInfo& x) { return x.name == m.name; });
            for (auto* row : {&cells, &every}) {
                if (row == &cells && !is_shown) continue;
                row->push_back(number_or_null(iv.median));
                row->push_back(number_or_null(iv.lo));
                row->push_back(number_or_null(iv.hi));
            }
            if (is_shown) md.push_back(with_interval(iv));
        }
        t.rows.push_back(std::move(cells));
        all.rows.push_back(std::move(every));
        md_rows.push_back(std::move(md));
    }
    // Per-point outputs, named by the point's id, from its first recorded round.
    std::optional<MachineBench> machine;  // the roofs, for a roofline figure
    if (const fs::path m = out_dir.parent_path() / "machine.json"; !spec.figures.empty() && fs::exists(m))
        machine = MachineBench::load(m);
    for (const auto& r : points) {
        const fs::path base = out_dir / "points" / r.id;
        const fs::path path = r.dbs.front().second;  // empty for an untraced point
        if (path.empty() || (spec.dag.empty() && spec.stats.empty() && spec.figures.empty() && !spec.timeline)) continue;
        store::Database db(path, store::Database::Mode::ReadOnly);  // opened once for its outputs
        if (!spec.dag.empty()) {
            TraceGraphs trace(db);
            Dag dag = Dag::build(trace, trace.default_call());
            int max_layer = -1;
            for (const auto& n : dag.nodes) max_layer = std::max(max_layer, n.layer);
            if (!dag.nodes.empty() && max_layer >= 0) {
                dag = dag.filtered(max_layer / 2, spec.dag == "layer" ? "" : spec.dag);
                dag.write(base.string() + "-dag-" + spec.dag + ".svg", Dag::Colour::Time);
                written.push_back(base.string() + "-dag-" + spec.dag + ".svg");
            }
        }
        for (const auto& by : spec.stats) {
            const fs::path f = base.string() + "-stat-" + by + ".csv";
            OutputFile::write(f, stats_table(db, by).to_csv());
            written.push_back(f);
        }
        if (!spec.figures.empty()) {
            // The recording's own figures (timeline: paper Fig. 5, threads: Fig. 6, tokens: Fig. 9,
            // experts: Fig. 13) from the point's first round, named points/<id>-<kind>.
            const std::string caption = machine_of(out_dir, board) + "; " + r.params.at("model") + " " +
                                        r.params.at("type") + ", " + r.params.at("threads") + " threads; --level " +
                                        spec.level + "; one run: round " + std::to_string(r.dbs.front().first) + " of " +
                                        std::to_string(r.dbs.size());
            for (const auto& f : draw_figures(db, out_dir / "points", machine ? &*machine : nullptr, spec.figures,
                                              r.id + "-", caption))
                written.push_back(f.png), written.push_back(f.svg);
        }
        if (spec.timeline) {
            const fs::path f = base.string() + "-trace.json.gz";
            OutputFile file(f);
            GzipStream gz(file.stream());
            write_timeline(db, gz);
            gz.finish();
            file.commit();
            written.push_back(f);
        }
    }
    // Every (point, round) recording, for the summaries across points below.
    std::vector<StudyPoint> pts;
    size_t rounds = 0;
    for (const auto& r : points) {
        for (const auto& [round, db] : r.dbs) pts.push_back({r.params, db, round});
        rounds = std::max(rounds, r.dbs.size());
    }
    std::vector<PointSamples> fits;  // the fitted lines, for claims on them
    if (spec.matmuls) {
        auto m = summarise_matmuls(spec, pts, out_dir,
                                   machine_of(out_dir, board) + "; " + std::to_string(points.size()) +
                                       " points (models x types x threads); --level " + spec.level +
                                       "; each shape's median per call, every round: " + rounds_text(rounds));
        written.insert(written.end(), m.files.begin(), m.files.end());
        fits = std::move(m.fits);
    }
    if (std::find(spec.figures.begin(), spec.figures.end(), "threads") != spec.figures.end()) {
        const auto f = summarise_wait_methods(spec, pts, out_dir,
                                              machine_of(out_dir, board) + "; " + points.front().params.at("model") + " " +
                                                  points.front().params.at("type") + "; --level full; one run of each: round 1");
        written.insert(written.end(), f.begin(), f.end());
    }
    if (spec.matmul_backends) {
        const auto f = summarise_matmul_backends(spec, pts, out_dir,
                                                 machine_of(out_dir, board) + "; " + points.front().params.at("model") +
                                                     ", decode; CPU: --level " + spec.level + " trace, " +
                                                     points.front().params.at("threads") + " threads; Vulkan: lavapipe; n = " +
                                                     rounds_text(rounds) + " per side");
        written.insert(written.end(), f.begin(), f.end());
    }
    OutputFile::write(out_dir / "table.csv", t.to_csv());
    written.push_back(out_dir / "table.csv");
    // Every parameter of every point beside its metrics: what a later step (profinfer fit) reads.
    OutputFile::write(out_dir / "points.csv", all.to_csv());
    written.push_back(out_dir / "points.csv");
    {
        // Every run (point, round) with its metrics: what the medians and intervals come from.
        Table runs;
        runs.columns = {"id", "round"};
        for (const auto& m : kMetrics) runs.columns.push_back(m.name);
        for (const auto& r : points)
            for (size_t k = 0; k < r.dbs.size(); ++k) {
                std::vector<nlohmann::json> row{r.id, int64_t(r.dbs[k].first)};
                for (const auto& m : kMetrics) row.push_back(r.metrics[k].value(m.name, nlohmann::json(nullptr)));
                runs.rows.push_back(std::move(row));
            }
        OutputFile::write(out_dir / "runs.csv", runs.to_csv());
        written.push_back(out_dir / "runs.csv");
    }
    if (!spec.baseline.empty()) write_vs_baseline(spec, samples, out_dir, written);
    if (spec.fidelity) write_fidelity(points, out_dir, written);
    const auto verdicts = evaluate_claims(spec, samples, Testbed::here(), fits);
    {
        Table v;
        v.columns = {"claim", "metric", "expect", "a", "b", "group", "estimate", "lo", "hi", "n", "verdict", "reason"};
        auto sel = [](const std::map<std::string, std::string>& s) {
            std::string o;
            for (const auto& [k, x] : s) o += (o.empty() ? "" : ", ") + k + "=" + x;
            return o;
        };
        for (const auto& r : verdicts) {
            const Claim& c = *r.claim;
            v.rows.push_back({c.says, c.compared(), c.expectation(), sel(c.a),
                              c.value ? nlohmann::json(*c.value) : nlohmann::json(sel(c.b)), r.group,
                              number_or_null(r.estimate.median), number_or_null(r.estimate.lo),
                              number_or_null(r.estimate.hi), int64_t(r.estimate.n), to_string(r.verdict), r.reason});
        }
        OutputFile::write(out_dir / "verdicts.csv", v.to_csv());
        written.push_back(out_dir / "verdicts.csv");
    }
    {
        std::ostringstream md;
        md << "# " << spec.title << "\n\n";
        if (!spec.paper.empty()) md << "Reproduces: " << spec.paper << ". ";
        md << "Tracer level: `" << spec.level << "`. Sweep: " << (quick ? "quick" : "full") << ", " << points.size()
           << " of " << n_sweep << " points recorded, "
           << rounds_text(min_n, max_n) << " each (n), interleaved, recorded in " << fmt3(facts.recording_s / 60)
           << " minutes. Cells: median over the rounds [95 % bootstrap interval]";
        if (min_n < kMinRoundsForInterval)
            md << "; no interval where n < " << kMinRoundsForInterval << " (too few rounds)";
        md << ".\n\n";
        for (const auto& n : spec.notes) md << "- " << n << "\n";
        md << "- Points: `index.db` (parameters, command, timings per round), `runs.csv` (every round's metrics); "
              "per point `points/<id>-r<round>.db` and the outputs of its first round.\n";
        if (!verdicts.empty()) {
            md << "\n## Verdicts\n\nEach claim as a comparison over the rounds: the median of each round's ratio a / b (or a's "
                  "median against a value) with its 95 % bootstrap interval; reproduced or not reproduced only when "
                  "the interval excludes no effect.\n\n| claim | test | group | estimate [95 % interval] | n | verdict |\n"
                  "|---|---|---|---|---|---|\n";
            for (const auto& r : verdicts) {
                const Claim& c = *r.claim;
                std::string test = c.compared() + " " + c.expectation();
                md << "| " << c.says << " | " << test << " | " << (r.group.empty() ? "–" : r.group) << " | "
                   << with_interval(r.estimate) << " | " << r.estimate.n << " | **" << to_string(r.verdict) << "**"
                   << (r.reason.empty() ? "" : ": " + r.reason) << " |\n";
            }
        }
        md << "\n## Points\n\n| ";
        for (const auto& c : varying) md << c << " | ";
        md << "n | decode_tps CV (%) | ";
        for (const auto& m : shown) md << m.name << (m.unit.empty() ? "" : " (" + m.unit + ")") << " | ";
        md << "\n|";
        for (size_t i = 0; i < varying.size() + 2 + shown.size(); ++i) md << "---|";
        md << "\n";
        for (const auto& row : md_rows) {
            md << "| ";
            for (const auto& c : row) md << c << " | ";
            md << "\n";
        }
        OutputFile::write(out_dir / "table.md", md.str());
        written.push_back(out_dir / "table.md");
    }
    // A figure per metric: x against the metric's median with its interval, per series;
    // categories as bars.
    std::set<std::string> models;
    for (const auto& r : points) models.insert(r.params.at("model"));
    std::string model_list;
    for (const auto& m : models) model_list += (model_list.empty() ? "" : ", ") + m;
    // The level: the spec's, unless the points vary the tracer (then each point names its own).
    const bool tracer_varies = std::find(varying.begin(), varying.end(), "tracer") != varying.end();
    const std::string level = tracer_varies ? "level or tracer per point (tracer)" : "--level " + spec.level;
    const std::string caption = machine_of(out_dir, board) + "; " + model_list + "; " + level + "; n = " +
                                rounds_text(min_n, max_n) + " per point: median and 95 % bootstrap interval" +
                                (min_n < kMinRoundsForInterval ? " (none: too few rounds)" : "");
    Plotter plot(out_dir);
    std::vector<std::string> xs;
    for (const auto& r : points)
        if (std::find(xs.begin(), xs.end(), r.params.at(spec.x)) == xs.end()) xs.push_back(r.params.at(spec.x));
    // Layers offloaded are drawn as categories: "all" (99) is not a position past 12.
    const bool x_numeric = spec.x != "ngl" && std::all_of(xs.begin(), xs.end(), numeric);
    if (x_numeric || (!xs.empty() && std::all_of(xs.begin(), xs.end(), numeric)))
        std::sort(xs.begin(), xs.end(), [](const auto& a, const auto& b) { return std::stod(a) < std::stod(b); });
    for (const auto& metric : spec.metrics) {
        // series → x → (median, lo, hi)
        std::map<std::string, std::map<std::string, Interval>> series;
        double lo_all = INFINITY, hi_all = 0;
        bool below_zero = false;  // a median or an interval under 0 (a slowdown within noise)
        for (size_t i = 0; i < points.size(); ++i) {
            const Interval iv = interval_of(i, metric);
            if (!std::isfinite(iv.median)) continue;
            // A series per value of every varying parameter but x (spec.series first): two
            // points never share one (x, series) cell, where one would hide the other.
            std::string name = spec.series.empty() ? "" : spec.series + "=" + points[i].params.at(spec.series);
            for (const auto& v : varying)
                if (v != spec.x && v != spec.series) name += (name.empty() ? "" : ", ") + v + "=" + points[i].params.at(v);
            series[name.empty() ? metric : name][points[i].params.at(spec.x)] = iv;
            if (iv.median > 0) lo_all = std::min(lo_all, iv.median), hi_all = std::max(hi_all, iv.median);
            below_zero = below_zero || iv.median < 0 || (iv.has_interval() && iv.lo < 0);
        }
        if (series.empty()) continue;
        const bool log_y = !below_zero && lo_all > 0 && hi_all / lo_all >= 30;  // values spanning decades
        const std::string unit = unit_of(metric);
        // Categories that differ between series (a study of several programs, each with its
        // own configurations): a panel per series with only its own categories, not one row
        // of mostly empty clusters.
        const bool panels = !x_numeric && series.size() > 1 &&
                            std::any_of(series.begin(), series.end(), [&](const auto& s) { return s.second.size() < xs.size(); });
        const int cols = series.size() > 2 ? 2 : int(series.size());
        const int rows = (int(series.size()) + cols - 1) / cols;
        const int height = 360 * rows + 80;  // panels: pixels (room for rotated labels, titles, caption)
        auto f = plot.draw(spec.name + "-" + metric, spec.title + ": " + metric, [&](Gnuplot& gp) {
            static const std::map<std::string, std::string> kParamUnit = {
                {"ctx", "tokens in the KV cache"}, {"prompt", "tokens"}, {"gen", "tokens"}, {"threads", "threads"},
                {"ngl", "layers on the GPU backend"}};
            const auto xu = kParamUnit.find(spec.x);
            gp << "set xlabel " << gnuplot_quote(spec.x + (xu == kParamUnit.end() ? "" : " (" + xu->second + ")")) << "\nset ylabel "
               << gnuplot_quote(metric + (unit.empty() ? "" : " (" + unit + ")")) << "\n";
            if (!panels) Plotter::caption(gp, caption);  // panels: under the title
            gp << (log_y ? "set logscale y\n" : below_zero ? "set yrange [*:*]\nset xzeroaxis lt -1 lw 1\n" : "set yrange [0:*]\n");
            if (x_numeric) {
                // Ticks at the values measured (no "1.5 threads"), the outer points off the border.
                if (xs.size() <= 16) {
                    std::string tics;
                    for (const auto& x : xs) tics += (tics.empty() ? "" : ", ") + x;
                    gp << "set xtics (" << tics << ")\n";
                }
                gp << "set offsets graph 0.05, graph 0.05, 0, 0\n";
                std::string cmd = "plot ";
                int k = 0;
                for (const auto& [name, by_x] : series)
                    cmd += std::string(k++ ? ", " : "") + "'-' using 1:2:3:4 with yerrorlines lw 2 pt 7 title " +
                           gnuplot_quote(name);
                // Paper Fig. 11: the weight stream against the machine's measured triad roof.
                std::vector<std::pair<double, double>> roof;
                if (metric == "weight_stream_gbs" && spec.x == "threads")
                    for (const auto& x : xs)
                        if (const double r = triad_gbs(machine_json(out_dir), std::stoi(x)); r > 0) roof.emplace_back(std::stod(x), r);
                if (!roof.empty())
                    cmd += ", '-' using 1:2 with linespoints dt 2 lw 2 pt 6 lc rgb 'black' title 'triad roof (bench-machine, same threads)'";
                gp << cmd << "\n";
                for (const auto& [name, by_x] : series) {
                    std::vector<std::tuple<double, double, double, double>> pts;
                    for (const auto& x : xs)
                        if (auto it = by_x.find(x); it != by_x.end()) {
                            const Interval& iv = it->second;
                            pts.emplace_back(std::stod(x), iv.median, iv.has_interval() ? iv.lo : iv.median,
                                             iv.has_interval() ? iv.hi : iv.median);
                        }
                    gp.send1d(pts);
                }
                if (!roof.empty()) gp.send1d(roof);
            } else if (panels) {
                // The caption under the last row, in lines that fit the width 16 pixels apart
                // (drawn with the first panel, at screen coordinates); x is the panel's
                // categories, named in its title.
                const auto lines = Plotter::caption_lines(caption, 150);
                const double line = 16.0 / height, bottom = (105.0 + 16.0 * double(lines.size() - 1)) / height;
                gp << "unset title\nunset xlabel\nset multiplot layout " << rows << "," << cols << " title "
                   << gnuplot_quote(spec.title + ": " + metric) << " margins 0.07, 0.98, " << bottom << ", "
                   << 1 - 70.0 / height << " spacing 0.08, " << 115.0 / height << "\n"
                   << "set style data histograms\nset style histogram errorbars gap 1 lw 1\n"
                      "set style fill solid 0.5 border -1\nset xtics rotate by -30\nunset key\n";
                Plotter::caption_labels(gp, lines, line, line);
                int k = 0;
                for (const auto& [name, by_x] : series) {
                    if (k)
                        for (size_t i = 0; i < lines.size(); ++i) gp << "unset label " << 99 - i << "\n";
                    gp << "set title " << gnuplot_quote(spec.x + " — " + name);
                    gp << "\nplot '-' using 3:4:5:xtic(2) lc " << ++k << "\n";
                    int i = 0;
                    for (const auto& x : xs)
                        if (auto it = by_x.find(x); it != by_x.end()) {
                            const Interval& iv = it->second;
                            gp << i++ << " " << gnuplot_label(category_label(spec.x, x)) << " " << iv.median << " "
                               << (iv.has_interval() ? iv.lo : iv.median) << " " << (iv.has_interval() ? iv.hi : iv.median) << "\n";
                        }
                    gp << "e\n";
                }
                gp << "unset multiplot\n";
            } else {
                // Categories: clustered bars, one per series, with the interval as an error bar.
                gp << "set style data histograms\nset style histogram errorbars gap 1 lw 1\n"
                      "set style fill solid 0.5 border -1\nset xtics rotate by -20\n";
                // Rows "index label median lo hi": an inline data line that begins with 'e' ends
                // the block in gnuplot, so the label is never first.
                std::string cmd = "plot ";
                bool first = true;
                for (const auto& [name, by_x] : series) {
                    cmd += std::string(first ? "" : ", ") + "'-' using 3:4:5" + (first ? ":xtic(2)" : "") + " title " +
                           gnuplot_quote(name);
                    first = false;
                }
                gp << cmd << "\n";
                for (const auto& [name, by_x] : series) {
                    for (size_t i = 0; i < xs.size(); ++i) {
                        auto it = by_x.find(xs[i]);
                        const Interval iv = it == by_x.end() ? Interval{} : it->second;
                        const double m = std::isfinite(iv.median) ? iv.median : NAN;
                        gp << i << " " << gnuplot_label(category_label(spec.x, xs[i])) << " " << m << " " << (iv.has_interval() ? iv.lo : m) << " "
                           << (iv.has_interval() ? iv.hi : m) << "\n";
                    }
                    gp << "e\n";
                }
            }
        }, panels ? std::pair{1000, height} : std::pair{900, 500});
        written.push_back(f.png);
        written.push_back(f.svg);
    }
    return written;
}

}  // namespace profinfer
