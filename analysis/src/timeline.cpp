#include "profinfer/timeline.h"
#include "profinfer/text_escape.h"

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

namespace {

// Scheduler state tracks get their own Chrome "thread" ids so their slices never
// interleave with the operator slices of the same thread.
constexpr int64_t kStateTrackOffset = 1'000'000'000;
// A track per sequence a server's batches served (view requests): its requests one after
// another, each with its prompt and decode parts nested.
constexpr int64_t kSequenceTrackOffset = 2'000'000'000;

// One trace event waiting to be written: its place in the merged order and its text.
struct Pending {
    int64_t ts = 0, dur = 0;
    std::string json;
};

// A kind of event read from one SQL statement in time order (start, then longer first,
// so that enclosing slices come before what they enclose).
class Source {
public:
    using Make = std::function<std::optional<Pending>(const store::Statement&)>;
    Source(store::Database& db, const std::string& sql, Make make)
        : st_(std::make_unique<store::Statement>(db.handle(), sql.c_str())), make_(std::move(make)) {
        advance();
    }
    bool done() const { return !next_; }
    const Pending& peek() const { return *next_; }
    Pending take() {
        Pending p = std::move(*next_);
        advance();
        return p;
    }

private:
    void advance() {
        next_.reset();
        while (!next_ && st_->step()) next_ = make_(*st_);
    }
    std::unique_ptr<store::Statement> st_;
    Make make_;
    std::optional<Pending> next_;
};

class Writer {
public:
    Writer(std::ostream& out, int64_t t0) : out_(out), t0_(t0) { out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"; }

    std::string us(int64_t ns) const {
        char b[32];
        std::snprintf(b, sizeof b, "%.3f", (ns - t0_) / 1000.0);
        return b;
    }
    Pending slice(int64_t pid, int64_t tid, const std::string& name, const std::string& cat, int64_t start, int64_t end,
                  const nlohmann::json& args = nlohmann::json::object()) const {
        char dur[32];
        std::snprintf(dur, sizeof dur, "%.3f", (end - start) / 1000.0);
        return {start, end - start,
                "{\"ph\":\"X\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
                    ",\"name\":" + json_text(name) + ",\"cat\":\"" + cat + "\",\"ts\":" + us(start) +
                    ",\"dur\":" + dur + ",\"args\":" + json_text(args) + "}"};
    }
    Pending instant(int64_t pid, int64_t tid, const std::string& name, int64_t ts, const nlohmann::json& args) const {
        return {ts, 0,
                "{\"ph\":\"i\",\"s\":\"t\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
                    ",\"name\":" + json_text(name) + ",\"ts\":" + us(ts) + ",\"args\":" + json_text(args) + "}"};
    }
    Pending counter(int64_t pid, const std::string& name, int64_t ts, double value) const {
        return {ts, 0,
                "{\"ph\":\"C\",\"pid\":" + std::to_string(pid) + ",\"name\":" + json_text(name) +
                    ",\"ts\":" + us(ts) + ",\"args\":{\"value\":" + json_text(value) + "}}"};
    }
    void metadata(int64_t pid, int64_t tid, const std::string& what, const nlohmann::json& args) {
        emit("{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"name\":\"" + what +
             "\",\"args\":" + json_text(args) + "}");
    }
    void emit(const std::string& json) {
        out_ << (events_ ? ",\n" : "") << json;
        ++events_;
    }
    int64_t finish() {
        out_ << "\n]}\n";
        return events_;
    }

private:
    std::ostream& out_;
    int64_t t0_;
    int64_t events_ = 0;
};

std::string basename_of(const std::string& cmd) {
    std::string first = cmd.substr(0, cmd.find(' '));
    auto slash = first.rfind('/');
    return slash == std::string::npos ? first : first.substr(slash + 1);
}

// The span of a timeline's window: a condition on a time column ("" for the whole recording).
struct TimeRange {
    std::optional<std::pair<int64_t, int64_t>> span;
    std::string on(const std::string& column) const {
        return span ? " AND " + column + " BETWEEN " + std::to_string(span->first) + " AND " + std::to_string(span->second)
                    : "";
    }
};

// The scheduler states of the target's threads as slices: each switch in or out starts a
// state that lasts until that thread's next switch.
std::string sched_states_sql(int64_t pid, const TimeRange& range) {
    const std::string p = std::to_string(pid), in_range = range.on("ts_ns");
    return "WITH e AS (SELECT ts_ns AS ts, prev_tid AS tid, cpu, CASE WHEN prev_state = 0 THEN 'runnable (preempted by ' || "
           "next_comm || ')' ELSE 'sleeping' END AS state FROM sched_switch WHERE prev_tgid = " + p + in_range +
           " UNION ALL SELECT ts_ns, next_tid, cpu, 'running on CPU ' || cpu FROM sched_switch WHERE next_tgid = " + p +
           in_range + "), s AS (SELECT tid, ts, lead(ts) OVER (PARTITION BY tid ORDER BY ts) AS end_ts, state, cpu FROM e) "
           "SELECT tid, ts, end_ts, state, cpu FROM s WHERE end_ts > ts ORDER BY ts, end_ts - ts DESC";
}

}  // namespace

namespace {

using Sources = std::vector<std::unique_ptr<Source>>;

// The names the scheduler events give the target's threads (the last one each had).
std::map<int64_t, std::string> thread_comms(store::Database& db, const std::string& p) {
    std::map<int64_t, std::string> comm;
    store::Statement st(db.handle(), ("SELECT tid, comm FROM (SELECT ts_ns, prev_tid AS tid, prev_comm AS comm FROM "
                                      "sched_switch WHERE prev_tgid = " + p + " UNION ALL SELECT ts_ns, next_tid, next_comm "
                                      "FROM sched_switch WHERE next_tgid = " + p + ") ORDER BY ts_ns").c_str());
    while (st.step()) comm[st.column_int(0)] = st.column_text(1);
    return comm;
}

// Track names first: every thread that ran a call, a graph or a node, a scheduler track for
// each thread the scheduler events name, and a track per sequence a server's requests used.
void name_tracks(store::Database& db, Writer& w, int64_t pid, std::map<int64_t, std::string>& comm) {
    std::set<int64_t> threads;
    {
        store::Statement st(db.handle(), "SELECT tid FROM calls UNION SELECT tid FROM call_graphs UNION "
                                         "SELECT DISTINCT tid FROM thread_parts");
        while (st.step()) threads.insert(st.column_int(0));
        for (const auto& [tid, c] : comm) threads.insert(tid);
    }
    int sort = 0;
    for (int64_t tid : threads) {
        const std::string name = (comm.count(tid) ? comm[tid] : "thread") + " " + std::to_string(tid);
        w.metadata(pid, tid, "thread_name", {{"name", name}});
        w.metadata(pid, tid, "thread_sort_index", {{"sort_index", sort++}});
        if (comm.count(tid)) {
            w.metadata(pid, tid + kStateTrackOffset, "thread_name", {{"name", name + " (scheduler)"}});
            w.metadata(pid, tid + kStateTrackOffset, "thread_sort_index", {{"sort_index", sort++}});
        }
    }

    {
        store::Statement st(db.handle(), "SELECT DISTINCT seq FROM requests ORDER BY seq");
        while (st.step()) {
            const int64_t seq = st.column_int(0);
            w.metadata(pid, kSequenceTrackOffset + seq, "thread_name", {{"name", "sequence " + std::to_string(seq) + " (requests)"}});
            w.metadata(pid, kSequenceTrackOffset + seq, "thread_sort_index", {{"sort_index", sort++}});
        }
    }

}

// Calls, graphs and operators (with their counters), each a source sorted by start.
void add_compute_sources(store::Database& db, Writer& w, int64_t pid, Sources& sources) {
    const std::vector<std::string> counters = db.counter_names();
    std::string counter_cols;
    for (int c = 0; c < store::kCounterSlots; ++c) counter_cols += ", t.c" + std::to_string(c);
    auto add = [&](const std::string& sql, Source::Make make) {
        sources.push_back(std::make_unique<Source>(db, sql, std::move(make)));
    };
    add("SELECT tid, start_ns, end_ns, n_tokens, phase, ret, call FROM calls ORDER BY start_ns, dur_ns DESC",
        [&w, pid, counters](const store::Statement& s) -> std::optional<Pending> {
            return w.slice(pid, s.column_int(0), s.column_text(4) + " (" + std::to_string(s.column_int(3)) + " tokens)",
                           "token", s.column_int(1), s.column_int(2), {{"call", s.column_int(6)}, {"ret", s.column_int(5)}});
        });
    add("SELECT tid, start_ns, end_ns, api, coalesce(backend, ''), n_nodes, graph_seq FROM call_graphs "
        "ORDER BY start_ns, end_ns - start_ns DESC",
        [&w, pid, counters](const store::Statement& s) -> std::optional<Pending> {
            const std::string name = s.column_text(3) == "cpu" ? "ggml_graph_compute" : "graph " + s.column_text(4);
            return w.slice(pid, s.column_int(0), name, "graph", s.column_int(1), s.column_int(2),
                           {{"n_nodes", s.column_int(5)}, {"seq", s.column_int(6)}});
        });
    // An operator slice per thread and node, then (thread 0) its counter values.
    add("SELECT t.tid, t.start_ns, t.compute_end_ns, t.op, t.name, t.ith, t.nth, t.start_cpu, coalesce(f.op, '')" +
            counter_cols + " FROM thread_parts t LEFT JOIN nodes f ON f.graph_seq = t.graph_seq AND f.tensor = t.fused_tensor "
            "ORDER BY t.start_ns, t.compute_end_ns - t.start_ns DESC",
        [&w, pid, counters](const store::Statement& s) -> std::optional<Pending> {
            std::string op = s.column_text(3);
            if (!s.column_text(8).empty()) op += "+" + s.column_text(8);
            nlohmann::json args = {{"tensor", s.column_text(4)}, {"ith", s.column_int(5)}, {"nth", s.column_int(6)},
                                   {"cpu", s.column_int(7)}};
            for (int c = 0; c < store::kCounterSlots; ++c)
                if (!counters[c].empty() && !s.column_is_null(9 + c)) args[counters[c]] = s.column_int(9 + c);
            return w.slice(pid, s.column_int(0), op, "op", s.column_int(1), s.column_int(2), args);
        });
    for (int c = 0; c < store::kCounterSlots; ++c)
        if (!counters[c].empty())
            add("SELECT start_ns, c" + std::to_string(c) + " FROM thread_parts WHERE ith = 0 AND c" + std::to_string(c) +
                    " IS NOT NULL ORDER BY start_ns",
                [&w, pid, name = counters[c] + " per op (thread 0)"](const store::Statement& s) -> std::optional<Pending> {
                    return w.counter(pid, name, s.column_int(0), double(s.column_int(1)));
                });
}

// Waits, a GPU backend's host side, requests and the scheduler's states and wake-ups.
// RANGE: the window's span, for the events outside calls.
void add_other_sources(store::Database& db, Writer& w, int64_t pid, const std::map<int64_t, std::string>& comm,
                       const TimeRange& range, Sources& sources) {
    auto add = [&](const std::string& sql, Source::Make make) {
        sources.push_back(std::make_unique<Source>(db, sql, std::move(make)));
    };
    add("SELECT tid, compute_end_ns, end_ns FROM thread_parts WHERE barriers > 0 AND end_ns > compute_end_ns "
        "ORDER BY compute_end_ns, end_ns - compute_end_ns DESC",
        [&w, pid, &comm](const store::Statement& s) -> std::optional<Pending> {
            return w.slice(pid, s.column_int(0), "wait", "wait", s.column_int(1), s.column_int(2));
        });
    // A GPU-API backend's host side (gpu_events): each node's dispatch (named by its op and
    // tensor), the submits, fence waits and synchronizes, on the thread that did them.
    add("SELECT e.tid, e.start_ns, e.end_ns, e.kind, coalesce(n.op, ''), coalesce(n.name, ''), e.graph_seq "
        "FROM gpu_events e LEFT JOIN nodes n ON n.graph_seq = e.graph_seq AND n.tensor = e.tensor WHERE 1" + range.on("e.start_ns") +
            " ORDER BY e.start_ns, e.end_ns - e.start_ns DESC",
        [&w, pid, &comm](const store::Statement& s) -> std::optional<Pending> {
            const std::string kind = s.column_text(3);
            const std::string name = kind == "dispatch" ? "dispatch " + s.column_text(4) : kind;
            nlohmann::json args = {{"seq", s.column_int(6)}};
            if (kind == "dispatch") args["tensor"] = s.column_text(5);
            return w.slice(pid, s.column_int(0), name, "gpu", s.column_int(1), s.column_int(2), args);
        });
    // Requests: the whole request, then its prompt (to the end of its first output's call)
    // and its decode (to the end of its last output's call), nested under it.
    add("SELECT * FROM (SELECT seq, start_ns AS b, start_ns + ttft_ns + coalesce(decode_ns, 0) AS e, request, prompt_tokens, "
        "generated, 'request' FROM requests WHERE ttft_ns IS NOT NULL "
        "UNION ALL SELECT seq, start_ns, start_ns + ttft_ns, request, prompt_tokens, generated, 'prompt' FROM requests "
        "WHERE ttft_ns IS NOT NULL "
        "UNION ALL SELECT seq, start_ns + ttft_ns, start_ns + ttft_ns + decode_ns, request, prompt_tokens, generated, 'decode' "
        "FROM requests WHERE ttft_ns IS NOT NULL AND decode_ns > 0) ORDER BY b, e - b DESC",
        [&w, pid, &comm](const store::Statement& s) -> std::optional<Pending> {
            const std::string part = s.column_text(6);
            const std::string name = part == "request" ? "request " + std::to_string(s.column_int(3)) : part;
            return w.slice(pid, kSequenceTrackOffset + s.column_int(0), name, "request", s.column_int(1), s.column_int(2),
                           {{"request", s.column_int(3)}, {"prompt_tokens", s.column_int(4)}, {"generated", s.column_int(5)}});
        });
    add(sched_states_sql(pid, range), [&w, pid, &comm](const store::Statement& s) -> std::optional<Pending> {
        return w.slice(pid, s.column_int(0) + kStateTrackOffset, s.column_text(3), "sched", s.column_int(1), s.column_int(2),
                       {{"cpu", s.column_int(4)}});
    });
    add("SELECT ts_ns, tid, waker_tid, waker_comm, target_cpu FROM sched_wakeup WHERE 1" + range.on("ts_ns") + " ORDER BY ts_ns",
        [&w, pid, &comm](const store::Statement& s) -> std::optional<Pending> {
            if (!comm.count(s.column_int(1))) return std::nullopt;  // a thread with no scheduler track
            return w.instant(pid, s.column_int(1) + kStateTrackOffset, "wakeup", s.column_int(0),
                             {{"waker", s.column_text(3) + " (" + std::to_string(s.column_int(2)) + ")"},
                              {"cpu", s.column_int(4)}});
        });

}

}  // namespace

std::optional<CallWindow> default_call_window(store::Database& db, int64_t max_parts) {
    std::optional<CallWindow> w;
    int64_t parts = 0;
    store::Statement st(db.handle(),
                        "SELECT c.call, (SELECT count(*) FROM call_graphs g JOIN ops o ON o.graph_seq = g.graph_seq "
                        "WHERE g.call = c.call AND g.ops_traced) FROM calls c ORDER BY c.call");
    while (st.step()) {
        parts += st.column_int(1);
        if (w && parts > max_parts) break;
        if (!w) w = CallWindow{st.column_int(0), st.column_int(0)};
        w->last = st.column_int(0);
    }
    return w;
}

int64_t write_timeline(store::Database& db, std::ostream& out, const std::optional<CallWindow>& window) {
    auto meta = db.meta();
    const int64_t pid = meta.has(store::MetaKey::Pid) ? meta.integer(store::MetaKey::Pid) : 0;
    const std::string p = std::to_string(pid);
    TimeRange range;
    if (window) {
        // The window's calls only; the scheduler's and a GPU backend's events from the first
        // call's start to the last one's end.
        db.keep_calls_between(window->first, window->last);
        range.span = std::make_pair(db.scalar("SELECT coalesce(min(start_ns), 0) FROM calls"),
                                    db.scalar("SELECT coalesce(max(end_ns), 0) FROM calls"));
    }
    const int64_t t0 = db.scalar(
        "SELECT min(t) FROM (SELECT min(start_ns) AS t FROM calls UNION ALL SELECT min(start_ns) FROM call_graphs "
        "UNION ALL SELECT min(ts_ns) FROM sched_switch WHERE 1" + range.on("ts_ns") + ")");
    Writer w(out, t0);
    w.metadata(pid, 0, "process_name", {{"name", basename_of(meta[store::MetaKey::Command]) + " (pid " + p + ")"}});
    std::map<int64_t, std::string> comm = thread_comms(db, p);
    name_tracks(db, w, pid, comm);
    Sources sources;
    add_compute_sources(db, w, pid, sources);
    add_other_sources(db, w, pid, comm, range, sources);
    // Merge: earliest first; at equal times the longer slice first, so that viewers nest.
    for (;;) {
        Source* best = nullptr;
        for (auto& src : sources) {
            if (src->done()) continue;
            if (!best || src->peek().ts < best->peek().ts ||
                (src->peek().ts == best->peek().ts && src->peek().dur > best->peek().dur))
                best = src.get();
        }
        if (!best) break;
        w.emit(best->take().json);
    }
    return w.finish();
}

}  // namespace profinfer
