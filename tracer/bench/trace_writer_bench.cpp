// The consumer side of the ring buffer: records per second that TraceWriter turns into
// rows (the goal: >= 1 M/s on one core, so that the consumer is never what loses data).
// Records are shaped like a decode step of a 2-thread run (synthetic_decode.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include "profinfer/output_file.h"
#include "profinfer/store.h"
#include "struct_layout.h"
#include "synthetic_decode.h"
#include "trace_writer.h"

using namespace profinfer;

namespace {

void BM_TraceWriterDecodeSteps(benchmark::State& state) {
    const int nodes = int(state.range(0));
    PrivateTempDir dir("profinfer-bench");
    store::Database db(dir.path() / "bench.db", store::Database::Mode::Create);
    GgmlLayout layout = GgmlLayout::builtin();
    store::TraceTables tables(db);
    TraceWriter writer(tables, layout, SchedPeers::Comm);
    bench::SyntheticDecode decode(writer, layout, nodes);
    decode.step();  // the node details, sent once
    writer.commit();
    // The recorder commits every 250 ms: every 4 steps at this machine's 16 tokens/s.
    uint64_t records = 0, steps = 0;
    for (auto _ : state) {
        records += decode.step();
        if (++steps % 4 == 0) writer.commit();
    }
    writer.commit();
    // The readers' indexes are built once when the recording ends (store/src/indexes.sql),
    // not per row: what that costs per record, paid after the target is done.
    const auto t0 = std::chrono::steady_clock::now();
    store::build_indexes(db.handle());
    const double index_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.counters["end_index_ns_per_record"] = 1e9 * index_s / double(std::max<uint64_t>(records, 1));
    state.counters["records_per_s"] = benchmark::Counter(double(records), benchmark::Counter::kIsRate);
    state.counters["op_rows_per_s"] = benchmark::Counter(2.0 * nodes * state.iterations(), benchmark::Counter::kIsRate);
}
// 68 nodes: the tiny llama; 580: a 16-layer 1B decode graph.
BENCHMARK(BM_TraceWriterDecodeSteps)->Arg(68)->Arg(580)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
