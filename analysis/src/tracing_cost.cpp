#include "profinfer/tracing_cost.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>
#include <tuple>
#include <vector>

#include "profinfer/error.h"
#include "profinfer/intervals.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

struct Call {
    int64_t start, end, n_tokens;
    bool untraced;
};
struct Switch {
    int64_t began, took_effect;
};

// Every call in time order, with whether a gate left its operators out, and every switch.
void read_calls(store::Database& db, std::vector<Call>& calls, std::vector<Switch>& switches) {
    {
        store::Statement st(db.handle(),
                            "SELECT t.start_ns, t.end_ns, t.n_tokens, u.token_id IS NOT NULL FROM tokens t LEFT JOIN "
                            "ops_untraced u ON u.token_id = t.id ORDER BY t.start_ns");
        while (st.step()) calls.push_back({st.column_int(0), st.column_int(1), st.column_int(2), st.column_int(3) != 0});
    }
    store::Statement st(db.handle(), "SELECT coalesce(start_ns, ts_ns), ts_ns FROM qos_events");
    while (st.step()) switches.push_back({st.column_int(0), st.column_int(1)});
}

bool touched_by_switch(const Call& c, const std::vector<Switch>& switches) {
    return std::any_of(switches.begin(), switches.end(), [&](const Switch& s) {
        return c.start < s.took_effect + kSwitchAftermathNs && c.end > s.began;
    });
}

}  // namespace

std::vector<double> paired_window_slowdowns_pct(store::Database& db, int skip) {
    std::vector<Call> calls;
    std::vector<Switch> switches;
    read_calls(db, calls, switches);
    struct Window {
        bool untraced;
        std::vector<std::pair<int64_t, bool>> calls;  // duration, counts (decode, untouched)
    };
    std::vector<Window> windows;
    for (const auto& c : calls) {
        if (windows.empty() || windows.back().untraced != c.untraced) windows.push_back({c.untraced, {}});
        windows.back().calls.push_back({c.end - c.start, c.n_tokens == 1 && !touched_by_switch(c, switches)});
    }
    auto med = [&](const Window& w) {
        std::vector<double> v;
        for (size_t i = size_t(skip); i < w.calls.size(); ++i)
            if (w.calls[i].second) v.push_back(double(w.calls[i].first));
        return median_of(v);
    };
    std::vector<double> out;
    for (size_t i = 1; i + 1 < windows.size(); ++i) {
        if (windows[i].untraced) continue;
        const double a = med(windows[i - 1]), m = med(windows[i]), b = med(windows[i + 1]);
        if (a > 0 && m > 0 && b > 0) out.push_back(100 * (m / ((a + b) / 2) - 1));
    }
    return out;
}

double achieved_overhead_pct(store::Database& db, int half) {
    std::vector<Call> all;
    std::vector<Switch> switches;
    read_calls(db, all, switches);
    std::vector<Call> calls;
    for (const auto& c : all)
        if (c.n_tokens == 1) calls.push_back(c);
    std::vector<bool> clean(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) clean[i] = calls[i].untraced && !touched_by_switch(calls[i], switches);
    double spent = 0, base = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
        double sum = 0;
        int n = 0;
        for (size_t j = i > size_t(half) ? i - size_t(half) : 0; j < std::min(calls.size(), i + size_t(half) + 1); ++j)
            if (clean[j]) sum += double(calls[j].end - calls[j].start), ++n;
        if (n) spent += double(calls[i].end - calls[i].start), base += sum / n;
    }
    return base > 0 ? 100 * (spent / base - 1) : NAN;
}

double traced_calls_pct(store::Database& d) {
    const int64_t n = d.scalar("SELECT count(*) FROM tokens"), untraced = d.scalar("SELECT count(*) FROM ops_untraced");
    return n > 0 ? 100.0 * double(n - untraced) / double(n) : NAN;
}

Fidelity fidelity_against_callback(store::Database& d, const fs::path& nodes_csv) {
    using Key = std::pair<std::string, std::string>;  // name, op
    std::map<Key, std::vector<double>> cb, ours;
    {
        std::ifstream in(nodes_csv);
        if (!in) throw Error("cannot read the eval callback's node times " + nodes_csv.string());
        std::string line;
        std::getline(in, line);  // call,index,name,op,start_ns,end_ns
        while (std::getline(in, line)) {
            std::vector<std::string> f;
            std::stringstream ss(line);
            for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
            if (f.size() != 6) continue;
            cb[{f[2], f[3]}].push_back(std::stod(f[5]) - std::stod(f[4]));
        }
    }
    Fidelity out;
    {
        // The warm-up call (call 0) is not in the callback's CSV.
        store::Statement st(d.handle(), "SELECT name, op, dur_ns FROM node_times WHERE phase = 'decode' AND call > 0");
        while (st.step()) ours[{st.column_text(0), st.column_text(1)}].push_back(double(st.column_int(2)));
    }
    double calls = 0, call_ns = 0;
    {
        store::Statement st(d.handle(), "SELECT count(*), avg(dur_ns) FROM calls WHERE phase = 'decode' AND call > 0");
        st.step();
        calls = double(st.column_int(0)), call_ns = st.column_double(1);
    }
    {
        store::Statement st(d.handle(),
                            "SELECT o.tid, sum(o.end_ns - o.start_ns) FROM ops o JOIN call_graphs cg ON cg.graph_seq = "
                            "o.graph_seq WHERE cg.phase = 'decode' AND cg.call > 0 GROUP BY o.tid ORDER BY o.tid");
        int k = 0;
        while (st.step())
            out.coverage_pct["t" + std::to_string(k++)] = calls * call_ns > 0 ? 100.0 * st.column_double(1) / (calls * call_ns) : NAN;
    }
    std::vector<double> rel;
    size_t slower = 0;
    auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); };
    for (const auto& [key, o] : ours) {
        auto it = cb.find(key);
        if (it == cb.end()) continue;
        const double om = mean(o), cm = mean(it->second);
        if (cm <= 0) continue;
        rel.push_back(std::abs(om - cm) / cm);
        slower += cm > om;
        out.profinfer_ms += om / 1e6, out.callback_ms += cm / 1e6;
    }
    out.operators = rel.size();
    out.median_rel_err_pct = rel.empty() ? NAN : 100 * median_of(rel);
    out.callback_slower_pct = rel.empty() ? NAN : 100.0 * double(slower) / double(rel.size());
    return out;
}

WorkloadFacts workload_facts(store::Database& db) {
    WorkloadFacts f;
    const double unknown = std::numeric_limits<double>::quiet_NaN();
    f.level = db.meta()[store::MetaKey::Level];
    f.decode_calls = db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'");
    if (f.decode_calls == 0) throw Error(db.path().string() + " has no decode call (llama_decode of one token)");
    const double calls = double(f.decode_calls);
    const int64_t records = db.scalar("SELECT count(*) FROM ops o JOIN call_graphs g ON g.graph_seq = o.graph_seq "
                                      "WHERE g.phase = 'decode'");
    const int64_t graphs = db.scalar("SELECT count(*) FROM call_graphs WHERE phase = 'decode'");
    f.graphs_per_call = graphs > 0 ? double(graphs) / calls : unknown;
    if (records > 0) {
        f.threads = double(db.scalar("SELECT max(nth) FROM ops"));
        f.nodes_per_thread = double(records) / calls / std::max(1.0, f.threads);
    } else {
        // A graph's size is no count of the nodes computed (ggml passes its views, reshapes
        // and permutes without computing them: 78 nodes for 45 computed in the tiny model).
        f.nodes_per_thread = unknown;
        const bool sampled = db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'cpu_samples'") > 0 &&
                             db.scalar("SELECT count(*) FROM cpu_samples") > 0;
        f.threads = sampled ? double(db.scalar("SELECT count(DISTINCT tid) FROM cpu_samples")) : unknown;
    }
    if (f.level == "op-sampled" || (f.level == "full" && db.meta()[store::MetaKey::WaitMethod] == "sampled"))
        f.sample_hz = double(db.meta().integer(store::MetaKey::SampleHz));
    f.sampled_on_tick = f.sample_hz > 0 && db.meta()[store::MetaKey::SampleScope] == "tick";
    std::vector<double> ms;
    store::Statement st(db.handle(), "SELECT dur_ns FROM calls WHERE phase = 'decode'");
    while (st.step()) ms.push_back(double(st.column_int(0)) / 1e6);
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    f.traced_call_ms = ms[ms.size() / 2];
    return f;
}

std::vector<LevelEstimate> estimate_levels(const WorkloadFacts& f, const HitCosts& c, int op_sample_hz,
                                           int wait_sample_hz, bool op_on_tick) {
    // Hits on one thread's path per decode call: llama_decode's entry and return on the
    // calling thread; each graph's entry and return (the calling thread); each node's start on
    // every thread (the threads pay in parallel, the graph waits for the slowest at barriers).
    const double token_hits = 2, graph_hits = token_hits + 2 * f.graphs_per_call;
    const double op_hits = graph_hits + f.nodes_per_thread;
    auto hits_us = [&](double hits) { return hits * c.cold_hit_ns / 1e3; };
    // A sampler takes sample_ns from the sampled thread per sample: a share of the call.
    const double traced_us = f.traced_call_ms * 1e3;
    const std::vector<std::tuple<std::string, double, int>> levels = {
        {"token", token_hits, 0},
        {"graph", graph_hits, 0},
        {"op-sampled", graph_hits, op_sample_hz},
        {"op", op_hits, 0},
        {"full", op_hits, wait_sample_hz}};
    // The call without recording: the traced call minus what the trace's own level added.
    const double own_hits = f.level == "token" ? token_hits
                            : f.level == "graph" || f.level == "op-sampled" ? graph_hits
                                                                            : op_hits;
    const double own_share = f.sampled_on_tick ? 0 : f.sample_hz * c.sample_ns / 1e9;
    const double untraced_us = std::max(1e-3, (traced_us - hits_us(own_hits)) / (1 + own_share));
    std::vector<LevelEstimate> out;
    for (const auto& [level, hits, hz] : levels) {
        if (std::isnan(hits) || std::isnan(untraced_us)) continue;  // what the trace cannot tell
        LevelEstimate e;
        e.level = level;
        e.hits_per_call = hits;
        e.samples_per_call = double(hz) * untraced_us / 1e6;
        // Rows: the call's token, its graphs, every thread's nodes (op, full) or samples.
        const double threads = std::isnan(f.threads) ? 1 : f.threads;
        e.records_per_call =
            level == "token" ? 1 : 1 + f.graphs_per_call + (hits - graph_hits + e.samples_per_call) * threads;
        e.recorder_us = e.records_per_call * c.record_ns / 1e3;
        const double sample_ns = level == "op-sampled" && op_on_tick ? 0 : c.sample_ns;  // the tick is paid anyway
        const double probes_us = hits_us(hits) + e.samples_per_call * sample_ns / 1e3;
        e.held = level == "op" || level == "full";
        e.added_us = probes_us + (e.held ? 0 : e.recorder_us);
        e.slowdown_pct = 100.0 * e.added_us / untraced_us;
        e.stored_as_read_slowdown_pct = 100.0 * (probes_us + e.recorder_us) / untraced_us;
        e.spare_cpu_slowdown_pct = 100.0 * probes_us / untraced_us;
        out.push_back(e);
    }
    return out;
}

}  // namespace profinfer
