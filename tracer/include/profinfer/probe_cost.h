#pragma once
// What recording costs on this machine, measured on profinfer itself with the recorder's own
// BPF object (root, uprobes): a function shaped like ggml_cpu_extra_compute_forward(params,
// tensor), called in a loop, with the node program on it — returning at once (the trap alone)
// or recording the node as on a worker thread — and a spinning thread under the op-sampled
// sampler. probe_cost_bench times the same hits with Google Benchmark; `profinfer estimate`
// turns them into each level's predicted slowdown.
#include <cstdint>
#include <memory>

namespace profinfer {

// The node program attached to this process's bench function, its ring buffer drained by a
// thread. Mode: how the program runs (below).
class NodeProbeHarness {
public:
    enum Mode { Untraced = 0, Trap = 1, Worker = 2, Thread0 = 3, EndbrEntry = 4 };
    explicit NodeProbeHarness(Mode mode);
    ~NodeProbeHarness();
    bool ok() const;
    // One call of the probed function (params of thread ITH of 2, a 1 MiB MUL_MAT-like node),
    // or of its never-probed twin.
    static bool call(int ith, bool probed = true);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

struct ProbeCosts {
    double trap_ns = 0;       // a uprobe hit whose program returns at once
    double node_hit_ns = 0;   // a hit of the operator level's node probe on a worker thread
    double cold_hit_ns = 0;   // the same hit after the caches were streamed through, as between a decode's nodes
    double record_ns = 0;     // the consumer's CPU to store one record (ring buffer to SQLite row)
    double sample_ns = 0;     // a CPU-clock sample of a running thread (interrupt and op_sample)
    int sample_hz = 0;        // the rate the sample cost was measured at
    // The kernel's tick rate where --level op-sampled samples on it (each sample then costs
    // no interrupt of its own, only its record); 0 where it cannot (a timer of its own then).
    int tick_hz = 0;
};
// Measures them, together in about SECONDS (medians over batches; the untraced loop
// measured between them). Throws profinfer::Error without root or uprobes.
ProbeCosts measure_probe_costs(double seconds = 0.3);

}  // namespace profinfer
