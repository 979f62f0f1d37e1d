// The analysis side in operators per second (graph nodes of recorded calls): opening a
// trace (the derived tables every reader builds), the per-op-type statistics, the Perfetto
// timeline and one call's DAG, on a trace of DECODE steps shaped like a 2-thread run of a
// 16-layer 1B model (580 nodes per step), written through the recorder's own TraceWriter.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <sstream>

#include "profinfer/dag.h"
#include "profinfer/output_file.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "profinfer/timeline.h"
#include "profinfer/trace_graph.h"
#include "struct_layout.h"
#include "synthetic_decode.h"
#include "trace_writer.h"

using namespace profinfer;

namespace {

constexpr int kNodes = 580;

// One trace per step count, written once for every benchmark that reads it.
const std::filesystem::path& trace(int steps) {
    static std::unique_ptr<PrivateTempDir> dir;
    static std::map<int, std::filesystem::path> made;
    if (!dir) dir = std::make_unique<PrivateTempDir>("profinfer-analysis-bench");
    auto& path = made[steps];
    if (path.empty()) {
        path = dir->path() / ("decode-" + std::to_string(steps) + ".db");
        store::Database db(path, store::Database::Mode::Create);
        GgmlLayout layout = GgmlLayout::builtin();
        store::TraceTables tables(db);
        TraceWriter writer(tables, layout, SchedPeers::Comm);
        bench::SyntheticDecode decode(writer, layout, kNodes);
        for (int s = 0; s < steps; ++s) decode.step();
        writer.commit();
        db.set_meta(store::MetaKey::Status, "complete");
    }
    return path;
}

void operators_per_s(benchmark::State& state, int steps) {
    state.counters["operators_per_s"] =
        benchmark::Counter(double(kNodes) * steps * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_OpenTrace(benchmark::State& state) {
    const int steps = int(state.range(0));
    const auto& db = trace(steps);
    for (auto _ : state) {
        store::Database d(db, store::Database::Mode::ReadOnly);
        benchmark::DoNotOptimize(d.scalar("SELECT count(*) FROM nodes"));
    }
    operators_per_s(state, steps);
}

void BM_StatOpType(benchmark::State& state) {
    const int steps = int(state.range(0));
    const auto& db = trace(steps);
    for (auto _ : state) {  // as `profinfer stat` does: open, then the table
        store::Database d(db, store::Database::Mode::ReadOnly);
        benchmark::DoNotOptimize(stats_table(d, "op-type"));
    }
    operators_per_s(state, steps);
}

void BM_Timeline(benchmark::State& state) {
    const int steps = int(state.range(0));
    const auto& db = trace(steps);
    for (auto _ : state) {
        std::ostringstream out;
        store::Database d(db, store::Database::Mode::ReadOnly);
        benchmark::DoNotOptimize(write_timeline(d, out));
    }
    operators_per_s(state, steps);
}

// One call's DAG (Algorithm 1): its time is per call, so the rate is per call's nodes.
void BM_DagOfOneCall(benchmark::State& state) {
    const int steps = int(state.range(0));
    const auto& db = trace(steps);
    for (auto _ : state) {
        store::Database d(db, store::Database::Mode::ReadOnly);
        TraceGraphs graphs(d);
        benchmark::DoNotOptimize(Dag::build(graphs, steps / 2).nodes.size());
    }
    state.counters["operators_per_s"] = benchmark::Counter(double(kNodes) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_OpenTrace)->Arg(16)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StatOpType)->Arg(16)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Timeline)->Arg(16)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DagOfOneCall)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
