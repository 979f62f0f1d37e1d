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

void switch_at(store::Database& db, int64_t ms, int cpu, int prev_tid, int prev_tgid, int next_tid, int next_tgid) {
    db.exec("INSERT INTO sched_switch(ts_ns, cpu, prev_tid, prev_tgid, prev_comm, prev_state, next_tid, next_tgid, next_comm, "
            "preempt) VALUES (" + std::to_string(kT0 + ms * kMs) + ", " + std::to_string(cpu) + ", " + std::to_string(prev_tid) +
            ", " + std::to_string(prev_tgid) + ", 'x', 0, " + std::to_string(next_tid) + ", " + std::to_string(next_tgid) +
            ", 'y', 1)");
}

}  // namespace

// Paper Fig. 8: two inference threads (tids 11 and 12 of pid 10) on two CPUs; a hog (pid 99)
// takes CPU 1 from 12 to 24 ms, and thread 12 waits for it. Decode calls [0, 10), [12, 22) and
// [24, 34) ms: both threads on a CPU at once for the whole of the first and the last, never in
// the second (the one inside the hog's window, 11–23 ms).
TEST(TraceMetrics, ParallelShareFallsWhileAHogHoldsOneOfTwoCores) {
    TempDir d;
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        db.set_meta(store::MetaKey::Pid, "10");
        db.exec("BEGIN");
        int id = 1;
        for (int64_t start : {0, 12, 24})
            db.exec("INSERT INTO tokens(id, pid, tid, cpu, start_ns, end_ns, n_tokens, ret) VALUES (" + std::to_string(id++) +
                    ", 10, 11, 0, " + std::to_string(kT0 + start * kMs) + ", " + std::to_string(kT0 + (start + 10) * kMs) +
                    ", 1, 0)");
        switch_at(db, -1, 0, 0, 0, 11, 10);   // thread 11 onto CPU 0, for the whole run
        switch_at(db, -1, 1, 0, 0, 12, 10);   // thread 12 onto CPU 1
        switch_at(db, 12, 1, 12, 10, 98, 99);  // the hog takes CPU 1
        switch_at(db, 24, 1, 98, 99, 12, 10);  // and gives it back
        db.exec("COMMIT");
    }
    store::note_hog_window(p, {kT0 + 11 * kMs, kT0 + 23 * kMs});
    store::Database db(p, store::Database::Mode::ReadOnly);
    const auto m = trace_metrics(db);
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
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        db.set_meta(store::MetaKey::Pid, "10");
        db.exec("INSERT INTO tokens(id, pid, tid, cpu, start_ns, end_ns, n_tokens, ret) VALUES (1, 10, 11, 0, 0, 10, 1, 0)");
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    const auto m = trace_metrics(db);
    EXPECT_TRUE(m["parallel_pct"].is_null()) << m.dump();
}
