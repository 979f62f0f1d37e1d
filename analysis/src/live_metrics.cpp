#include "profinfer/live_metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "profinfer/sampled_ops.h"

namespace profinfer {

void Histogram::observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i)
        if (v <= bounds[i]) {
            ++counts[i];
            break;
        }
    ++count, sum += v;
}

void Histogram::add(const Histogram& o) {
    for (size_t i = 0; i < counts.size() && i < o.counts.size(); ++i) counts[i] += o.counts[i];
    count += o.count, sum += o.sum;
}

std::vector<RequestLatency> request_latencies(store::Database& db) {
    std::vector<RequestLatency> out;
    std::map<int64_t, size_t> at;
    {
        store::Statement st(db.handle(), "SELECT request, ttft_ns FROM requests ORDER BY request");
        while (st.step()) {
            RequestLatency r;
            r.request = st.column_int(0);
            if (!st.column_is_null(1)) r.ttft_ms = st.column_int(1) / 1e6;
            at[r.request] = out.size();
            out.push_back(std::move(r));
        }
    }
    store::Statement st(db.handle(), "SELECT request, end_ns, outputs FROM request_calls WHERE outputs > 0 ORDER BY request, call");
    int64_t last_request = -1, last_end = 0;
    while (st.step()) {
        const int64_t request = st.column_int(0), end = st.column_int(1), outputs = st.column_int(2);
        if (request == last_request && at.count(request))
            for (int64_t i = 0; i < outputs; ++i) out[at[request]].tpot_ms.push_back((end - last_end) / 1e6 / double(outputs));
        last_request = request, last_end = end;
    }
    return out;
}

void LiveMetrics::add(const LiveMetrics& o) {
    ttft_s.add(o.ttft_s), tpot_s.add(o.tpot_s);
    prefill_tokens += o.prefill_tokens, decode_tokens += o.decode_tokens;
    prefill_calls += o.prefill_calls, decode_calls += o.decode_calls;
    prefill_seconds += o.prefill_seconds, decode_seconds += o.decode_seconds;
    for (const auto& [k, v] : o.graphs_by_backend) graphs_by_backend[k] += v;
    for (const auto& [k, v] : o.op_samples) op_samples[k] += v;
    for (const auto& [k, v] : o.block_ns) block_ns[k] += v;
    for (const auto& [k, v] : o.op_ns) op_ns[k] += v;
    preemptions += o.preemptions, lost_records += o.lost_records, calls_dropped += o.calls_dropped;
    recorder_cpu_seconds += o.recorder_cpu_seconds;
    segments_closed += o.segments_closed, segments_deleted += o.segments_deleted;
}

LiveMetrics live_metrics_of(const std::filesystem::path& trace) {
    LiveMetrics m;
    store::Database db(trace, store::Database::Mode::ReadOnly);
    for (const auto& r : request_latencies(db)) {
        if (r.ttft_ms) m.ttft_s.observe(*r.ttft_ms / 1e3);
        for (double t : r.tpot_ms) m.tpot_s.observe(t / 1e3);
    }
    {
        store::Statement st(db.handle(), "SELECT phase, count(*), coalesce(sum(max(n_tokens, 0)), 0), coalesce(sum(dur_ns), 0) "
                                         "FROM calls GROUP BY phase");
        while (st.step()) {
            const std::string phase = st.column_text(0);
            if (phase == "prefill")
                m.prefill_calls = st.column_int(1), m.prefill_tokens = st.column_int(2), m.prefill_seconds = st.column_int(3) / 1e9;
            else if (phase == "decode")
                m.decode_calls = st.column_int(1), m.decode_tokens = st.column_int(2), m.decode_seconds = st.column_int(3) / 1e9;
        }
    }
    {
        store::Statement st(db.handle(), "SELECT coalesce(backend, api), count(*) FROM call_graphs WHERE api = 'backend' GROUP BY 1");
        while (st.step()) m.graphs_by_backend[st.column_text(0)] = st.column_int(1);
    }
    if (has_cpu_samples(db))
        for_each_sampled_function(db, [&](const SampledFunction& f) { m.op_samples[f.op] += f.samples; });
    {
        store::Statement st(db.handle(), "SELECT op, sum(dur_ns) FROM node_times GROUP BY op");
        while (st.step()) m.op_ns[st.column_text(0)] = st.column_int(1);
    }
    if (!m.op_ns.empty()) {
        db.keep_block_times();
        store::Statement st(db.handle(), "SELECT block, sum(dur_ns) FROM block_times GROUP BY block");
        while (st.step()) m.block_ns[st.column_text(0)] = st.column_int(1);
    }
    m.preemptions = db.scalar("SELECT count(*) FROM preemptions");
    const auto health = store::run_health(db);
    m.lost_records = health.lost_records;
    const auto meta = db.meta();
    if (meta.has(store::MetaKey::CallsDropped)) m.calls_dropped = meta.integer(store::MetaKey::CallsDropped);
    return m;
}

namespace {

std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, v);  // the shortest text that reads back as V
    return std::string(b, r.ptr);
}

// A label value, escaped as the text format asks (backslash, double quote, newline).
std::string label(const std::string& v) {
    std::string o;
    for (char c : v) {
        if (c == '\\' || c == '"') o += '\\', o += c;
        else if (c == '\n') o += "\\n";
        else o += c;
    }
    return o;
}

void head(std::ostringstream& o, const std::string& name, const char* type, const std::string& help) {
    o << "# HELP profinfer_" << name << " " << help << "\n# TYPE profinfer_" << name << " " << type << "\n";
}

void counter(std::ostringstream& o, const std::string& name, const std::string& help, double v) {
    head(o, name, "counter", help);
    o << "profinfer_" << name << " " << number(v) << "\n";
}

template <class Map>
void labelled(std::ostringstream& o, const std::string& name, const std::string& help, const std::string& key, const Map& m,
              double scale = 1) {
    head(o, name, "counter", help);
    for (const auto& [k, v] : m) o << "profinfer_" << name << "{" << key << "=\"" << label(k) << "\"} " << number(double(v) * scale) << "\n";
}

void histogram(std::ostringstream& o, const std::string& name, const std::string& help, const Histogram& h) {
    head(o, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
        cumulative += h.counts[i];
        o << "profinfer_" << name << "_bucket{le=\"" << number(h.bounds[i]) << "\"} " << cumulative << "\n";
    }
    o << "profinfer_" << name << "_bucket{le=\"+Inf\"} " << h.count << "\n";
    o << "profinfer_" << name << "_sum " << number(h.sum) << "\n";
    o << "profinfer_" << name << "_count " << h.count << "\n";
}

}  // namespace

std::string prometheus_exposition(const LiveMetrics& m) {
    std::ostringstream o;
    histogram(o, "request_ttft_seconds",
              "Time to first token per request: from its first llama_decode call's start to the end of the call computing "
              "its first output (requests whose start a segment missed are not observed)",
              m.ttft_s);
    histogram(o, "request_tpot_seconds",
              "Time per output token: each output of a request after its first, the interval between the calls computing "
              "them over the later call's outputs for that request",
              m.tpot_s);
    counter(o, "prefill_tokens_total", "Tokens of llama_decode calls of more than one token (prompts)", double(m.prefill_tokens));
    counter(o, "decode_tokens_total", "Tokens of one-token llama_decode calls (generation)", double(m.decode_tokens));
    counter(o, "prefill_calls_total", "llama_decode calls of more than one token", double(m.prefill_calls));
    counter(o, "decode_calls_total", "One-token llama_decode calls", double(m.decode_calls));
    counter(o, "prefill_seconds_total", "Time inside prefill llama_decode calls (prefill tokens/s = rate of tokens / rate of this)",
            m.prefill_seconds);
    counter(o, "decode_seconds_total", "Time inside one-token llama_decode calls (decode tokens/s = rate of tokens / rate of this)",
            m.decode_seconds);
    labelled(o, "graphs_total", "Backend graphs computed inside llama_decode calls, per backend (graph splits)", "backend",
             m.graphs_by_backend);
    if (!m.op_samples.empty())
        labelled(o, "op_samples_total",
                 "--level op-sampled: CPU-clock samples of the inference threads per operator type (an estimate: an op's time "
                 "share is its rate over the sum's; its sample count bounds the interval)",
                 "op", m.op_samples);
    if (!m.op_ns.empty())
        labelled(o, "op_seconds_total", "--level op/full: operator time per op type (exact)", "op", m.op_ns, 1e-9);
    if (!m.block_ns.empty())
        labelled(o, "block_seconds_total", "--level op/full: operator time per logical block (attention, ffn, moe, rest)", "block",
                 m.block_ns, 1e-9);
    counter(o, "preemptions_total", "--level full: the target's threads switched out while runnable", double(m.preemptions));
    counter(o, "lost_records_total", "Records lost by the recorder (ring buffer full, or held and not stored)", double(m.lost_records));
    counter(o, "calls_dropped_total", "llama_decode calls a segment dropped to stay under its bound", double(m.calls_dropped));
    counter(o, "recorder_cpu_seconds_total", "CPU time of the recording processes (user + system)", m.recorder_cpu_seconds);
    counter(o, "segments_closed_total", "Trace segments recorded to their end", double(m.segments_closed));
    counter(o, "segments_deleted_total", "Closed segments deleted, oldest first, to keep the directory under --max-db-mb",
            double(m.segments_deleted));
    return o.str();
}

}  // namespace profinfer
