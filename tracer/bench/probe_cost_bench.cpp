// What one operator probe hit costs the thread that hits it, on this machine: a function
// shaped like ggml_cpu_extra_compute_forward(params, tensor), called in a loop, untraced and
// with profinfer's own node program on it (the very object the recorder loads, attached to
// this process by uprobe). Needs root (BPF); the consumer is a thread draining the ring buffer.
//   untraced        the call alone
//   trap            --ablate trap: the program returns at once (the uprobe's trap)
//   endbr64-entry   the same with the probe on the function's first instruction, endbr64,
//                   which the kernel single-steps (x86-64; where the recorder probed before)
//   worker          the operator level on a worker thread (ith 1): stamp and record the node
//   thread0         thread 0 (ith 0) in a graph not described before (the identity check)
// The difference from `untraced` is the per-hit cost; times the hits per decode call over
// the call's duration (experiments/handler_cost.sh prints both), the share of decode it takes.
#include <benchmark/benchmark.h>

#include <memory>

#include "profinfer/probe_cost.h"

using namespace profinfer;

namespace {

void BM_NodeProbeHit(benchmark::State& state) {
    const auto mode = NodeProbeHarness::Mode(state.range(0));
    NodeProbeHarness probe(mode);
    if (!probe.ok()) {
        state.SkipWithError("cannot load or attach the node program (needs root and uprobes)");
        return;
    }
    const int ith = mode == NodeProbeHarness::Thread0 ? 0 : 1;
    for (auto _ : state) benchmark::DoNotOptimize(NodeProbeHarness::call(ith));
    state.SetLabel(mode == NodeProbeHarness::Untraced ? "untraced"
                   : mode == NodeProbeHarness::Trap   ? "trap"
                   : mode == NodeProbeHarness::Worker ? "worker"
                   : mode == NodeProbeHarness::Thread0 ? "thread0"
                                                       : "endbr64-entry");
}
BENCHMARK(BM_NodeProbeHit)
    ->Arg(NodeProbeHarness::Untraced)
    ->Arg(NodeProbeHarness::Trap)
    ->Arg(NodeProbeHarness::Worker)
    ->Arg(NodeProbeHarness::Thread0)
    ->Unit(benchmark::kNanosecond);
#if defined(__x86_64__)
BENCHMARK(BM_NodeProbeHit)->Arg(NodeProbeHarness::EndbrEntry)->Unit(benchmark::kNanosecond);
#endif

}  // namespace

BENCHMARK_MAIN();
