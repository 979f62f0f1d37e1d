// The overhead study's within-run measures on traces with known answers.
#include <gtest/gtest.h>

#include <limits>

#include <fstream>
#include <map>

#include "profinfer/store.h"
#include "profinfer/tracing_cost.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// Decode calls back to back; TRACED(i) says whether call i's operators were recorded and
// DUR_NS(i) how long it took. Switches: (began, took effect) pairs.
fs::path synthetic_trace(const TempDir& d, int calls, const std::function<bool(int)>& traced,
                         const std::function<int64_t(int)>& dur_ns, const std::vector<std::pair<int64_t, int64_t>>& switches = {}) {
    const fs::path p = d / "t.db";
    fs::remove(p);
    store::Database db(p, store::Database::Mode::Create);
    int64_t t = 1'000'000'000;
    db.exec("BEGIN");
    for (int i = 0; i < calls; ++i) {
        const int64_t dur = dur_ns(i);
        db.exec("INSERT INTO tokens(id, pid, tid, cpu, start_ns, end_ns, n_tokens, ret) VALUES (" + std::to_string(i + 1) +
                ", 1, 1, 0, " + std::to_string(t) + ", " + std::to_string(t + dur) + ", 1, 0)");
        if (!traced(i)) db.exec("INSERT INTO ops_untraced(token_id) VALUES (" + std::to_string(i + 1) + ")");
        t += dur + 100'000;
    }
    for (const auto& [began, took] : switches)
        db.exec("INSERT INTO qos_events(ts_ns, start_ns, action, tokens_per_s) VALUES (" + std::to_string(took) + ", " +
                std::to_string(began) + ", 'attach', 0)");
    db.exec("COMMIT");
    return p;
}

}  // namespace

// Windows of 8 calls alternate, recorded ones 5 % slower: each recorded window between two
// others reads +5 %; a window's first call (where the switch falls) does not count.
TEST(TracingCost, PairedWindowsResolveAFivePercentCost) {
    TempDir d;
    auto traced = [](int i) { return (i / 8) % 2 == 1; };
    const auto db = synthetic_trace(d, 96, traced, [&](int i) {
        if (i % 8 == 0) return int64_t(90'000'000);  // a switch's call: slow, and skipped
        return traced(i) ? int64_t(21'000'000) : int64_t(20'000'000);
    });
    const auto w = paired_window_slowdowns_pct(*open_trace(db));
    ASSERT_EQ(w.size(), 5u);  // recorded windows with a neighbour on each side: 1, 3, 5, 7, 9
    for (double x : w) EXPECT_NEAR(x, 5.0, 1e-9);
    // Without skipping the first call, the slow switch calls are in the medians' reach but
    // do not move a median of 8.
    for (double x : paired_window_slowdowns_pct(*open_trace(db), 0)) EXPECT_NEAR(x, 5.0, 1e-9);
}

// A switch takes the calls it may have slowed (it and the 300 ms after it) out of the
// medians: the 5 slow calls after a switch inside recorded window 3 would read as a large cost.
TEST(TracingCost, CallsASwitchMayHaveSlowedAreLeftOut) {
    TempDir d;
    auto traced = [](int i) { return (i / 8) % 2 == 1; };
    auto dur = [&](int i) { return i >= 24 && i < 29 ? int64_t(60'000'000) : traced(i) ? int64_t(22'000'000) : int64_t(20'000'000); };
    // Call i starts at 1e9 + the durations before it + 0.1 ms each.
    int64_t at = 1'000'000'000;
    for (int i = 0; i < 24; ++i) at += dur(i) + 100'000;
    const auto db = synthetic_trace(d, 80, traced, dur, {{at - 1'000'000, at}});
    const auto w = paired_window_slowdowns_pct(*open_trace(db));
    ASSERT_EQ(w.size(), 4u);
    for (double x : w) EXPECT_NEAR(x, 10.0, 1e-9);
    const auto blind = synthetic_trace(d, 80, traced, dur);  // the same calls, no switch recorded
    double worst = 0;
    for (double x : paired_window_slowdowns_pct(*open_trace(blind))) worst = std::max(worst, x);
    EXPECT_GT(worst, 50);
}

// A --budget run: a fifth of the calls recorded at +10 %: the run's decode cost 2 %.
TEST(TracingCost, BudgetAchievedIsTheRunsOwnCost) {
    TempDir d;
    auto traced = [](int i) { return i % 5 == 0; };
    const auto db = synthetic_trace(d, 200, traced, [&](int i) { return traced(i) ? int64_t(22'000'000) : int64_t(20'000'000); });
    EXPECT_NEAR(achieved_overhead_pct(*open_trace(db)), 2.0, 0.01);
    EXPECT_NEAR(traced_calls_pct(*open_trace(db)), 20.0, 1e-9);
    // Nothing recorded: nothing cost.
    const auto none = synthetic_trace(d, 50, [](int) { return false; }, [](int) { return int64_t(20'000'000); });
    EXPECT_NEAR(achieved_overhead_pct(*open_trace(none)), 0.0, 1e-9);
    EXPECT_NEAR(traced_calls_pct(*open_trace(none)), 0.0, 1e-9);
}

// Fidelity against a callback whose times are ours (0 %) and ours × 1.25 (20 % relative error,
// every operator slower under the callback).
TEST(TracingCost, FidelityComparesTheSameOperators) {
    TempDir d;
    const fs::path golden = golden_trace("llama3.2-1b-full");
    std::ofstream same(d / "same.csv"), slow(d / "slow.csv");
    same << "call,index,name,op,start_ns,end_ns\n";
    slow << "call,index,name,op,start_ns,end_ns\n";
    {
        store::Database db(golden, store::Database::Mode::ReadOnly);
        store::Statement st(db.handle(), "SELECT call, name, op, dur_ns FROM node_times WHERE phase = 'decode' AND call > 0");
        int k = 0;
        while (st.step()) {
            const int64_t dur = st.column_int(3);
            same << st.column_int(0) << "," << k << "," << st.column_text(1) << "," << st.column_text(2) << ",0," << dur << "\n";
            slow << st.column_int(0) << "," << k++ << "," << st.column_text(1) << "," << st.column_text(2) << ",0,"
                 << dur + dur / 4 << "\n";
        }
    }
    same.close(), slow.close();
    const Fidelity f0 = fidelity_against_callback(*open_trace(golden), d / "same.csv");
    ASSERT_GT(f0.operators, 20u);
    EXPECT_NEAR(f0.median_rel_err_pct, 0.0, 1e-6);
    EXPECT_NEAR(f0.profinfer_ms, f0.callback_ms, 1e-6);
    EXPECT_FALSE(f0.coverage_pct.empty());  // a share per thread
    for (const auto& [t, pct] : f0.coverage_pct) {
        EXPECT_GT(pct, 10) << t;
        EXPECT_LE(pct, 101) << t;
    }
    const Fidelity f1 = fidelity_against_callback(*open_trace(golden), d / "slow.csv");
    EXPECT_NEAR(f1.median_rel_err_pct, 20.0, 0.5);
    EXPECT_NEAR(f1.callback_slower_pct, 100.0, 1e-9);
}

// A decode call of 2 threads × 45 nodes and 2 graphs, traced at op level at 10 ms.
static WorkloadFacts op_call_of_two_threads() {
    WorkloadFacts f;
    f.level = "op";
    f.decode_calls = 10;
    f.threads = 2;
    f.nodes_per_thread = 45;
    f.graphs_per_call = 2;
    f.traced_call_ms = 10;
    return f;
}

// A decode call of 2 threads × 45 nodes and 2 graphs, traced at op level at 10 ms: each
// level's hits, samples and slowdown follow from the costs, against the call without them.
TEST(EstimateLevels, EachLevelAddsItsHitsAndSamplesToTheUntracedCall) {
    const WorkloadFacts f = op_call_of_two_threads();
    // A hit 1 µs as a decode pays it (the hot loop's 0.3 µs is not what a call pays), a
    // sample 2 µs, nothing for the records (the recorder on a spare CPU).
    const HitCosts c{500, 300, 2000, 1000, 0};
    const auto e = estimate_levels(f, c, 1000, 250);
    ASSERT_EQ(e.size(), 5u);
    std::map<std::string, LevelEstimate> by;
    for (const auto& l : e) by[l.level] = l;
    // Hits on one thread's path: llama_decode's 2, each graph's 2, the thread's nodes.
    EXPECT_DOUBLE_EQ(by["token"].hits_per_call, 2);
    EXPECT_DOUBLE_EQ(by["graph"].hits_per_call, 6);
    EXPECT_DOUBLE_EQ(by["op-sampled"].hits_per_call, 6);
    EXPECT_DOUBLE_EQ(by["op"].hits_per_call, 51);
    // The untraced call: 10 ms minus the trace's own 51 hits of 1 µs.
    const double untraced_us = 10'000 - 51;
    EXPECT_NEAR(by["op"].slowdown_pct, 100.0 * 51 / untraced_us, 1e-9);
    EXPECT_NEAR(by["token"].added_us, 2, 1e-9);
    // op-sampled: a sample per ms of the untraced call, 2 µs each.
    EXPECT_NEAR(by["op-sampled"].samples_per_call, untraced_us / 1000, 1e-9);
    EXPECT_NEAR(by["op-sampled"].added_us, 6 + 2 * untraced_us / 1000, 1e-9);
    EXPECT_LT(by["token"].slowdown_pct, by["graph"].slowdown_pct);
    EXPECT_LT(by["graph"].slowdown_pct, by["op-sampled"].slowdown_pct);
    EXPECT_LT(by["op-sampled"].slowdown_pct, by["op"].slowdown_pct);
    EXPECT_LT(by["op"].slowdown_pct, by["full"].slowdown_pct);
    EXPECT_DOUBLE_EQ(by["op"].spare_cpu_slowdown_pct, by["op"].slowdown_pct);
}

// The records every thread sends, stored by the recorder on the target's CPUs when none is
// spare: stored as read, the whole storing lands on the call, not with a spare CPU; op's
// default consumer holds them while no CPU is spare, so its prediction leaves them out.
TEST(EstimateLevels, TheRecorderStoresEveryThreadsRecordsOnTheCall) {
    const WorkloadFacts f = op_call_of_two_threads();
    const HitCosts c{500, 300, 2000, 1000, 400};  // a record stored in 0.4 µs
    std::map<std::string, LevelEstimate> by;
    for (const auto& l : estimate_levels(f, c, 1000, 250)) by[l.level] = l;
    // The token's row; the graphs' rows; both threads' nodes.
    EXPECT_DOUBLE_EQ(by["token"].records_per_call, 1);
    EXPECT_DOUBLE_EQ(by["graph"].records_per_call, 3);
    EXPECT_DOUBLE_EQ(by["op"].records_per_call, 3 + 2 * 45);
    const double untraced_us = 10'000 - 51;
    EXPECT_NEAR(by["op"].recorder_us, 93 * 0.4, 1e-9);
    EXPECT_NEAR(by["op"].stored_as_read_slowdown_pct, 100.0 * (51 + 93 * 0.4) / untraced_us, 1e-9);
    EXPECT_TRUE(by["op"].held);
    EXPECT_NEAR(by["op"].slowdown_pct, 100.0 * 51 / untraced_us, 1e-9);
    EXPECT_NEAR(by["op"].spare_cpu_slowdown_pct, 100.0 * 51 / untraced_us, 1e-9);
    EXPECT_FALSE(by["graph"].held);
    EXPECT_NEAR(by["graph"].slowdown_pct, 100.0 * (6 + 3 * 0.4) / untraced_us, 1e-9) << "stored as read";
    // op-sampled: both threads' samples are rows too.
    EXPECT_NEAR(by["op-sampled"].records_per_call, 3 + 2 * untraced_us / 1000, 1e-9);
}

// What a trace's level cannot tell leaves the levels that need it out. A token-level trace:
// only the token level, its call the traced one minus its own 2 hits; with graphs, up to
// op-sampled; with nodes too (an op-sampled trace at 500 Hz, were its nodes known): every
// level, its call less its own graph hits and samples.
TEST(EstimateLevels, LevelsTheTraceCannotTellAreLeftOut) {
    WorkloadFacts f;
    f.level = "token";
    f.decode_calls = 10;
    f.threads = f.nodes_per_thread = f.graphs_per_call = std::numeric_limits<double>::quiet_NaN();
    f.traced_call_ms = 10;
    const HitCosts c{500, 300, 2000, 1000, 0};
    auto e = estimate_levels(f, c, 1000, 250);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].level, "token");
    EXPECT_NEAR(e[0].slowdown_pct, 100.0 * 2 / (10'000 - 2), 1e-9);
    f.graphs_per_call = 2;
    e = estimate_levels(f, c, 1000, 250);
    ASSERT_EQ(e.size(), 3u);  // token, graph, op-sampled: no nodes
    EXPECT_EQ(e[2].level, "op-sampled");
    f.level = "op-sampled";
    f.nodes_per_thread = 45;
    f.sample_hz = 500;
    e = estimate_levels(f, c, 1000, 250);
    ASSERT_EQ(e.size(), 5u);
    const double untraced_us = (10'000 - 6) / (1 + 500 * 2000 / 1e9);
    EXPECT_NEAR(e[3].slowdown_pct, 100.0 * 51 / untraced_us, 1e-9);
}

// op-sampled on the kernel's tick: a sample costs its record, not an interrupt of its own —
// the probes' part is the graph level's; a trace sampled on the tick is its call untouched
// by its samples.
TEST(EstimateLevels, SamplesOnTheTickCostTheirRecordOnly) {
    const WorkloadFacts f = op_call_of_two_threads();
    const HitCosts c{500, 300, 2000, 1000, 400};
    std::map<std::string, LevelEstimate> timer, tick;
    for (const auto& l : estimate_levels(f, c, 250, 250)) timer[l.level] = l;
    for (const auto& l : estimate_levels(f, c, 250, 250, true)) tick[l.level] = l;
    EXPECT_DOUBLE_EQ(tick["op-sampled"].spare_cpu_slowdown_pct, tick["graph"].spare_cpu_slowdown_pct);
    EXPECT_DOUBLE_EQ(tick["op-sampled"].records_per_call, timer["op-sampled"].records_per_call);
    EXPECT_LT(tick["op-sampled"].slowdown_pct, timer["op-sampled"].slowdown_pct);
    EXPECT_DOUBLE_EQ(tick["op"].slowdown_pct, timer["op"].slowdown_pct);  // the other levels as they were
    WorkloadFacts s = f;
    s.level = "op-sampled";
    s.sample_hz = 250;
    s.sampled_on_tick = true;
    WorkloadFacts unsampled = s;
    unsampled.sample_hz = 0;
    const auto a = estimate_levels(s, c, 250, 250, true), b = estimate_levels(unsampled, c, 250, 250, true);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i].slowdown_pct, b[i].slowdown_pct) << a[i].level;
}
