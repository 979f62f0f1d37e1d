#pragma once
// What tracing cost a run, measured on the run itself (the overhead study's within-run
// measures, paper Table 5), and how faithful its operator times are against llama.cpp's
// own eval callback (Table 7's method). Read from a trace DB through the store's views.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

// A call a probe switch (a qos_events row: recorder began it at start_ns, it took effect at
// ts_ns) may have slowed: overlapping the switch or the 300 ms after it.
inline constexpr int64_t kSwitchAftermathNs = 300'000'000;

// A --alternate run (decode calls alternate between windows whose operators are
// recorded and windows that are not): per recorded window, its median decode call against
// the mean of its two neighbouring windows' medians, minus 1, in %. The first SKIP calls of
// each window (the switch falls there) and every call a switch may have slowed are left out.
std::vector<double> paired_window_slowdowns_pct(store::Database& db, int skip = 1);

// A --budget run: what tracing cost its decode, on the run itself: the sum of its decode
// calls over the sum of what each would have taken untraced (the mean of the untraced calls
// no switch touched among the 2·HALF calls around it), minus 1, in %. NaN without such calls.
double achieved_overhead_pct(store::Database& db, int half = 32);

// The share of calls whose operators were recorded (not left out by a gate), in %.
double traced_calls_pct(store::Database& db);

// What a decode call of the target does that a recording traps on, from a trace of it at any
// level (one traced call is enough): its threads, the nodes each computes per call, the graphs
// per call (both APIs), and the median decode call as traced. What the trace's level cannot
// tell is NaN: a token-level trace has no graphs, graph and op-sampled traces no count of the
// nodes computed (a graph's size counts views ggml never computes); op and full count them
// from the node records.
struct WorkloadFacts {
    std::string level;          // the trace's level
    int64_t decode_calls = 0;
    double threads = 0;         // ggml threads per graph (nth; op-sampled: threads sampled; NaN below)
    double nodes_per_thread = 0;  // node probe hits per thread and decode call
    double graphs_per_call = 0;   // graph records per decode call (backend and CPU)
    double traced_call_ms = 0;    // median decode call in the trace
    double sample_hz = 0;         // the trace's own sampler (op-sampled, full's --wait sampled), 0 without
    bool sampled_on_tick = false; // ... taken on the kernel's tick (meta sample_scope tick): no cost of its own
};
WorkloadFacts workload_facts(store::Database& db);

// What one probe hit, one CPU-clock sample and one stored record cost on this machine
// (profinfer estimate measures them: tracer/src/probe_cost.h). A decode pays its hits cold
// (cold_hit_ns: the caches streamed through between them), not at the hot loop's hit_ns.
struct HitCosts {
    double trap_ns = 0, hit_ns = 0, sample_ns = 0, cold_hit_ns = 0, record_ns = 0;
};
// Each level's predicted cost to a decode call of that workload: the probe hits and samples a
// call takes on its critical path (each thread pays its own: per thread, not summed), the
// records all its threads send, which the recorder stores on the target's CPUs when none is
// spare (its whole work lands on the call: a thread it takes a CPU from holds the others at
// the next barrier), and the slowdown against the call without them (the traced call minus
// what the trace's own level added).
struct LevelEstimate {
    std::string level;
    double hits_per_call = 0;    // probe hits on one thread's path
    double samples_per_call = 0; // CPU-clock samples of one thread
    double records_per_call = 0; // rows stored per call, every thread's
    double added_us = 0;         // hits, samples and the recorder's storing, as the level's default consumer does it
    double recorder_us = 0;      // the recorder's storing (on the call, or later where it holds)
    bool held = false;           // the default consumer holds the records while no CPU is spare (op, full)
    double slowdown_pct = 0;     // no spare CPU, the level's default consumer
    double stored_as_read_slowdown_pct = 0;  // no spare CPU, stored as read (--consumer idle)
    double spare_cpu_slowdown_pct = 0;  // the recorder on a CPU the target does not use
};
// Levels whose inputs the facts lack (NaN) are left out. OP_ON_TICK: op-sampled samples on the
// kernel's tick at OP_SAMPLE_HZ, each costing its record only (no interrupt of its own). At op
// and full, record's default consumer holds the records while no CPU is spare (--consumer
// hold): their storing leaves the call (slowdown_pct), stored_as_read_slowdown_pct keeps it.
std::vector<LevelEstimate> estimate_levels(const WorkloadFacts& f, const HitCosts& c, int op_sample_hz,
                                           int wait_sample_hz, bool op_on_tick = false);

// profinfer's operator times (--level op, decode calls after the first) against the eval
// callback's (NODES_CSV: call,index,name,op,start_ns,end_ns of the same program and model in
// another run), per (name, op) present in both.
struct Fidelity {
    size_t operators = 0;                 // (name, op) pairs compared
    double median_rel_err_pct = 0;        // |ours − callback| / callback, median over the pairs
    double callback_slower_pct = 0;       // share of pairs where the callback's time is longer
    double profinfer_ms = 0, callback_ms = 0;  // sums of the pairs' mean times (one call's worth)
    std::map<std::string, double> coverage_pct;  // per thread (t0, t1…): its operator time / decode call time
};
Fidelity fidelity_against_callback(store::Database& db, const std::filesystem::path& nodes_csv);

}  // namespace profinfer
