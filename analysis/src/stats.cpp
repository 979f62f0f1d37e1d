#include "profinfer/stats.h"
#include "profinfer/statistics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/ggml_types.h"
#include "profinfer/live_metrics.h"
#include "profinfer/sampled_ops.h"
#include "profinfer/store.h"

namespace profinfer {

WaitSplit wait_split_of(store::Database& db) {
    if (db.scalar("SELECT EXISTS (SELECT 1 FROM ops WHERE barriers > 0)")) return WaitSplit::Exact;
    if (db.scalar("SELECT EXISTS (SELECT 1 FROM op_samples)")) return WaitSplit::Sampled;
    return WaitSplit::None;
}

const char* to_string(WaitSplit w) {
    switch (w) {
        case WaitSplit::Exact: return "exact";
        case WaitSplit::Sampled: return "sampled";
        case WaitSplit::None: return "none";
    }
    return "?";
}

std::optional<double> wait_share_pct(WaitSplit w, double wait_ns, double part_ns, double wait_samples, double samples) {
    if (w == WaitSplit::Exact && part_ns > 0) return 100.0 * wait_ns / part_ns;
    if (w == WaitSplit::Sampled && samples > 0) return 100.0 * wait_samples / samples;
    return std::nullopt;
}

std::pair<double, double> wilson_interval(int64_t k, int64_t n, double z) {
    if (n <= 0) return {0.0, 1.0};
    const double p = double(k) / double(n), nn = double(n), z2 = z * z;
    const double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
    const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
    // At the edges the bound is exactly 0 (k = 0) or 1 (k = n); rounding left 1e-15 above
    // a share of 0, so the interval did not contain its own estimate.
    return {k <= 0 ? 0.0 : std::max(0.0, centre - half), k >= n ? 1.0 : std::min(1.0, centre + half)};
}

namespace {

// The rows of SQL as a table with COLS: integers stay integers, REALs and TEXT keep their kind.
Table query_table(store::Database& db, const std::vector<std::string>& cols, const std::string& sql) {
    Table t{cols, {}};
    store::Statement st(db.handle(), sql.c_str());
    while (st.step()) {
        std::vector<nlohmann::json> r;
        for (size_t c = 0; c < cols.size(); ++c) {
            if (st.column_is_null(int(c))) {
                r.push_back(nullptr);
                continue;
            }
            std::string text = st.column_text(int(c));
            double d = st.column_double(int(c));
            int64_t i = st.column_int(int(c));
            if (text == std::to_string(i))
                r.push_back(i);
            else if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-') &&
                     text.find_first_not_of("0123456789.-eE+") == std::string::npos)
                r.push_back(d);
            else
                r.push_back(text);
        }
        t.rows.push_back(std::move(r));
    }
    return t;
}

// Every quantity below is defined once, in the store's derived views (store/src/derived.sql,
// docs/trace-store.md): node_times, calls, thread_parts, expert_uses. A share of operator
// time is over every node's time:
const std::string kOfNodeTime = "(SELECT max(1, sum(dur_ns)) FROM node_times)";
// a group's share where the groups read node_times whole: their sums added up in the same
// pass (a second pass over node_times is 7 s on a 10-minute full-level trace of the 1B).
const std::string kShareOfNodeTime = "100.0 * sum(dur_ns) / max(1, sum(sum(dur_ns)) OVER ())";

Table by_op_type(store::Database& db) {
    return query_table(db, {"op", "count", "total_ms", "mean_ms", "share_pct"},
                       "SELECT op, count(*), sum(dur_ns) / 1e6, avg(dur_ns) / 1e6, " + kShareOfNodeTime +
                           " FROM node_times GROUP BY op ORDER BY sum(dur_ns) DESC");
}

Table by_op(store::Database& db) {
    return query_table(db, {"name", "op", "count", "total_ms", "mean_ms", "share_pct"},
                       "SELECT base, op, count(*), sum(dur_ns) / 1e6, avg(dur_ns) / 1e6, " + kShareOfNodeTime +
                           " FROM node_times GROUP BY base, op ORDER BY sum(dur_ns) DESC");
}

// Per call: its duration and what the operators inside it took; attention (KQ and KQV, or
// FLASH_ATTN_EXT) is what grows with the context (paper Fig. 9).
Table by_token(store::Database& db) {
    return query_table(db, {"call", "phase", "n_tokens", "ms", "op_ms", "mul_mat_ms", "attention_ms", "mul_mat_share_pct"},
                       "WITH t AS (SELECT call, sum(dur_ns) AS op, "
                       "sum(CASE WHEN matmul THEN dur_ns ELSE 0 END) AS mm, "
                       "sum(CASE WHEN attention THEN dur_ns ELSE 0 END) AS attn FROM node_times GROUP BY call) "
                       "SELECT c.call, c.phase, c.n_tokens, c.dur_ns / 1e6, coalesce(t.op, 0) / 1e6, coalesce(t.mm, 0) / 1e6, "
                       "coalesce(t.attn, 0) / 1e6, 100.0 * coalesce(t.mm, 0) / max(1, coalesce(t.op, 0)) "
                       "FROM calls c LEFT JOIN t ON t.call = c.call ORDER BY c.call");
}

// Per layer and logical block (view block_times: attention, ffn or moe, and the rest outside
// the layers): operator time, per call that ran it, and share.
Table by_block(store::Database& db) {
    db.keep_block_times();
    return query_table(db, {"layer", "block", "nodes", "total_ms", "ms_per_call", "share_pct"},
                       "SELECT block_layer, block, count(*), sum(dur_ns) / 1e6, sum(dur_ns) / 1e6 / count(DISTINCT call), " +
                           kShareOfNodeTime + " FROM block_times GROUP BY block_layer, block "
                           "ORDER BY block_layer IS NULL, block_layer, block = 'rest', block");
}

// Per request a server served (views requests, request_calls): tokens, time to first token,
// time per output token (each interval between the calls computing its outputs, divided by
// the outputs of the later call), apportioned operator time.
Table by_request(store::Database& db) {
    std::map<int64_t, std::vector<double>> tpot;  // request → ms per output token
    for (auto& r : request_latencies(db)) tpot[r.request] = std::move(r.tpot_ms);
    Table t = query_table(db, {"request", "seq", "first_call", "last_call", "start_ms", "prompt_tokens", "generated", "ttft_ms",
                               "decode_ms", "op_ms", "op_share_pct", "begun_before"},
                          "SELECT request, seq, first_call, last_call, (start_ns - (SELECT min(start_ns) FROM calls)) / 1e6, "
                          "prompt_tokens, generated, ttft_ns / 1e6, decode_ns / 1e6, op_ns / 1e6, "
                          "100.0 * op_ns / " + kOfNodeTime + ", begun_before FROM requests ORDER BY request");
    t.columns.insert(t.columns.begin() + 9, "tpot_median_ms");
    t.columns.insert(t.columns.begin() + 10, "tpot_p90_ms");
    for (auto& r : t.rows) {
        const auto& v = tpot[r[0].get<int64_t>()];
        r.insert(r.begin() + 9, v.empty() ? nlohmann::json() : nlohmann::json(median_of(v)));
        r.insert(r.begin() + 10, v.empty() ? nlohmann::json() : nlohmann::json(quantile_of(v, 0.9)));
    }
    return t;
}

// The host side of a GPU-API backend (gpu_events): per kind, and per op type for the
// dispatches — what the host spent recording, submitting and waiting for the device.
Table by_gpu(store::Database& db) {
    return query_table(db, {"kind", "op", "count", "total_ms", "mean_us", "share_of_calls_pct"},
                       "SELECT e.kind, coalesce(n.op, ''), count(*), sum(e.end_ns - e.start_ns) / 1e6, "
                       "avg(e.end_ns - e.start_ns) / 1e3, "
                       "100.0 * sum(e.end_ns - e.start_ns) / (SELECT max(1, sum(dur_ns)) FROM calls) "
                       "FROM gpu_events e LEFT JOIN nodes n ON n.graph_seq = e.graph_seq AND n.tensor = e.tensor "
                       "GROUP BY e.kind, coalesce(n.op, '') ORDER BY e.kind, sum(e.end_ns - e.start_ns) DESC");
}

// Paper Fig. 6: per op type and thread index, compute and wait time. Exact where every
// ggml_barrier was traced (--wait exact|both); else, where CPU-clock samples were taken
// (--wait sampled), the thread's part time split by the share of its samples that were in
// barrier code, with the share's 95 % Wilson interval; at --level op there is no split (all
// compute, wait_share_pct null).
// Where barriers are traced the wait splits further: others_wait_ms is the time from the
// thread's arrival at the node's barrier to the last thread's arrival (waiting for the
// others: the imbalance itself), the rest of wait_ms the barrier's own exit and the
// probes' traps on it — what a thread alone (one thread: nobody to wait for, others_wait_ms
// 0) reads as wait. others_wait_pct is others_wait_ms over compute_ms + others_wait_ms.
Table by_thread(store::Database& db) {
    // Summed here as the rows stream by: SQLite groups by sorting, and the sort of every
    // thread's part (11.35 M on a 10-minute full-level trace of the 1B) took 10 of the 23 s.
    std::map<std::pair<std::string, int64_t>, std::array<double, 6>> sums;  // (op, ith) → part, compute, wait, samples, wait samples, others
    {
        store::Statement st(db.handle(),
                            "SELECT op, ith, end_ns - start_ns, compute_ns, wait_ns, samples, wait_samples, others_wait_ns "
                            "FROM thread_waits");
        while (st.step()) {
            auto& at = sums[{st.column_text(0), st.column_int(1)}];
            for (int c = 0; c < 6; ++c) at[c] += double(st.column_int(2 + c));
        }
    }
    const WaitSplit split = wait_split_of(db);
    Table t;
    t.columns = {"op", "ith", "compute_ms", "wait_ms", "wait_share_pct", "method",
                 "samples", "sampled_wait_pct", "sampled_ci95_lo", "sampled_ci95_hi", "others_wait_ms", "others_wait_pct"};
    for (const auto& [key, r] : sums) {
        auto d = [&](size_t c) { return r[c - 2]; };
        const double part = d(2), k = d(6), n = d(5);
        std::vector<nlohmann::json> o{key.first, key.second};
        nlohmann::json share = nullptr, lo = nullptr, hi = nullptr;
        if (n > 0) {
            auto ci = wilson_interval(int64_t(k), int64_t(n));
            share = 100.0 * k / n, lo = 100.0 * ci.first, hi = 100.0 * ci.second;
        }
        const auto w = wait_share_pct(split, d(4), d(3) + d(4), k, n);
        const nlohmann::json w_json = w ? nlohmann::json(*w) : nlohmann::json(nullptr);
        if (split == WaitSplit::Exact) {
            o.insert(o.end(), {d(3) / 1e6, d(4) / 1e6, w_json, to_string(split)});
        } else {
            const double f = w ? *w / 100 : 0.0;
            o.insert(o.end(), {part * (1 - f) / 1e6, part * f / 1e6, w_json, to_string(split)});
        }
        o.insert(o.end(), {int64_t(n), share, lo, hi});
        if (split == WaitSplit::Exact) {
            const double others = std::min(d(7), d(4));  // never more than the wait it is part of
            o.insert(o.end(), {others / 1e6, d(3) + others > 0 ? nlohmann::json(100.0 * others / (d(3) + others))
                                                              : nlohmann::json(nullptr)});
        } else {
            o.insert(o.end(), {nullptr, nullptr});
        }
        t.rows.push_back(std::move(o));
    }
    return t;
}

// Per MoE node name, layer and expert: activations, and the mean reuse distance (in
// llama_decode calls since the expert was last used by the same node).
Table by_expert(store::Database& db) {
    return query_table(db, {"layer", "node", "expert", "activations", "mean_reuse_distance"},
                       "WITH x AS (SELECT DISTINCT layer, base AS node, expert, call FROM expert_uses), "
                       "d AS (SELECT layer, node, expert, call - lag(call) OVER (PARTITION BY layer, node, expert ORDER BY call) "
                       "AS dist FROM x) "
                       "SELECT layer, node, expert, count(*), avg(dist) FROM d GROUP BY layer, node, expert "
                       "ORDER BY layer, node, expert");
}

// Decode's expert uses, one row per (step, call, layer, expert): steps number the decode
// calls from 1 (prompt calls, which use nearly every expert, left out).
const std::string kDecodeUses =
    "WITH dc AS (SELECT call, row_number() OVER (ORDER BY call) AS step FROM calls WHERE phase = 'decode'), "
    "x AS (SELECT DISTINCT dc.step, dc.call, u.layer, u.expert FROM expert_uses u JOIN dc ON dc.call = u.call) ";

// The reuse-distance histogram of decode (paper Fig. 13): for each layer and expert, the
// decode steps between consecutive uses, counted over every layer and expert; `steps` and
// `layers` are what a prediction for iid routing needs.
Table by_expert_reuse(store::Database& db) {
    return query_table(db, {"distance", "reuses", "steps", "layers"},
                       kDecodeUses + ", d AS (SELECT step - lag(step) OVER (PARTITION BY layer, expert ORDER BY step) AS dist "
                                     "FROM x) SELECT dist, count(*), (SELECT count(*) FROM dc), (SELECT count(DISTINCT layer) "
                                     "FROM x) FROM d WHERE dist IS NOT NULL GROUP BY dist ORDER BY dist");
}

// Which experts each layer used at each decode step (the activation heat map of Fig. 13).
Table by_expert_step(store::Database& db) {
    return query_table(db, {"step", "call", "layer", "expert"},
                       kDecodeUses + "SELECT step, call, layer, expert FROM x ORDER BY step, layer, expert");
}

// Paper Fig. 13 per point in time: each MoE node (MUL_MAT_ID) of each call, its time, the
// experts it activated and their mean reuse distance (calls since the same node and layer
// last used each; an expert's first use has none and is counted apart), and the major page
// faults its threads took (the major-faults counter; null without it).
Table by_expert_call(store::Database& db) {
    std::string faults = "NULL";
    const auto names = db.counter_names();
    for (size_t k = 0; k < names.size(); ++k)
        if (names[k] == "major-faults") faults = "(SELECT sum(p.c" + std::to_string(k) + ") FROM thread_parts p WHERE " +
                                                 "p.call = a.call AND p.layer = a.layer AND p.base = a.node AND "
                                                 "p.op = 'MUL_MAT_ID')";
    return query_table(db, {"call", "phase", "layer", "node", "experts", "first_uses", "mean_reuse_distance", "time_us",
                            "major_faults"},
                       "WITH x AS (SELECT DISTINCT layer, base AS node, expert, call FROM expert_uses), "
                       "d AS (SELECT layer, node, expert, call, call - lag(call) OVER (PARTITION BY layer, node, expert "
                       "ORDER BY call) AS dist FROM x), "
                       "a AS (SELECT call, layer, node, count(*) AS experts, sum(dist IS NULL) AS first_uses, avg(dist) AS "
                       "mean_dist FROM d GROUP BY call, layer, node) "
                       "SELECT a.call, c.phase, a.layer, a.node, a.experts, a.first_uses, a.mean_dist, t.dur_ns / 1e3, " +
                           faults +
                           " FROM a JOIN calls c ON c.call = a.call JOIN node_times t ON t.call = a.call AND t.base = a.node "
                           "AND t.layer = a.layer AND t.op = 'MUL_MAT_ID' ORDER BY a.call, a.layer, a.node");
}

// Paper Fig. 10: every weight MatMul (MUL_MAT, not the attention KQ/KQV) grouped by name,
// phase and dimensions — M rows of the weight (output features), K its row length, N the
// batch's tokens, H the product of the remaining dimensions — with the median time over its
// calls (the first, cold call of a shape weighs no more than any other). mnkh = M·N·K·H,
// half the multiply-adds' FLOPs.
Table by_matmul(store::Database& db) {
    struct Acc {
        std::vector<double> us;
        int64_t nth = 0;
    };
    std::map<std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t, int64_t>, Acc> by_shape;
    store::Statement st(db.handle(),
                        "SELECT t.base, t.phase, s.type, n.ne0, n.ne1, s.ne0, n.ne2 * n.ne3, t.dur_ns, t.nth "
                        "FROM node_times t JOIN nodes n ON n.graph_seq = t.graph_seq AND n.tensor = t.tensor "
                        "JOIN node_srcs s ON s.node_id = n.id AND s.slot = 0 "
                        "WHERE t.op = 'MUL_MAT' AND NOT t.attention");
    while (st.step()) {
        const GgmlType* type = ggml_type(uint32_t(st.column_int(2)));
        auto& a = by_shape[{st.column_text(0), st.column_text(1),
                            type ? type->name : "type" + std::to_string(st.column_int(2)), st.column_int(3),
                            st.column_int(4), st.column_int(5), st.column_int(6)}];
        a.us.push_back(st.column_int(7) / 1e3);
        a.nth = std::max(a.nth, st.column_int(8));
    }
    Table t{{"name", "phase", "weight_type", "m", "n", "k", "h", "mnkh", "nth", "count", "median_us", "mean_us"}, {}};
    for (auto& [key, a] : by_shape) {
        const auto& [name, phase, type, m, n, k, h] = key;
        std::sort(a.us.begin(), a.us.end());
        const size_t c = a.us.size();
        const double med = c % 2 ? a.us[c / 2] : (a.us[c / 2 - 1] + a.us[c / 2]) / 2;
        double sum = 0;
        for (double v : a.us) sum += v;
        t.rows.push_back({name, phase, type, m, n, k, h, m * n * k * h, a.nth, int64_t(c), med, sum / double(c)});
    }
    return t;
}

struct StatMaker {
    const char* name;
    Table (*make)(store::Database&);
};
const StatMaker kMakers[] = {
    {"op-type", by_op_type}, {"op", by_op}, {"token", by_token}, {"block", by_block}, {"request", by_request},
    {"thread", by_thread}, {"expert", by_expert}, {"expert-reuse", by_expert_reuse}, {"expert-step", by_expert_step},
    {"expert-call", by_expert_call}, {"matmul", by_matmul}, {"gpu", by_gpu}};

}  // namespace

const std::vector<StatView>& stat_views() {
    static const std::vector<StatView> kViews = {
        {"op-type", "operator time (view node_times, docs/trace-store.md) and share per op type (--level op-sampled: sampled shares with their intervals)"},
        {"op", "the same per operator name"},
        {"token", "per llama_decode call, MatMul and attention time"},
        {"block", "per layer, attention (norm to the residual ADD closing it), ffn or moe, and the rest outside the layers (view block_times)"},
        {"request", "per request a server served (its batches' sequence ids: llama-server, llama-parallel): prompt and generated tokens, time to first token, time per output token, operator time by token share"},
        {"thread", "compute vs wait per op type and thread index (wait needs --level full)"},
        {"expert", "MoE activations and reuse distance (--level full)"},
        {"expert-reuse", "decode's reuse-distance histogram over every layer and expert (--level full)"},
        {"expert-step", "the experts each layer used at each decode step (--level full)"},
        {"expert-call", "per call and MoE node, its time and its experts' mean reuse distance (Fig. 13)"},
        {"matmul", "each weight MatMul's median time by M, N, K, H (the KQ/KQV attention MatMuls left out)"},
        {"gpu", "a GPU-API backend's host side (Vulkan): node dispatches per op type, submits, fence waits"},
        {"roofline", "intensity, achieved vs this machine's roof (--machine, from profinfer bench-machine) and a verdict per operator: memory-bound, compute-bound or overhead-dominated"}};
    return kViews;
}

std::string stat_view_names(const char* last_joiner) {
    std::string out;
    const auto& v = stat_views();
    for (size_t i = 0; i < v.size(); ++i)
        out += (i == 0 ? "" : i + 1 == v.size() ? last_joiner : ", ") + std::string(v[i].name);
    return out;
}

Table stats_table(store::Database& db, const std::string& by) {
    // --level op-sampled: no node was timed; the samples give each op type's share, as
    // estimates with their intervals.
    // (cpu_samples first: whether node_times has a row is known only once its whole window is computed)
    if ((by == "op-type" || by == "op") && has_cpu_samples(db) && !db.scalar("SELECT EXISTS (SELECT 1 FROM node_times)"))
        return sampled_op_table(db);
    for (const auto& m : kMakers)
        if (by == m.name) return m.make(db);
    throw Error("--by is " + stat_view_names(" or ") + " (roofline: roofline_table), not '" + by + "'");
}

}  // namespace profinfer
