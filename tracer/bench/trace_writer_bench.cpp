// The consumer side of the ring buffer: records per second that TraceWriter turns into
// rows (the goal: >= 1 M/s on one core, so that the consumer is never what loses data).
// Records are shaped like a decode step of a 2-thread run: one graph, NODES nodes
// (details sent once, as the kernel side does for a reused graph), two op records per node.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "profinfer/events.h"
#include "profinfer/output_file.h"
#include "profinfer/store.h"
#include "struct_layout.h"
#include "trace_writer.h"

using namespace profinfer;

namespace {

template <class T>
T header(uint32_t kind) {
    T e{};
    e.h.kind = kind;
    e.h.size = sizeof(T);
    e.h.pid = 100;
    e.h.tid = 100;
    return e;
}

void BM_TraceWriterDecodeSteps(benchmark::State& state) {
    const int nodes = int(state.range(0));
    PrivateTempDir dir("profinfer-bench");
    store::Database db(dir.path() / "bench.db", store::Database::Mode::Create);
    GgmlLayout layout = GgmlLayout::builtin();
    TraceWriter writer(db, layout, SchedPeers::Comm);
    // The node details, once.
    for (int n = 0; n < nodes; ++n) {
        auto e = header<pi_node_event>(PI_EV_NODE);
        e.graph_seq = 1;
        e.dst.addr = 0x1000 + 0x200 * n;
        e.dst.op = 1;  // ADD
        e.dst.ne[0] = 2048, e.dst.ne[1] = e.dst.ne[2] = e.dst.ne[3] = 1;
        std::snprintf(e.name, sizeof e.name, "node-%d", n % 16);
        writer.write(&e, sizeof e);
    }
    uint64_t seq = 1, records = 0, ts = 1;
    for (auto _ : state) {
        ++seq;
        auto g = header<pi_graph_event>(PI_EV_GRAPH);
        g.graph_seq = seq, g.start_ns = ts, g.api = 2, g.n_nodes = nodes;
        // As the kernel side sends them: per thread, PI_OP_BATCH nodes per record.
        for (int ith = 0; ith < 2; ++ith) {
            auto o = header<pi_op_event>(PI_EV_OP);
            o.h.tid = 100 + ith;
            for (int n = 0; n < nodes; ++n) {
                auto& e = o.ops[o.n++];
                e.graph_seq = seq, e.tensor = 0x1000 + 0x200 * n, e.ith = ith, e.nth = 2;
                e.start_ns = ts, e.compute_end_ns = ts + 500, e.end_ns = ts + 700;
                for (auto& c : e.counters) c = ~0ULL;
                ts += 1000;
                if (o.n == PI_OP_BATCH || n == nodes - 1) writer.write(&o, sizeof o), o.n = 0;
            }
        }
        g.end_ns = ts;
        writer.write(&g, sizeof g);
        writer.commit();
        records += 2 * nodes + 1;
    }
    state.counters["records_per_s"] = benchmark::Counter(double(records), benchmark::Counter::kIsRate);
    state.counters["node_rows_per_s"] = benchmark::Counter(double(nodes) * state.iterations(), benchmark::Counter::kIsRate);
}
// 68 nodes: the tiny llama; 580: a 16-layer 1B decode graph.
BENCHMARK(BM_TraceWriterDecodeSteps)->Arg(68)->Arg(580)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
