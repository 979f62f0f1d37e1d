#pragma once
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace profinfer {

// op-sampled: the graph level plus CPU-clock samples of the inference threads, each named by
// the function it interrupted and that function's operator — operator time shares as
// estimates, without a trap per node (docs/recording.md).
enum class TraceLevel { Token, Graph, OpSampled, Op, Full };
TraceLevel parse_trace_level(const std::string& s);
const char* to_string(TraceLevel l);

// How much of another process's thread a scheduler event keeps (its tid, tgid, comm):
// none, its comm only (enough to say who preempted an inference thread), or all.
enum class SchedPeers { None, Comm, Full };
SchedPeers parse_sched_peers(const std::string& s);
const char* to_string(SchedPeers p);

// How --level full splits a thread's part of a node into compute and wait: sampled (a
// CPU-clock sample at SAMPLE_HZ per CPU classifies the running thread by its user IP:
// in barrier code or not), exact (a probe on every ggml_barrier call: about ten times
// dearer), or both (the two in one run, to measure how far the sampled split is from the
// exact one).
enum class WaitMethod { Sampled, Exact, Both };
WaitMethod parse_wait_method(const std::string& s);
const char* to_string(WaitMethod w);

struct RecordOptions {
    std::filesystem::path output = "run.db";
    TraceLevel level = TraceLevel::Token;
    std::optional<pid_t> pid;          // attach to a running process ...
    std::vector<std::string> command;  // ... or launch this one
    std::string board = "host";
    std::string counters;      // comma-separated; empty: the default list at --level full
    double qos_min_tps = 0;    // > 0: detach operator probes while decode is slower
    // > 0 (a percentage, --level op or full): trace operators on windows of decode calls,
    // spaced so that their measured cost stays under this share of decode time.
    double budget_pct = 0;
    size_t buffer_kb = 64 << 10;  // ring buffer size
    // > 0: the launched command runs in a memory cgroup of its own with this limit (bytes).
    uint64_t memory_limit = 0;
    SchedPeers sched_peers = SchedPeers::Comm;
    WaitMethod wait = WaitMethod::Sampled;  // at --level full
    unsigned sample_hz = 250;  // --wait sampled
    // --level op-sampled: on the kernel's scheduler tick (HZ a second, free: the tick runs
    // anyway) where the kernel allows it; otherwise, or with --sample-hz (op_sample_on_tick
    // false), a perf event of its own at op_sample_hz, whose sample costs the interrupted
    // thread 8-12 µs in a KVM guest (profinfer estimate): 250 a second is ~0.25 %.
    bool op_sample_on_tick = true;
    unsigned op_sample_hz = 250;
    // The recorder's reading and writing at SCHED_IDLE (raised while the ring buffer fills,
    // the target waits at a loader stop or a signal is pending), or at normal priority.
    bool idle_consumer = true;
    // --consumer hold (the default at op and full, where a record goes out per node and
    // thread): the records are read at once but held in memory, up to hold_mb MB, while the
    // CPUs profinfer may run on have no idle time, and stored when a quarter of one sat idle
    // since the last look, when the hold is full, and at the end. A recorder killed outright
    // loses what it held (counted, as for --defer-mb).
    bool hold = false;
    double hold_mb = 256;
    bool quiet = false;
    // Stop when the process that started profinfer dies (as on SIGTERM: forwarded to a
    // launched command, the database finished): a harness killed mid-run leaves nothing
    // recording behind it.
    bool stop_with_parent = false;
    // > 0, with pid: stop recording after this many seconds and detach (the process goes on).
    double duration_s = 0;
    // > 0: keep the trace under this many MB (10^6 bytes) by dropping its oldest calls whole.
    double max_db_mb = 0;
    // Look at the ring buffer at least every FLUSH_MS ms (0: only when the BPF side wakes the
    // recorder: once a megabyte is pending, or on the first record a second after the last
    // wake-up). A target gone quiet (a server between requests) then has its last records
    // in the trace within that, not at its next record (profinfer watch: live metrics).
    int flush_ms = 0;
    // > 0: keep what the target sends in memory, up to this many MB, and store it only when
    // that fills or the recording ends: SQLite's work off the target's CPUs while it decodes.
    double defer_mb = 0;
    // Cost measurements, not traces (hidden options, docs/recording.md): `ablate` trap (the
    // operator probes trap and return), send (they do all but send) or attach (every probe
    // goes into profinfer itself, none into the target); `alternate` "W" (windows of W calls
    // recorded and W whose operator probes trap and return) or "W:detach" (the operator
    // probes in for W calls, out for W). Empty: off.
    std::string ablate, alternate;
};

// Records one run into a new trace store. Returns the exit status for the
// profinfer process: 0, or the launched command's non-zero status. Throws
// profinfer::Error (after marking the store failed) when recording cannot happen.
int record(const RecordOptions& opts);

// record --memory-limit: "512M", "3G", "1.5G", "4096" (bytes) → bytes; throws
// profinfer::Error otherwise (and below 16M).
uint64_t parse_memory_size(const std::string& text);

// The counters --level full reads when --counters is not given.
extern const char* const kDefaultCounters;

}  // namespace profinfer
