#pragma once
// The registry of a trace's meta keys: every fact about a run that the recorder (or the
// experiment runner, afterwards) writes into the meta table has one entry here, with its
// name in the file and what it means. Writers name a key by MetaKey, never by text, so a
// key nobody registered cannot be written; docs/trace-store.md lists them all (a test
// checks it against meta_registry()).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace profinfer::store {

enum class MetaKey {
    // the run
    Status, Error, Level, Board, Command, TargetCommand, Pid, LaunchedPid, Attached, Host, Kernel, EventsVersion, Clock,
    StartedAt, EndedAt, TargetExitStatus, InterruptedBy, DurationS, MaxDbMb, CallsDropped, DeferMb, DeferredFlushes,
    // the recorder process (a run marked running whose recorder is gone is incomplete)
    RecorderPid, RecorderStart,
    // how it recorded
    StructLayout, OpStrategy, CountersReadZero, WaitMethod, SampleHz, SampleScope, WaitRanges, SchedSwitchProgram, KernelFallbacks, SchedPeers, SchedPeerIdsRemoved, OpDuplicatesDropped,
    Consumer, ConsumerBoosts, RecorderCpuMs, RecorderWakeups, RecorderMajorFaults, AlternateCalls, Ablate, MemoryLimitBytes, MemoryCgroup,
    // --qos-min-tps and --budget
    QosMinTps, BudgetPct, BudgetCostPct, BudgetSwitchCostPct, BudgetGapCalls, BudgetWindowCostCalls,
    BudgetTracesEveryCall,
    // added after the run by the experiment runner (paper Fig. 8's CPU hog)
    HogStartNs, HogStopNs, PredictedSlowdownPct,
};

struct MetaKeyInfo {
    MetaKey key;
    const char* name;     // the key as stored
    const char* meaning;  // one line, as in docs/trace-store.md
};
// Every key, in declaration order.
const std::vector<MetaKeyInfo>& meta_registry();
const char* name(MetaKey k);

// A trace's meta table as read: values by key (empty when absent), integers checked.
class Meta {
public:
    Meta() = default;
    Meta(std::filesystem::path source, std::map<std::string, std::string> values)
        : source_(std::move(source)), values_(std::move(values)) {}
    // The value, "" when the run did not write it.
    const std::string& operator[](MetaKey k) const;
    bool has(MetaKey k) const { return values_.count(name(k)) != 0; }
    // The value as an integer; an error naming the trace and the key when it is not one.
    int64_t integer(MetaKey k) const;
    // Every key the file holds, registered or not (older recorders, other tools).
    const std::map<std::string, std::string>& all() const { return values_; }

private:
    std::filesystem::path source_;
    std::map<std::string, std::string> values_;
};

}  // namespace profinfer::store
