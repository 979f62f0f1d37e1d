#include "profinfer/meta_keys.h"

#include "profinfer/error.h"
#include "profinfer/number_text.h"

namespace profinfer::store {

const std::vector<MetaKeyInfo>& meta_registry() {
    using K = MetaKey;
    static const std::vector<MetaKeyInfo> keys = {
        {K::Status, "status", "running, complete, incomplete or failed; a run that lost records is incomplete"},
        {K::Error, "error", "why the run is not complete"},
        {K::Level, "level", "the --level it recorded at: token, graph, op or full"},
        {K::Board, "board", "the board profile in force"},
        {K::Command, "command", "the traced command line"},
        {K::TargetCommand, "target_command", "when the launched command started the llama.cpp process (a shell, timeout): that process's command line"},
        {K::Pid, "pid", "the traced process"},
        {K::LaunchedPid, "launched_pid", "then: the process profinfer launched (pid is the llama.cpp one)"},
        {K::Attached, "attached",
         "1: record --pid attached to a running process, whose calls before the attach are not in the trace (a "
         "request under way then is marked begun_before in requests)"},
        {K::Host, "host", "the machine's host name"},
        {K::Kernel, "kernel", "uname: system, release, machine"},
        {K::EventsVersion, "events_version",
         "the event record format (events.h; readers refuse a newer one than they know)"},
        {K::Clock, "clock", "the clock of every *_ns column: CLOCK_MONOTONIC"},
        {K::StartedAt, "started_at", "Unix seconds when recording began"},
        {K::EndedAt, "ended_at", "Unix seconds when it ended"},
        {K::TargetExitStatus, "target_exit_status", "the launched target's exit status"},
        {K::InterruptedBy, "interrupted_by", "the signal that stopped the recording"},
        {K::DurationS, "duration_s",
         "--duration: the recording of an attached process stopped after this many seconds and detached (the process "
         "went on)"},
        {K::MaxDbMb, "max_db_mb", "--max-db-mb: the bound the trace was kept under (MB of 10^6 bytes)"},
        {K::CallsDropped, "calls_dropped",
         "--max-db-mb: the oldest llama_decode calls deleted whole, with everything recorded before the first call kept"},
        {K::DeferMb, "defer_mb",
         "--defer-mb or --consumer hold: records held in memory up to this many MB, stored when it filled, at the end, "
         "and (hold) while a CPU sat idle"},
        {K::DeferredFlushes, "deferred_flushes",
         "--defer-mb: times the held records filled it and were stored while the target ran (0: all at the end)"},
        {K::RecorderPid, "recorder_pid", "the recording process"},
        {K::RecorderStart, "recorder_start",
         "its start time in clock ticks: a reader on the same host that finds the run running with that process gone "
         "reports it incomplete"},
        {K::StructLayout, "struct_layout", "where the ggml struct offsets came from (DWARF, or the pinned table)"},
        {K::OpStrategy, "op_strategy", "how operator probes were placed in libggml-cpu"},
        {K::CountersReadZero, "counters_read_zero",
         "counters that opened but read 0 on every operator record (a PMU that does not count them, e.g. under an "
         "emulator): left out of every analysis, never shown as a measurement; empty when all counted"},
        {K::WaitMethod, "wait_method", "--wait: exact, sampled or both"},
        {K::SampleHz, "sample_hz", "the sampling rate of --wait sampled or --level op-sampled (Hz)"},
        {K::SampleScope, "sample_scope", "what the sampler interrupts: cpu (every CPU, --wait sampled), target (the target's threads, --level op-sampled with --sample-hz or where the tick cannot be sampled) or tick (nothing of its own: the kernel's scheduler tick, --level op-sampled's default)"},
        {K::WaitRanges, "wait_ranges", "barrier code ranges the sampler classifies as waiting"},
        {K::SchedSwitchProgram, "sched_switch_program", "the sched_switch handler loaded: 4arg, 3arg or both"},
        {K::KernelFallbacks, "kernel_fallbacks",
         "what the kernel's verifier lacked and the tracer did without (atomic-fetch, task-btf, for-each, loop), or none"},
        {K::SchedPeers, "sched_peers", "--sched-peers: what is kept of other processes' threads"},
        {K::SchedPeerIdsRemoved, "sched_peer_ids_removed",
         "scheduler rows whose other side --sched-peers left out (tgid and tid -1; with none, comm empty)"},
        {K::OpDuplicatesDropped, "op_duplicates_dropped",
         "operator records dropped as a second end of the same node on the same thread (the graph's return and the "
         "thread's own exit or next node ending it at once)"},
        {K::Consumer, "consumer",
         "the ring-buffer consumer: normal, or idle (scheduled only when the CPU is free); \"hold, \" before it: the "
         "records held while no CPU sat idle (--consumer hold)"},
        {K::ConsumerBoosts, "consumer_boosts", "times the idle consumer was raised to drain a filling buffer"},
        {K::RecorderCpuMs, "recorder_cpu_ms",
         "CPU time of profinfer's own threads while the target ran traced (user + system, ms): the consumer's share "
         "of the cost, outside the probes"},
        {K::RecorderWakeups, "recorder_wakeups",
         "voluntary context switches of profinfer's own threads over that time (preemptions left out): each one a "
         "wake-up that may take a CPU from the target"},
        {K::RecorderMajorFaults, "recorder_major_faults",
         "major page faults of profinfer's own threads over that time: each a sleep until a page is read in (the "
         "target's libraries' DWARF, read at its loader stops), counted among recorder_wakeups but not a wake-up by an "
         "event"},
        {K::AlternateCalls, "alternate_calls", "record --alternate: operator probes on and off every N calls"},
        {K::Ablate, "ablate", "record --ablate: trap or send (probes that do only part of their work), or attach (no probe in the target)"},
        {K::MemoryLimitBytes, "memory_limit_bytes", "--memory-limit: the target's cgroup memory.max"},
        {K::MemoryCgroup, "memory_cgroup", "the cgroup that held the target, and its version"},
        {K::QosMinTps, "qos_min_tps", "--qos-min-tps"},
        {K::BudgetPct, "budget_pct", "--budget"},
        {K::BudgetCostPct, "budget_cost_pct", "the operator probes' estimated cost, % of a call"},
        {K::BudgetSwitchCostPct, "budget_switch_cost_pct", "the cost of switching them, %"},
        {K::BudgetGapCalls, "budget_gap_calls", "calls left untraced between traced ones"},
        {K::BudgetWindowCostCalls, "budget_window_cost_calls", "the last window's cost, in calls"},
        {K::BudgetTracesEveryCall, "budget_traces_every_call", "1 when the budget allowed tracing every call"},
        {K::HogStartNs, "hog_start_ns", "the experiment runner's CPU hog (paper Fig. 8) started, tracer clock"},
        {K::HogStopNs, "hog_stop_ns", "it stopped"},
        {K::PredictedSlowdownPct, "predicted_slowdown_pct",
         "what `profinfer estimate` predicted for this recording's level on this machine, asked right after it (the "
         "experiment runner, in a study with [outputs] predicted = true)"},
    };
    return keys;
}

const char* name(MetaKey k) {
    const auto& r = meta_registry();
    const auto i = static_cast<size_t>(k);
    if (i >= r.size() || r[i].key != k) throw Error("meta_registry() is not in MetaKey's order");
    return r[i].name;
}

const std::string& Meta::operator[](MetaKey k) const {
    static const std::string none;
    auto it = values_.find(name(k));
    return it == values_.end() ? none : it->second;
}

int64_t Meta::integer(MetaKey k) const {
    const std::string& v = (*this)[k];
    size_t used = 0;
    const auto n = leading_integer(v, &used);
    if (!n || used != v.size())
        throw Error(source_.string() + ": its meta '" + name(k) + "' is '" + v + "', not an integer: a damaged trace?");
    return *n;
}

}  // namespace profinfer::store
