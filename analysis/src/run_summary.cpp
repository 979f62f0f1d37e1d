#include <cstdio>
#include "profinfer/run_summary.h"

#include <algorithm>
#include <sstream>

#include "profinfer/statistics.h"
#include "profinfer/store.h"

namespace profinfer {

std::string operator_sampling_note(store::Database& db) {
    // Only where operators are recorded exactly: a token or graph trace has none to leave out.
    const std::string level = db.meta()[store::MetaKey::Level];
    if (level != "op" && level != "full") return "";
    const int64_t left_out = db.scalar("SELECT count(*) FROM calls WHERE NOT ops_traced");
    if (left_out == 0) return "";
    const int64_t calls = db.scalar("SELECT count(*) FROM calls");
    const auto meta = db.meta();
    // Named by what left them out: a gate the user set, or only the probes going in or out.
    std::string why;
    if (meta.has(store::MetaKey::BudgetPct)) {
        char b[32];
        std::snprintf(b, sizeof b, "%g", std::strtod(meta[store::MetaKey::BudgetPct].c_str(), nullptr));
        why = std::string("--budget ") + b + " %";
    } else if (meta.has(store::MetaKey::QosMinTps)) {
        why = "the QoS controller (--qos-min-tps)";
    } else if (meta.has(store::MetaKey::DurationS)) {
        why = "the calls under way when the probes went in or when --duration ended the recording";
    } else {
        why = "the calls under way while the probes went in or out";
    }
    return "profinfer: sampled operators: recorded on " + std::to_string(calls - left_out) + " of " +
           std::to_string(calls) + " llama_decode calls (" + why +
           "); operator figures describe those calls, token figures all of them";
}

std::optional<double> median_tpot_ms(store::Database& db, int64_t* n) {
    std::vector<double> ms;
    store::Statement st(db.handle(), "SELECT dur_ns FROM calls WHERE phase = 'decode'");
    while (st.step()) ms.push_back(st.column_int(0) / 1e6);
    if (n) *n = int64_t(ms.size());
    if (ms.empty()) return std::nullopt;
    return median_of(ms);
}

RunSummary RunSummary::load(store::Database& db) {
    RunSummary s;
    s.meta = db.meta();
    // Through the derived views (store/src/derived.sql): only what belongs to a recorded
    // llama_decode call counts; work in flight when probes went in does not.
    s.tokens = db.scalar("SELECT coalesce(sum(max(n_tokens, 0)), 0) FROM calls");
    s.prefill_calls = db.scalar("SELECT count(*) FROM calls WHERE phase = 'prefill'");
    s.decode_calls = db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'");
    {
        store::Statement st(db.handle(), "SELECT count(*), coalesce(min(start_ns), 0), coalesce(max(end_ns), 0) FROM tokens");
        st.step();
        s.calls_recorded = st.column_int(0), s.first_call_start_ns = st.column_int(1), s.last_call_end_ns = st.column_int(2);
    }
    s.ops_untraced_calls = db.scalar("SELECT count(*) FROM calls WHERE NOT ops_traced");
    s.graphs = db.scalar("SELECT count(*) FROM call_graphs WHERE api = 'backend'");
    s.cpu_graphs = db.scalar("SELECT count(*) FROM call_graphs WHERE api = 'cpu'");
    // One pass over each big view for everything counted in it (a pass over thread_parts is
    // 6-10 s on a 10-minute full-level trace of the 1B: docs/trace-store.md).
    int64_t counted_parts = 0;
    {
        store::Statement st(db.handle(), "SELECT count(*), count(DISTINCT op) FROM call_nodes");
        st.step();
        s.operators = st.column_int(0), s.op_types = st.column_int(1);
    }
    {
        store::Statement st(db.handle(), "SELECT count(*), count(DISTINCT tid), count(DISTINCT ith), count(c0) FROM thread_parts");
        st.step();
        s.op_records = st.column_int(0), s.threads = st.column_int(1), s.thread_slots = st.column_int(2);
        counted_parts = st.column_int(3);
    }
    s.outside_calls = db.scalar("SELECT count(*) FROM nodes") - s.operators;
    s.sched_switches = db.scalar("SELECT count(*) FROM sched_switch");
    s.sched_wakeups = db.scalar("SELECT count(*) FROM sched_wakeup");
    s.expert_records = db.scalar("SELECT count(*) FROM expert_uses");
    s.cpu_samples = db.scalar("SELECT count(*) FROM cpu_samples");
    if (db.scalar("SELECT count(*) FROM counters WHERE available = 1") > 0 && s.op_records > 0)
        s.counters_valid_share = double(counted_parts) / double(s.op_records);
    {
        const auto shown = db.counter_names();
        store::Statement st(db.handle(), "SELECT name, available, coalesce(reason, '') FROM counters ORDER BY idx >= 0 DESC, idx");
        while (st.step()) {
            const std::string name = st.column_text(0);
            std::string status = "unavailable: " + st.column_text(2);
            if (st.column_int(1))
                status = std::find(shown.begin(), shown.end(), name) != shown.end()
                             ? "counted"
                             : "opened, read 0 on every operator: not counted by this PMU, or the event never "
                               "occurred (left out of the analyses)";
            s.counters.emplace_back(name, status);
        }
    }
    {
        store::Statement st(db.handle(), "SELECT dur_ns FROM calls WHERE phase = 'prefill' ORDER BY call LIMIT 1");
        if (st.step()) s.ttft_ms = st.column_int(0) / 1e6;
    }
    s.median_tpot_ms = profinfer::median_tpot_ms(db);
    s.health = store::run_health(db);
    {
        store::Statement st(db.handle(), "SELECT symbol, coalesce(library, ''), kind, attached, coalesce(reason, '') FROM probes");
        while (st.step()) {
            std::string lib = std::filesystem::path(st.column_text(1)).filename().string();
            std::string what = st.column_text(0) + " " + st.column_text(2) + " (" + lib + ")";
            if (st.column_int(3))
                s.attached_probes.push_back(what);
            else
                s.missing_probes.push_back(what + ": " + st.column_text(4));
        }
    }
    return s;
}

nlohmann::json RunSummary::to_json() const {
    auto m = [&](store::MetaKey k) { return meta[k]; };
    using K = store::MetaKey;
    return {
        {"status", health.status},
        {"status_reason", health.reason},
        {"level", m(K::Level)},
        {"command", m(K::Command)},
        {"pid", m(K::Pid)},
        {"tokens", tokens},
        {"prefill_calls", prefill_calls},
        {"decode_calls", decode_calls},
        {"ops_untraced_calls", ops_untraced_calls},
        {"calls_recorded", calls_recorded},
        {"first_call_start_ns", first_call_start_ns},
        {"last_call_end_ns", last_call_end_ns},
        {"graphs", graphs},
        {"cpu_graphs", cpu_graphs},
        {"operators", operators},
        {"op_records", op_records},
        {"op_types", op_types},
        {"threads", threads},
        {"thread_slots", thread_slots},
        {"nodes_outside_calls", outside_calls},
        {"sched_switches", sched_switches},
        {"sched_wakeups", sched_wakeups},
        {"expert_records", expert_records},
        {"cpu_samples", cpu_samples},
        {"counters_valid_share", counters_valid_share},
        {"counters", [&] {
             auto a = nlohmann::json::array();
             for (const auto& [n, st] : counters) a.push_back({{"name", n}, {"status", st}});
             return a;
         }()},
        {"op_strategy", m(K::OpStrategy)},
        {"struct_layout", m(K::StructLayout)},
        {"ttft_ms", ttft_ms ? nlohmann::json(*ttft_ms) : nlohmann::json(nullptr)},
        {"median_tpot_ms", median_tpot_ms ? nlohmann::json(*median_tpot_ms) : nlohmann::json(nullptr)},
        {"lost_events", health.lost_records},
        {"lost_events_by_kind", health.losses},  // kept for scripts written against schema 1 of this output
        {"lost_or_cut_by_kind", health.losses},
        {"attached_probes", attached_probes},
        {"missing_probes", missing_probes},
        {"meta", meta.all()},
    };
}

std::string RunSummary::to_text() const {
    auto j = to_json();
    auto ms = [](const std::optional<double>& v, const char* none) {
        return v ? std::to_string(*v) + " ms" : std::string(none);
    };
    std::ostringstream o;
    o << "status          " << health.status << (health.reason.empty() ? "" : " (" + health.reason + ")") << "\n"
      << "command         " << j["command"].get<std::string>() << "\n"
      << "level           " << j["level"].get<std::string>() << "\n"
      << "tokens          " << tokens << "\n"
      << "prefill calls   " << prefill_calls << "\n"
      << "decode calls    " << decode_calls << "\n"
      << (ops_untraced_calls ? "operator calls  " + std::to_string(prefill_calls + decode_calls - ops_untraced_calls) +
                                   " calls with operators recorded (" + std::to_string(ops_untraced_calls) +
                                   " left out by " + (meta.has(store::MetaKey::BudgetPct) ? "--budget" : "--qos-min-tps") + ")\n"
                             : "")
      << "graphs          " << graphs << " (CPU graphs " << cpu_graphs << ")\n"
      << "operators       " << operators << " nodes, " << op_records << " per-thread records, " << op_types
      << " op types, " << thread_slots << " thread slots (ith) on " << threads << " OS threads\n"
      << "scheduler       " << sched_switches << " switches, " << sched_wakeups << " wakeups\n"
      << "expert records  " << expert_records << "\n"
      << (cpu_samples || meta[store::MetaKey::Level] == "op-sampled"
              ? "cpu samples     " + std::to_string(cpu_samples) + " in the CPU graphs at " + meta[store::MetaKey::SampleHz] +
                    " Hz per CPU (operator shares as estimates: stat --by op-type)\n"
              : std::string())
      << "op strategy     " << j["op_strategy"].get<std::string>() << "\n"
      << "struct layout   " << j["struct_layout"].get<std::string>() << "\n"
      << "TTFT            " << ms(ttft_ms, "(no prefill call)") << "\n"
      << "median TPOT     " << ms(median_tpot_ms, "(no decode call)") << "\n"
      << "lost records    " << health.lost_records << "\n";
    for (const auto& [kind, n] : health.losses) o << "lost or cut     " << n << " " << kind << "\n";
    o
      << "probes attached " << attached_probes.size() << "\n";
    for (const auto& p : missing_probes) o << "probe missing   " << p << "\n";
    for (const auto& [n, st] : counters) o << "counter         " << n << ": " << st << "\n";
    if (outside_calls > 0)
        o << "not counted     " << outside_calls << " nodes of graphs in flight when recording began (outside any recorded call)\n";
    return o.str();
}

}  // namespace profinfer
