#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace profinfer {

// Hardware and software counters opened per CPU (pid -1) for the operator probes to
// read with bpf_perf_event_read_value; major-faults and minor-faults are read from the
// thread's task_struct instead (exact per thread, ~10× cheaper than a perf read;
// PROFINFER_PERF_FAULTS=1 opens perf events for them as before). Names: perf's generic names (cycles,
// cache-misses, stalled-cycles-backend, major-faults, ...), raw PMU codes (r2a), or PMU
// event names libpfm4 resolves on this machine. A counter that cannot be opened is
// kept in the list as unavailable, with the reason, and never read.
struct CounterSpec {
    std::string name;
    uint32_t perf_type = 0;
    uint64_t config = 0;
    bool available = false;
    std::string reason;
    // PI_COUNTER_PERF, or the task_struct field the probes read instead (page faults:
    // the thread's own maj_flt/min_flt, no perf event opened).
    uint32_t source = 0;
};

class PerCpuCounters {
public:
    PerCpuCounters(const std::vector<std::string>& names, int n_cpus);
    ~PerCpuCounters();
    PerCpuCounters(const PerCpuCounters&) = delete;
    PerCpuCounters& operator=(const PerCpuCounters&) = delete;

    const std::vector<CounterSpec>& specs() const { return specs_; }
    // The available counters, in the order their deltas appear in the op records.
    std::vector<const CounterSpec*> active() const;
    // fd of active counter C on CPU K, or -1 (also for a task_struct counter).
    int fd(size_t c, int cpu) const { return fds_[c * n_cpus_ + cpu]; }
    int n_cpus() const { return n_cpus_; }

private:
    std::vector<CounterSpec> specs_;
    std::vector<int> fds_;  // active counters only
    int n_cpus_;
};

// Fills C's perf type and config from its name (generic, raw rNN, or libpfm4 on this
// machine) without opening it; false, with the reason, for a name none of them knows.
bool resolve_counter(CounterSpec& c);

// C is counted by a PMU (hardware, cache, raw or a PMU libpfm4 named), not by the kernel in
// software (a software event, or a fault count read from the thread's task_struct).
bool counts_on_a_pmu(const CounterSpec& c);

// Splits "a,b,c".
std::vector<std::string> split_counter_list(const std::string& list);

}  // namespace profinfer
