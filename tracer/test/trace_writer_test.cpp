// The writer's own bookkeeping of counter values: a slot that had values and read 0 on
// every operator is what finish() reports as not counted (meta counters_read_zero).
#include <gtest/gtest.h>

#include "counters.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "struct_layout.h"
#include "synthetic_decode.h"
#include "test_support.h"
#include "trace_writer.h"

using namespace profinfer;

TEST(TraceWriterCounters, SlotsThatReadZeroOnEveryOperatorAreKnown) {
    test::TempDir dir;
    store::Database db(dir.path() / "t.db", store::Database::Mode::Create);
    store::TraceTables tables(db);
    TraceWriter w(tables, GgmlLayout::builtin(), SchedPeers::Comm);
    auto o = bench::record<pi_op_event>(PI_EV_OP, 101);
    for (int n = 0; n < 3; ++n) {
        auto& e = o.ops[o.n++];
        e.graph_seq = 1, e.tensor = 0x1000 + 0x100 * uint64_t(n), e.nth = 1;
        e.start_ns = 1000 * uint64_t(n), e.compute_end_ns = e.start_ns + 400, e.end_ns = e.start_ns + 500;
        for (auto& c : e.counters) c = ~0ULL;  // slots 3..: no value
        e.counters[0] = n == 2 ? 7 : 0;        // counts once: counted
        e.counters[1] = 0;                     // never anything: read zero
        e.counters[2] = n == 1 ? ~0ULL : 0;    // zero where known (one migration)
    }
    w.write(&o, sizeof o);
    EXPECT_EQ(w.counter_slots_read_zero(), (std::vector<int>{1, 2}));
}

TEST(TraceWriterCounters, OnlyPmuCountersAreJudgedByReadingZero) {
    CounterSpec raw{"r2a"}, generic{"cycles"}, sw{"context-switches"}, faults{"major-faults"};
    for (auto* c : {&raw, &generic, &sw, &faults}) ASSERT_TRUE(resolve_counter(*c)) << c->name << ": " << c->reason;
    EXPECT_TRUE(counts_on_a_pmu(raw));
    EXPECT_TRUE(counts_on_a_pmu(generic));
    EXPECT_FALSE(counts_on_a_pmu(sw));      // no context switch in a node is a count
    EXPECT_FALSE(counts_on_a_pmu(faults));  // a software event (or read from task_struct)
}

TEST(TraceWriterCounters, ReadZeroCountersAreLeftOutOfTheAnalyses) {
    test::TempDir dir;
    store::Database db(dir.path() / "t.db", store::Database::Mode::Create);
    {
        store::TraceTables tables(db);
        tables.add(store::CounterRow{0, "r11", 4, 0x11, true, ""});
        tables.add(store::CounterRow{1, "r2a", 4, 0x2a, true, ""});
        tables.add(store::CounterRow{-3, "r24", 4, 0x24, false, "no PMU"});
        tables.set_meta(store::MetaKey::CountersReadZero, "r2a");
    }
    const auto names = db.counter_names();
    EXPECT_EQ(names[0], "r11");
    EXPECT_EQ(names[1], "");
}

// A node ended twice on one thread (the graph's return and the thread's own exit at once,
// seen on the virtual boards) arrives as two records with the same start: one row is kept.
TEST(TraceWriterCounters, ASecondEndOfTheSameNodeIsDropped) {
    test::TempDir dir;
    store::Database db(dir.path() / "t.db", store::Database::Mode::Create);
    store::TraceTables tables(db);
    TraceWriter w(tables, GgmlLayout::builtin(), SchedPeers::Comm);
    auto entry = [](uint64_t tensor, uint64_t start, uint64_t end) {
        pi_op_entry e{};
        e.graph_seq = 3, e.tensor = tensor, e.ith = 1, e.nth = 2, e.start_ns = start, e.compute_end_ns = end, e.end_ns = end;
        for (auto& c : e.counters) c = ~0ULL;
        return e;
    };
    auto a = bench::record<pi_op_event>(PI_EV_OP, 102);
    a.ops[a.n++] = entry(0x1000, 100, 200);
    a.ops[a.n++] = entry(0x1100, 200, 300);  // ended by the graph's return
    w.write(&a, sizeof a);
    auto b = bench::record<pi_op_event>(PI_EV_OP, 102);
    b.ops[b.n++] = entry(0x1100, 200, 390);  // and again by the thread's exit
    w.write(&b, sizeof b);
    auto c = bench::record<pi_op_event>(PI_EV_OP, 103);
    c.ops[c.n++] = entry(0x1100, 200, 310);  // another thread, same node and start: kept
    w.write(&c, sizeof c);
    w.commit();
    EXPECT_EQ(w.op_duplicates(), 1u);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM ops"), 3);
    EXPECT_EQ(db.scalar("SELECT end_ns FROM ops WHERE tid = 102 AND tensor = 4352"), 300);
}
