// The studies' per-trace metrics on traces with known answers.
#include <gtest/gtest.h>

#include <string>

#include "profinfer/store.h"
#include "profinfer/trace_metrics.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

constexpr int64_t kMs = 1'000'000, kT0 = 1'000'000'000;

struct Switch {
    int64_t ms;
    int cpu, prev_tid, prev_tgid, next_tid, next_tgid;
};

// A trace of pid 10: decode calls of 10 ms starting at CALLS_MS, the scheduler records
// SWITCHES (times in ms from kT0).
fs::path sched_trace(const TempDir& d, const std::vector<int64_t>& calls_ms, const std::vector<Switch>& switches) {
    const fs::path p = d / "t.db";
    store::Database db(p, store::Database::Mode::Create);
    db.set_meta(store::MetaKey::Pid, "10");
    db.exec("BEGIN");
    int id = 1;
    for (int64_t start : calls_ms)
        db.exec("INSERT INTO tokens(id, pid, tid, cpu, start_ns, end_ns, n_tokens, ret) VALUES (" + std::to_string(id++) +
                ", 10, 11, 0, " + std::to_string(kT0 + start * kMs) + ", " + std::to_string(kT0 + (start + 10) * kMs) + ", 1, 0)");
    for (const auto& w : switches)
        db.exec("INSERT INTO sched_switch(ts_ns, cpu, prev_tid, prev_tgid, prev_comm, prev_state, next_tid, next_tgid, "
                "next_comm, preempt) VALUES (" + std::to_string(kT0 + w.ms * kMs) + ", " + std::to_string(w.cpu) + ", " +
                std::to_string(w.prev_tid) + ", " + std::to_string(w.prev_tgid) + ", 'x', 0, " + std::to_string(w.next_tid) +
                ", " + std::to_string(w.next_tgid) + ", 'y', 1)");
    db.exec("COMMIT");
    return p;
}

nlohmann::json metrics_of(const fs::path& p) {
    store::Database db(p, store::Database::Mode::ReadOnly);
    return trace_metrics(db);
}

}  // namespace

// Paper Fig. 8: two inference threads (tids 11 and 12 of pid 10) on two CPUs; a hog (pid 99)
// takes CPU 1 from 12 to 24 ms, and thread 12 waits for it. Decode calls [0, 10), [12, 22) and
// [24, 34) ms: both threads on a CPU at once for the whole of the first and the last, never in
// the second (the one inside the hog's window, 11–23 ms).
TEST(TraceMetrics, ParallelShareFallsWhileAHogHoldsOneOfTwoCores) {
    TempDir d;
    const fs::path p = sched_trace(d, {0, 12, 24},
                                   {{-1, 0, 0, 0, 11, 10},     // thread 11 onto CPU 0, for the whole run
                                    {-1, 1, 0, 0, 12, 10},     // thread 12 onto CPU 1
                                    {12, 1, 12, 10, 98, 99},   // the hog takes CPU 1
                                    {24, 1, 98, 99, 12, 10}});  // and gives it back
    store::note_hog_window(p, {kT0 + 11 * kMs, kT0 + 23 * kMs});
    const auto m = metrics_of(p);
    SCOPED_TRACE(m.dump());
    ASSERT_TRUE(m["parallel_pct_before_hog"].is_number());
    EXPECT_NEAR(m["parallel_pct_before_hog"].get<double>(), 100.0, 1e-6);
    EXPECT_NEAR(m["parallel_pct_during_hog"].get<double>(), 0.0, 1e-6);
    EXPECT_NEAR(m["parallel_pct_after_hog"].get<double>(), 100.0, 1e-6);
    EXPECT_NEAR(m["parallel_pct"].get<double>(), 200.0 / 3, 1e-6);
}

// Without scheduler records (levels below full) there is nothing to read it from: null.
TEST(TraceMetrics, ParallelShareIsNullWithoutSchedulerRecords) {
    TempDir d;
    const auto m = metrics_of(sched_trace(d, {0}, {}));
    EXPECT_TRUE(m["parallel_pct"].is_null()) << m.dump();
}

// A lost record (thread 11's return to CPU 0 at 5 ms never arrived) shortens that one run and
// nothing after it: from 6 ms on both threads run at once again, as the CPU's next records say.
TEST(TraceMetrics, ALostSwitchRecordCostsOneRunNotTheRestOfTheTrace) {
    TempDir d;
    const fs::path p = sched_trace(d, {0, 12, 24},
                                   {{-1, 0, 0, 0, 11, 10},
                                    {-1, 1, 0, 0, 12, 10},
                                    {4, 0, 11, 10, 97, 97},   // 11 off CPU 0 at 4 ms
                                    {6, 0, 11, 10, 97, 97},   // off again at 6: its return at 5 was lost
                                    {6, 0, 97, 97, 11, 10}});  // and back at once
    const auto m = metrics_of(p);
    // The run whose start was lost is taken from the CPU's previous record (4 ms): 11 counts as
    // on from 0 to the end, 100 % (truly 29 of 30 ms); a count that took the lost record's -1
    // without its +1 would read both threads at once only before 4 ms (13 %).
    EXPECT_NEAR(m["parallel_pct"].get<double>(), 100.0, 1e-6) << m.dump();
}
