// profinfer watch's metrics of a trace (analysis/src/live_metrics.cpp): what they count
// equals what the views say, segments add up, and the exposition passes Prometheus' own
// linter (promtool check metrics, Debian's prometheus package).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "profinfer/live_metrics.h"
#include "profinfer/store.h"
#include "profinfer/subprocess.h"
#include "test_support.h"

using namespace profinfer;
using namespace profinfer::test;

namespace {

// Every "NAME{LABELS} VALUE" sample line of an exposition, by its name and labels.
std::map<std::string, double> samples(const std::string& text) {
    std::map<std::string, double> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        const auto sp = line.rfind(' ');
        out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    }
    return out;
}

}  // namespace

// The golden full-level trace of the 1B: op and block seconds add up to its operator time,
// the calls and tokens to its calls view; two segments of it count twice.
TEST(LiveMetrics, ATraceCountsWhatItsViewsSay) {
    const auto trace = golden_trace("llama3.2-1b-full");
    const LiveMetrics m = live_metrics_of(trace);
    store::Database db(trace, store::Database::Mode::ReadOnly);
    int64_t op_ns = 0, block_ns = 0;
    for (const auto& [op, ns] : m.op_ns) op_ns += int64_t(ns);
    for (const auto& [block, ns] : m.block_ns) block_ns += int64_t(ns);
    const int64_t node_ns = db.scalar("SELECT sum(dur_ns) FROM node_times");
    EXPECT_GT(node_ns, 0);
    EXPECT_EQ(op_ns, node_ns);
    EXPECT_EQ(block_ns, node_ns);
    EXPECT_EQ(m.block_ns.count("attention"), 1u);
    EXPECT_EQ(int64_t(m.prefill_calls + m.decode_calls), db.scalar("SELECT count(*) FROM calls"));
    EXPECT_EQ(int64_t(m.decode_tokens), db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'"));
    EXPECT_EQ(int64_t(m.prefill_tokens), db.scalar("SELECT coalesce(sum(n_tokens), 0) FROM calls WHERE phase = 'prefill'"));
    uint64_t graphs = 0;
    for (const auto& [b, n] : m.graphs_by_backend) graphs += n;
    EXPECT_EQ(int64_t(graphs), db.scalar("SELECT count(*) FROM call_graphs WHERE api = 'backend'"));
    EXPECT_EQ(int64_t(m.preemptions), db.scalar("SELECT count(*) FROM sched_switch WHERE prev_state = 0 AND prev_tgid = "
                                                "(SELECT value FROM meta WHERE key = 'pid')"));
    LiveMetrics two = m;
    two.add(m);
    EXPECT_EQ(two.decode_calls, 2 * m.decode_calls);
    EXPECT_EQ(two.op_ns.at("MUL_MAT"), 2 * m.op_ns.at("MUL_MAT"));
}

// Histograms as Prometheus keeps them: cumulative buckets, +Inf equal to the count, the sum of
// what was observed; a value on a bound counts in that bound's bucket.
TEST(LiveMetrics, HistogramsAreCumulativeAndEndInTheirCount) {
    LiveMetrics m;
    for (double v : {0.01, 0.05, 0.3, 2.0, 99.0}) m.ttft_s.observe(v);
    const auto s = samples(prometheus_exposition(m));
    EXPECT_EQ(s.at("profinfer_request_ttft_seconds_bucket{le=\"0.05\"}"), 2);
    EXPECT_EQ(s.at("profinfer_request_ttft_seconds_bucket{le=\"0.5\"}"), 3);
    EXPECT_EQ(s.at("profinfer_request_ttft_seconds_bucket{le=\"60\"}"), 4);
    EXPECT_EQ(s.at("profinfer_request_ttft_seconds_bucket{le=\"+Inf\"}"), 5);
    EXPECT_EQ(s.at("profinfer_request_ttft_seconds_count"), 5);
    EXPECT_DOUBLE_EQ(s.at("profinfer_request_ttft_seconds_sum"), 0.01 + 0.05 + 0.3 + 2.0 + 99.0);
    double last = 0;
    for (const auto& [name, v] : s)
        if (name.rfind("profinfer_request_ttft_seconds_bucket", 0) == 0 && name.find("+Inf") == std::string::npos) {
            EXPECT_GE(v, 0);
            last = std::max(last, v);
        }
    EXPECT_LE(last, 5);
}

// Prometheus' linter accepts the exposition of an exact trace and of a sampled one (labels
// escaped, counters named _total, HELP and TYPE before each family).
TEST(LiveMetrics, PromtoolAcceptsTheExposition) {
    ASSERT_TRUE(std::filesystem::exists("/usr/bin/promtool")) << "Debian's prometheus is missing: make deps";
    for (const char* name : {"llama3.2-1b-full", "qwen1.5-moe-a2.7b-full", "synthetic-decode"}) {
        LiveMetrics m = live_metrics_of(golden_trace(name));
        m.graphs_by_backend["a \"quoted\" \\ backend\nname"] = 1;  // escaped, not a broken line
        const auto r = run_process({"/usr/bin/promtool", "check", "metrics"}, prometheus_exposition(m));
        EXPECT_EQ(r.status, 0) << name << "\n" << r.out << r.err;
        EXPECT_EQ(r.out + r.err, "") << name << ": promtool's lint";
    }
}
