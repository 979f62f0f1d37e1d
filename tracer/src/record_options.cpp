#include "record_options.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "profinfer/error.h"
#include "target.h"

namespace fs = std::filesystem;

namespace profinfer {

TraceLevel parse_trace_level(const std::string& s) {
    if (s == "token") return TraceLevel::Token;
    if (s == "graph") return TraceLevel::Graph;
    if (s == "op-sampled") return TraceLevel::OpSampled;
    if (s == "op") return TraceLevel::Op;
    if (s == "full") return TraceLevel::Full;
    throw Error("unknown level '" + s + "' (token, graph, op-sampled, op, full)");
}

const char* to_string(TraceLevel l) {
    switch (l) {
        case TraceLevel::Token: return "token";
        case TraceLevel::Graph: return "graph";
        case TraceLevel::OpSampled: return "op-sampled";
        case TraceLevel::Op: return "op";
        case TraceLevel::Full: return "full";
    }
    return "?";
}

WaitMethod parse_wait_method(const std::string& s) {
    if (s == "sampled") return WaitMethod::Sampled;
    if (s == "exact") return WaitMethod::Exact;
    if (s == "both") return WaitMethod::Both;
    throw Error("unknown wait method '" + s + "' (sampled, exact, both)");
}

const char* to_string(WaitMethod w) {
    switch (w) {
        case WaitMethod::Sampled: return "sampled";
        case WaitMethod::Exact: return "exact";
        case WaitMethod::Both: return "both";
    }
    return "?";
}

SchedPeers parse_sched_peers(const std::string& s) {
    if (s == "none") return SchedPeers::None;
    if (s == "comm") return SchedPeers::Comm;
    if (s == "full") return SchedPeers::Full;
    throw Error("unknown --sched-peers '" + s + "' (none, comm, full)");
}

const char* to_string(SchedPeers p) {
    switch (p) {
        case SchedPeers::None: return "none";
        case SchedPeers::Comm: return "comm";
        case SchedPeers::Full: return "full";
    }
    return "?";
}

const char* const kDefaultCounters = "cycles,stalled-cycles-backend,cache-misses,major-faults,minor-faults,task-clock";

namespace {
// profinfer in a PID namespace of its own (a container without --pid=host, unshare --pid):
// the kernel side knows every process by its id in the initial namespace, profinfer by its
// id here, and the two never match (it used to end "is it a llama.cpp program?"). The
// initial namespace's inode is fixed (PROC_PID_INIT_INO).
void refuse_a_pid_namespace_of_our_own() {
    std::error_code ec;
    const std::string ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
    if (ec || ns.empty() || ns == "pid:[4026531836]") return;
    throw Error("profinfer runs in a PID namespace of its own (" + ns +
                "): the kernel side sees the host's process ids, which never match the ones profinfer sees here; run "
                "it in the host's PID namespace (docker run --pid=host, or outside unshare --pid) — the command it "
                "records may have a namespace of its own");
}
}  // namespace

void check_record_options(const RecordOptions& opts) {
    refuse_a_pid_namespace_of_our_own();
    if (!opts.pid && opts.command.empty()) throw Error("record needs --pid PID or a command after --");
    if (opts.pid && !opts.command.empty()) throw Error("record takes --pid PID or a command, not both");
    if (opts.pid && (*opts.pid <= 0 || !process_exists(*opts.pid)))
        throw Error("no process with pid " + std::to_string(*opts.pid));
    if (opts.pid && *opts.pid == getpid()) throw Error("profinfer cannot record itself");
    if (opts.pid && process_state(*opts.pid) == 'Z')
        throw Error("process " + std::to_string(*opts.pid) +
                    " has exited (a zombie its parent has not reaped yet): nothing left to record");
    if (opts.qos_min_tps > 0 && opts.budget_pct > 0) throw Error("--qos-min-tps and --budget cannot be combined");
    if (opts.budget_pct > 0 && opts.level < TraceLevel::Op)
        throw Error("--budget needs --level op or full (it samples the operator level)");
    if (opts.qos_min_tps > 0 && opts.level < TraceLevel::Op)
        throw Error("--qos-min-tps needs --level op or full (it switches the operator probes; token and graph records "
                    "cost nothing to switch)");
    if (opts.output.empty()) throw Error("-o needs a file name (it was empty)");
    if (!(opts.budget_pct >= 0 && opts.budget_pct <= 100) || !(opts.qos_min_tps >= 0) || std::isinf(opts.qos_min_tps))
        throw Error("--budget must be 0.01 to 100 and --qos-min-tps a positive number");
    if (opts.sample_hz < 1 || opts.sample_hz > 20000)
        throw Error("--sample-hz must be 1 to 20000, not " + std::to_string(opts.sample_hz));
    if (opts.op_sample_hz < 1 || opts.op_sample_hz > 20000)
        throw Error("--sample-hz must be 1 to 20000, not " + std::to_string(opts.op_sample_hz));
    if (!opts.command.empty()) check_command(opts.command.front());
    // The kernel wants a power-of-two number of pages; a ring of 1 GiB is plenty.
    const size_t page_kb = size_t(sysconf(_SC_PAGESIZE)) >> 10;
    if (opts.buffer_kb < page_kb || opts.buffer_kb > (1u << 20) || (opts.buffer_kb & (opts.buffer_kb - 1)))
        throw Error("the ring buffer must be a power of two from " + std::to_string(page_kb) +
                    " KiB to 1024 MiB (--buffer-mb 1..1024 or --buffer-kb), not " + std::to_string(opts.buffer_kb) +
                    " KiB");
}

}  // namespace profinfer
