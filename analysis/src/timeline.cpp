#include "profinfer/timeline.h"

#include <algorithm>
#include <map>
#include <set>

#include "profinfer/store.h"
#include "profinfer/trace_graph.h"

namespace profinfer {

namespace {

// Scheduler state tracks get their own Chrome "thread" ids so their slices never
// interleave with the operator slices of the same thread.
constexpr int64_t kStateTrackOffset = 1'000'000'000;

class Builder {
public:
    explicit Builder(int64_t t0) : t0_(t0) {}

    void slice(int64_t pid, int64_t tid, const std::string& name, const std::string& cat, int64_t start, int64_t end,
               nlohmann::json args = nlohmann::json::object()) {
        events_.push_back({{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"cat", cat}, {"ts", us(start)},
                           {"dur", (end - start) / 1000.0}, {"args", std::move(args)}});
    }
    void instant(int64_t pid, int64_t tid, const std::string& name, int64_t ts, nlohmann::json args) {
        events_.push_back({{"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"ts", us(ts)},
                           {"args", std::move(args)}});
    }
    void counter(int64_t pid, const std::string& name, int64_t ts, double value) {
        events_.push_back({{"ph", "C"}, {"pid", pid}, {"name", name}, {"ts", us(ts)}, {"args", {{"value", value}}}});
    }
    void thread_name(int64_t pid, int64_t tid, const std::string& name, int sort) {
        meta_.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
        meta_.push_back(
            {{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_sort_index"}, {"args", {{"sort_index", sort}}}});
    }
    void process_name(int64_t pid, const std::string& name) {
        meta_.push_back({{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", {{"name", name}}}});
    }

    nlohmann::json finish() {
        // Per track, by start time and, for equal starts, the enclosing (longer) slice first,
        // so that viewers nest them.
        std::stable_sort(events_.begin(), events_.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
            double ta = a["ts"], tb = b["ts"];
            if (ta != tb) return ta < tb;
            double da = a.value("dur", 0.0), db = b.value("dur", 0.0);
            return da > db;
        });
        nlohmann::json all = nlohmann::json::array();
        for (auto& m : meta_) all.push_back(std::move(m));
        for (auto& e : events_) all.push_back(std::move(e));
        return {{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}};
    }

private:
    double us(int64_t ns) const { return (ns - t0_) / 1000.0; }
    int64_t t0_;
    std::vector<nlohmann::json> events_, meta_;
};

std::string basename_of(const std::string& cmd) {
    std::string first = cmd.substr(0, cmd.find(' '));
    auto slash = first.rfind('/');
    return slash == std::string::npos ? first : first.substr(slash + 1);
}

}  // namespace

nlohmann::json timeline_json(const std::filesystem::path& path) {
    store::Database db(path, store::Database::Mode::ReadOnly);
    auto meta = db.meta();
    const int64_t pid = meta.count("pid") ? std::stoll(meta["pid"]) : 0;
    const int64_t t0 = db.scalar(
        "SELECT min(t) FROM (SELECT min(start_ns) AS t FROM tokens UNION ALL SELECT min(start_ns) FROM graphs "
        "UNION ALL SELECT min(start_ns) FROM ops UNION ALL SELECT min(ts_ns) FROM sched_switch)");
    Builder b(t0);
    b.process_name(pid, basename_of(meta["command"]) + " (pid " + std::to_string(pid) + ")");
    std::set<int64_t> threads;
    {
        store::Statement st(db.handle(), "SELECT tid, start_ns, end_ns, n_tokens, phase, ret FROM calls ORDER BY call");
        for (int k = 0; st.step(); ++k) {
            threads.insert(st.column_int(0));
            b.slice(pid, st.column_int(0), st.column_text(4) + " (" + std::to_string(st.column_int(3)) + " tokens)",
                    "token", st.column_int(1), st.column_int(2), {{"call", k}, {"ret", st.column_int(5)}});
        }
    }
    {
        store::Statement st(db.handle(),
                            "SELECT tid, start_ns, end_ns, api, coalesce(backend_name, backend_guid, ''), n_nodes, seq FROM graphs");
        while (st.step()) {
            threads.insert(st.column_int(0));
            const std::string name = st.column_text(3) == "cpu" ? "ggml_graph_compute" : "graph " + st.column_text(4);
            b.slice(pid, st.column_int(0), name, "graph", st.column_int(1), st.column_int(2),
                    {{"n_nodes", st.column_int(5)}, {"seq", st.column_int(6)}});
        }
    }
    const std::vector<std::string> counters = db.counter_names();
    {
        store::Statement st(db.handle(),
                            "SELECT o.tid, o.start_ns, o.compute_end_ns, o.end_ns, o.ith, o.nth, o.start_cpu, "
                            "coalesce(n.op, '?'), coalesce(n.name, ''), o.barriers, o.c0, o.c1, o.c2, o.c3, o.c4, o.c5, "
                            "coalesce(f.op, '') FROM ops o "
                            "LEFT JOIN nodes n ON n.graph_seq = o.graph_seq AND n.tensor = o.tensor "
                            "LEFT JOIN nodes f ON f.graph_seq = o.graph_seq AND f.tensor = o.fused_tensor");
        while (st.step()) {
            const int64_t tid = st.column_int(0), start = st.column_int(1), cend = st.column_int(2), end = st.column_int(3);
            threads.insert(tid);
            std::string op = st.column_text(7);
            if (!st.column_text(16).empty()) op += "+" + st.column_text(16);
            nlohmann::json args = {{"tensor", st.column_text(8)}, {"ith", st.column_int(4)}, {"nth", st.column_int(5)},
                                   {"cpu", st.column_int(6)}};
            for (int c = 0; c < kCounterSlots; ++c)
                if (!counters[c].empty() && !st.column_is_null(10 + c)) args[counters[c]] = st.column_int(10 + c);
            b.slice(pid, tid, op, "op", start, cend, std::move(args));
            if (st.column_int(9) > 0 && end > cend) b.slice(pid, tid, "wait", "wait", cend, end);
            if (st.column_int(4) == 0)
                for (int c = 0; c < kCounterSlots; ++c)
                    if (!counters[c].empty() && !st.column_is_null(10 + c))
                        b.counter(pid, counters[c] + " per op (thread 0)", start, double(st.column_int(10 + c)));
        }
    }
    // Scheduler: a state track per target thread.
    std::map<int64_t, std::string> comm;
    {
        struct Open {
            int64_t since = 0;
            std::string state;
            int cpu = -1;
        };
        std::map<int64_t, Open> open;
        auto close = [&](int64_t tid, int64_t ts) {
            auto it = open.find(tid);
            if (it != open.end() && ts > it->second.since)
                b.slice(pid, tid + kStateTrackOffset, it->second.state, "sched", it->second.since, ts,
                        {{"cpu", it->second.cpu}});
        };
        store::Statement st(db.handle(),
                            "SELECT ts_ns, cpu, prev_tid, prev_tgid, prev_comm, prev_state, next_tid, next_tgid, next_comm "
                            "FROM sched_switch ORDER BY ts_ns");
        while (st.step()) {
            const int64_t ts = st.column_int(0), cpu = st.column_int(1);
            if (st.column_int(3) == pid) {
                const int64_t tid = st.column_int(2);
                comm[tid] = st.column_text(4);
                close(tid, ts);
                const bool preempted = st.column_int(5) == 0;
                open[tid] = {ts, preempted ? "runnable (preempted by " + st.column_text(8) + ")" : "sleeping", int(cpu)};
            }
            if (st.column_int(7) == pid) {
                const int64_t tid = st.column_int(6);
                comm[tid] = st.column_text(8);
                close(tid, ts);
                open[tid] = {ts, "running on CPU " + std::to_string(cpu), int(cpu)};
            }
        }
        store::Statement w(db.handle(), "SELECT ts_ns, tid, waker_tid, waker_comm, target_cpu FROM sched_wakeup");
        while (w.step())
            b.instant(pid, w.column_int(1) + kStateTrackOffset, "wakeup", w.column_int(0),
                      {{"waker", w.column_text(3) + " (" + std::to_string(w.column_int(2)) + ")"}, {"cpu", w.column_int(4)}});
        for (const auto& [tid, o] : open) threads.insert(tid);
    }
    int sort = 0;
    for (int64_t tid : threads) {
        std::string name = (comm.count(tid) ? comm[tid] : "thread") + " " + std::to_string(tid);
        b.thread_name(pid, tid, name, sort++);
        if (comm.count(tid)) b.thread_name(pid, tid + kStateTrackOffset, name + " (scheduler)", sort++);
    }
    return b.finish();
}

}  // namespace profinfer
