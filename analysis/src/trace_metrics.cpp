#include "profinfer/trace_metrics.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "profinfer/dag.h"
#include "profinfer/error.h"
#include "profinfer/ggml_types.h"
#include "profinfer/regression.h"
#include "profinfer/run_summary.h"
#include "profinfer/statistics.h"
#include "profinfer/stats.h"
#include "profinfer/table.h"
#include "profinfer/trace_graph.h"

namespace profinfer {

namespace {

void decode_speed(store::Database& db, nlohmann::json& m) {
    int64_t calls = 0;
    const auto tpot = median_tpot_ms(db, &calls);  // the one decode speed (run_summary.h)
    m["decode_calls"] = calls;
    m["decode_tps"] = tpot ? number_or_null(1000.0 / *tpot) : nlohmann::json(nullptr);
}

void prefill_speed(store::Database& db, nlohmann::json& m) {
    store::Statement st(db.handle(), "SELECT sum(n_tokens), sum(dur_ns) FROM calls WHERE phase = 'prefill'");
    st.step();
    m["prefill_tps"] = st.column_is_null(0) ? nlohmann::json(nullptr)
                                             : nlohmann::json(st.column_double(0) * 1e9 / st.column_double(1));
}

// Operator time of the decode calls (view node_times), and its MatMul and attention shares.
void operator_shares(store::Database& db, nlohmann::json& m) {
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
    // The same of the prompt's calls (TTFT's operators; paper Fig. 5: "of TTFT/TPOT").
    store::Statement pf(db.handle(),
                        "SELECT sum(dur_ns), sum(CASE WHEN matmul THEN dur_ns ELSE 0 END) FROM node_times WHERE phase = 'prefill'");
    pf.step();
    const double pop = pf.column_double(0);
    m["prefill_mul_mat_share_pct"] = pop > 0 ? nlohmann::json(100.0 * pf.column_double(1) / pop) : nlohmann::json(nullptr);
}

void wait_share(store::Database& db, nlohmann::json& m) {
    store::Statement st(db.handle(),
                        "SELECT sum(wait_ns), sum(compute_ns + wait_ns), sum(wait_samples), sum(samples) FROM "
                        "thread_parts WHERE phase = 'decode'");
    st.step();
    // Wait is only measured at --level full, by the trace's one split rule (stats.h).
    const auto w = wait_share_pct(wait_split_of(db), st.column_double(0), st.column_double(1), st.column_double(2),
                                  st.column_double(3));
    m["wait_share_pct"] = w ? nlohmann::json(*w) : nlohmann::json(nullptr);
}

// Times a target thread lost its CPU while runnable (preempted), per decode call:
// the scheduler events of --level full; null without them.
void preemptions(store::Database& db, nlohmann::json& m) {
    const int64_t switches = db.scalar("SELECT count(*) FROM sched_switch");
    const auto meta = db.meta();
    const std::string pid = meta[store::MetaKey::Pid];
    const int64_t decode = m["decode_calls"].get<int64_t>();
    m["preempted_per_token"] =
        switches > 0 && decode > 0 && !pid.empty()
            ? nlohmann::json(double(db.scalar("SELECT count(*) FROM preemptions")) / double(decode))
            : nlohmann::json(nullptr);
}

// Paper Fig. 8 before / during / after: the hog's window (noted in the trace by the
// runner), and decode speed (1000 / median time per decode call, as decode_tps) of the
// calls that began before, inside and after it. Null without a hog.
void hog_speeds(store::Database& db, nlohmann::json& m) {
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

// Paper Fig. 8's picture: with a hog on one of two inference cores "the two inference threads
// share" the other, and "when it frees, both run in parallel". parallel_pct: the share of the
// decode calls' time during which two or more of the target's threads were on a CPU at once,
// from the scheduler records (sched_switch: each run of a target thread on a CPU, from the
// switch onto it to the switch off it); parallel_pct_{before,during,after}_hog: the same over
// the calls that began before, inside and after the hog's window. Null without scheduler
// records (levels below full) or, per part, without calls in it.
void parallel_share(store::Database& db, nlohmann::json& m) {
    m["parallel_pct"] = nullptr;
    for (const char* part : {"before", "during", "after"}) m[std::string("parallel_pct_") + part + "_hog"] = nullptr;
    const auto meta = db.meta();
    const std::string pid = meta[store::MetaKey::Pid];
    if (pid.empty() || db.scalar("SELECT count(*) FROM sched_switch") == 0) return;
    std::vector<std::pair<int64_t, int64_t>> calls;  // decode calls: start, end
    {
        store::Statement st(db.handle(), "SELECT start_ns, end_ns FROM calls WHERE phase = 'decode' ORDER BY start_ns");
        while (st.step()) calls.emplace_back(st.column_int(0), st.column_int(1));
    }
    if (calls.empty()) return;
    // Each run of a target thread on a CPU, per CPU from the switch onto it to the switch off
    // it. A switch off with no switch on before it on that CPU (the run began before the
    // records, or its record was lost) starts at the CPU's previous record (the first call,
    // before any); a run still on at the end lasts to the last call's end. Per CPU, so that a
    // lost record shortens one run instead of shifting every count after it.
    const int64_t t0 = calls.front().first, t1 = calls.back().second;
    struct Cpu {
        bool target = false;
        int64_t since = 0;
    };
    std::map<int64_t, Cpu> cpus;
    std::vector<std::pair<int64_t, int>> edges;  // +1 where a run starts, -1 where it ends
    store::Statement st(db.handle(), ("SELECT ts_ns, cpu, prev_tgid = " + pid + ", next_tgid = " + pid +
                                      " FROM sched_switch ORDER BY ts_ns").c_str());
    while (st.step()) {
        const int64_t ts = st.column_int(0);
        Cpu& c = cpus.try_emplace(st.column_int(1), Cpu{false, std::min(ts, t0)}).first->second;
        if (st.column_int(2) != 0) edges.push_back({c.since, +1}), edges.push_back({ts, -1});
        c.target = st.column_int(3) != 0, c.since = ts;
    }
    for (const auto& [cpu, c] : cpus)
        if (c.target) edges.push_back({c.since, +1}), edges.push_back({std::max(t1, c.since), -1});
    std::sort(edges.begin(), edges.end());
    // Time with two or more running inside [a, b), by a walk over the edges.
    std::vector<std::pair<int64_t, int64_t>> both;  // intervals with >= 2 running
    int running = 0;
    int64_t since = 0;
    for (const auto& [ts, d] : edges) {
        const int before = running;
        running += d;
        if (before < 2 && running >= 2) since = ts;
        if (before >= 2 && running < 2 && ts > since) both.push_back({since, ts});
    }
    auto overlap = [&](int64_t a, int64_t b) {
        int64_t t = 0;
        auto it = std::lower_bound(both.begin(), both.end(), std::make_pair(a, int64_t(0)),
                                   [](const auto& x, const auto& y) { return x.second < y.first; });
        for (; it != both.end() && it->first < b; ++it) t += std::max<int64_t>(0, std::min(b, it->second) - std::max(a, it->first));
        return t;
    };
    const auto w = store::hog_window(meta);
    double par[4] = {0, 0, 0, 0}, dur[4] = {0, 0, 0, 0};  // all, before, during, after
    for (const auto& [a, b] : calls) {
        const double p = double(overlap(a, b)), d = double(b - a);
        par[0] += p, dur[0] += d;
        if (w) {
            const int k = a < w->start_ns ? 1 : a <= w->stop_ns ? 2 : 3;
            par[k] += p, dur[k] += d;
        }
    }
    const char* names[] = {"parallel_pct", "parallel_pct_before_hog", "parallel_pct_during_hog", "parallel_pct_after_hog"};
    for (int k = 0; k < (w ? 4 : 1); ++k)
        if (dur[k] > 0) m[names[k]] = number_or_null(100.0 * par[k] / dur[k]);
}

// What `profinfer estimate` predicted for the recording's level (noted in the trace by the
// runner in a study with [outputs] predicted = true): beside the measured slowdown. Absent elsewhere.
void predicted_slowdown(store::Database& db, nlohmann::json& m) {
    const auto meta = db.meta();
    if (meta.has(store::MetaKey::PredictedSlowdownPct))
        m["predicted_slowdown_pct"] = number_or_null(std::strtod(meta[store::MetaKey::PredictedSlowdownPct].c_str(), nullptr));
}

// Paper Fig. 9 within one generation: attention time per decode step at the end of the
// run (its last tenth of decode calls, median) over the start (first tenth), and the
// same for the weight MatMuls. Null under 20 decode calls with operator records.
// Paper Fig. 9's stair steps: llama.cpp pads the KV cache's view to 256 cells (n_kv =
// max(256, 256·⌈used / 256⌉), llama-kv-cache.cpp get_n_kv), so attention's work per decode
// step is flat within a block of 256 cells and jumps at each boundary. Each call's n_kv is
// read from its attention's K (the KQ MatMul's src0, flash attention's src1: ne1 = n_kv).
// attention_step_ratio: at each boundary between consecutive blocks holding at least kSide
// calls each, the median attention time of the first kSide calls after it over the last kSide
// before it (median over the boundaries); attention_in_block_ratio: within each block of
// 2·kSide calls or more, its last kSide calls over its first kSide (median over the blocks).
// Null without such blocks. ATT: decode call → attention ns.
void attention_steps(store::Database& db, const std::map<int64_t, double>& att, nlohmann::json& m) {
    constexpr size_t kSide = 32;
    std::map<int64_t, std::vector<double>> blocks;  // n_kv → attention ns per call, in call order
    store::Statement st(db.handle(),
                        "SELECT cg.call, max(s.ne1) FROM call_graphs cg JOIN node_names n ON n.graph_seq = cg.graph_seq "
                        "JOIN node_srcs s ON s.node_id = n.id WHERE cg.phase = 'decode' AND n.attention AND "
                        "((n.op = 'FLASH_ATTN_EXT' AND s.slot = 1) OR (n.base = 'kq' AND s.slot = 0)) "
                        "GROUP BY cg.call ORDER BY cg.call");
    while (st.step())
        if (auto a = att.find(st.column_int(0)); a != att.end() && !st.column_is_null(1)) blocks[st.column_int(1)].push_back(a->second);
    std::vector<double> steps, within;
    const std::vector<double>* before = nullptr;
    for (const auto& [n_kv, v] : blocks) {
        if (before && before->size() >= kSide && v.size() >= kSide) {
            const double a = median_of({before->end() - long(kSide), before->end()}), b = median_of({v.begin(), v.begin() + long(kSide)});
            if (a > 0) steps.push_back(b / a);
        }
        if (v.size() >= 2 * kSide) {
            const double first = median_of({v.begin(), v.begin() + long(kSide)}), last = median_of({v.end() - long(kSide), v.end()});
            if (first > 0) within.push_back(last / first);
        }
        before = &v;
    }
    m["attention_step_ratio"] = steps.empty() ? nlohmann::json(nullptr) : nlohmann::json(median_of(steps));
    m["attention_in_block_ratio"] = within.empty() ? nlohmann::json(nullptr) : nlohmann::json(median_of(within));
}

void growth_within_run(store::Database& db, nlohmann::json& m) {
    std::vector<double> att, mm;
    std::map<int64_t, double> att_by_call;
    store::Statement st(db.handle(),
                        "SELECT sum(CASE WHEN attention THEN dur_ns ELSE 0 END), sum(CASE WHEN matmul AND NOT "
                        "attention THEN dur_ns ELSE 0 END), call FROM node_times WHERE phase = 'decode' "
                        "GROUP BY call ORDER BY call");
    while (st.step())
        att.push_back(st.column_double(0)), mm.push_back(st.column_double(1)), att_by_call[st.column_int(2)] = att.back();
    auto growth = [](const std::vector<double>& v) -> nlohmann::json {
        if (v.size() < 20) return nullptr;
        const size_t tenth = v.size() / 10;
        const double first = median_of({v.begin(), v.begin() + long(tenth)}), last = median_of({v.end() - long(tenth), v.end()});
        return first > 0 ? nlohmann::json(last / first) : nlohmann::json(nullptr);
    };
    m["attention_growth_ratio"] = growth(att);
    m["weight_matmul_growth_ratio"] = growth(mm);
    attention_steps(db, att_by_call, m);
}

// Paper Fig. 7: the share of decode call time that belongs to a non-CPU backend
// (Vulkan here): its graphs (recording and submitting: ggml-vulkan computes
// asynchronously) and the backend synchronizes that wait for the device. Null when
// every graph ran on the CPU.
void gpu_share(store::Database& db, nlohmann::json& m) {
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

// Paper Fig. 11's mechanism: the rate decode's weight MatMuls (KQ/KQV excluded) stream
// their weights, bytes of the weight (src0, at its type's size) over the nodes' time,
// on up to 16 decode calls spread over the run. Near the machine's triad roof, decode
// is memory-bound (weight_stream_roof_pct, where the results have a machine.json).
void weight_stream_and_blocks(store::Database& db, nlohmann::json& m) {
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

// Paper Fig. 3/4 within self-attention (flash attention off): the heavier of the KQ and
// KQV MatMuls against the heaviest weight MatMul of the block (Q, K, V, output
// projection), decode time summed over the layers; > 1: KQ or KQV is the heaviest node.
void kq_over_weight(store::Database& db, nlohmann::json& m) {
    store::Statement st(db.handle(),
                        "SELECT (SELECT max(t) FROM (SELECT sum(dur_ns) AS t FROM node_times WHERE phase = 'decode' AND "
                        "op = 'MUL_MAT' AND base IN ('kq', 'kqv') GROUP BY base)), (SELECT max(t) FROM (SELECT "
                        "sum(dur_ns) AS t FROM node_times WHERE phase = 'decode' AND op = 'MUL_MAT' AND base IN "
                        "('Qcur', 'Kcur', 'Vcur', 'attn_out') GROUP BY base))");
    st.step();
    m["kq_over_weight_ratio"] = !st.column_is_null(0) && st.column_double(1) > 0
                                    ? nlohmann::json(st.column_double(0) / st.column_double(1))
                                    : nlohmann::json(nullptr);
    // Paper Fig. 4's "the same operation takes longer" across models: one layer's KQ MatMul,
    // the mean time of a KQ node over the decode calls (a node's time, as the DAG colours it).
    store::Statement kq(db.handle(),
                        "SELECT avg(dur_ns) FROM node_times WHERE phase = 'decode' AND op = 'MUL_MAT' AND base = 'kq'");
    kq.step();
    m["kq_node_ms"] = kq.column_is_null(0) ? nlohmann::json(nullptr) : nlohmann::json(kq.column_double(0) / 1e6);
}

// Paper Fig. 13 at steady state: the MoE MatMuls' (MUL_MAT_ID) time and major faults
// per decode call after the first; the first decode call (cold: it reads the experts
// never read before) on its own. Null without MoE nodes (faults: without the counter).
void moe(store::Database& db, nlohmann::json& m) {
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

// Paper Fig. 6 from the exact split (--wait exact: a probe on every barrier): the
// share of its decode time the most-waiting thread spends waiting for the other threads
// (from its arrival at a node's barrier to the last thread's: not the barrier probes' own
// time, which a thread alone reads as 31-45 % "wait" in the small ops), in MatMul nodes and
// in every other node. Null where barriers were not traced or one thread ran.
void wait_by_kind(store::Database& db, nlohmann::json& m) {
    auto most_waiting = [&](const char* which) {
        const std::string sql = std::string("SELECT max(w) FROM (SELECT 100.0 * sum(others_wait_ns) / "
                                        "sum(compute_ns + others_wait_ns) AS w "
                                        "FROM thread_waits WHERE phase = 'decode' AND nth > 1 AND barriers > 0 AND ") +
                                which + " GROUP BY ith)";
        store::Statement st(db.handle(), sql.c_str());
        st.step();
        return st.column_is_null(0) ? nlohmann::json(nullptr) : nlohmann::json(st.column_double(0));
    };
    m["wait_share_matmul_pct"] = most_waiting("matmul");
    m["wait_share_other_pct"] = most_waiting("NOT matmul");
    // The paper's own case: activation functions and norms (one row in a decode step, which
    // ggml gives to one thread), without attention and the other even splits.
    m["wait_share_activation_pct"] = most_waiting(
        "op IN ('SWIGLU', 'SWIGLU_OAI', 'GEGLU', 'GEGLU_ERF', 'GEGLU_QUICK', 'REGLU', 'GELU', 'GELU_ERF', 'GELU_QUICK', 'SILU', 'RELU', 'RMS_NORM', 'NORM')");
}

}  // namespace

nlohmann::json trace_metrics(store::Database& db) {
    nlohmann::json m = nlohmann::json::object();
    db.keep_node_times();  // a dozen metrics scan it whole
    for (auto* metric : {decode_speed, prefill_speed, operator_shares, wait_share, preemptions, hog_speeds, growth_within_run,
                         gpu_share, weight_stream_and_blocks, kq_over_weight, moe, wait_by_kind, predicted_slowdown,
                         parallel_share})
        metric(db, m);  // in this order: preemptions reads decode_calls
    return m;
}

}  // namespace profinfer
