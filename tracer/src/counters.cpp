#include "counters.h"
#include "profinfer/knobs.h"

#include <linux/perf_event.h>
#include <perfmon/pfmlib_perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/events.h"

namespace profinfer {

namespace {

struct Generic {
    uint32_t type;
    uint64_t config;
};

const std::map<std::string, Generic>& generic_events() {
    static const std::map<std::string, Generic> m = {
        {"cycles", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}},
        {"cpu-cycles", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES}},
        {"instructions", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS}},
        {"cache-references", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES}},
        {"cache-misses", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES}},
        {"branch-misses", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES}},
        {"stalled-cycles-frontend", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND}},
        {"stalled-cycles-backend", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND}},
        {"idle-backend-cycles", {PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND}},
        {"LLC-load-misses",
         {PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_LL | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                                  (PERF_COUNT_HW_CACHE_RESULT_MISS << 16)}},
        {"cpu-clock", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK}},
        {"task-clock", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK}},
        {"page-faults", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS}},
        {"major-faults", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ}},
        {"minor-faults", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN}},
        {"context-switches", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES}},
        {"cpu-migrations", {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS}},
    };
    return m;
}

}  // namespace

bool counts_on_a_pmu(const CounterSpec& c) {
    return c.source == PI_COUNTER_PERF && c.perf_type != PERF_TYPE_SOFTWARE && c.perf_type != PERF_TYPE_TRACEPOINT &&
           c.perf_type != PERF_TYPE_BREAKPOINT;
}

bool resolve_counter(CounterSpec& c) {
    if (auto it = generic_events().find(c.name); it != generic_events().end()) {
        c.perf_type = it->second.type, c.config = it->second.config;
        return true;
    }
    if (c.name.size() > 1 && c.name[0] == 'r' && c.name.find_first_not_of("0123456789abcdefABCDEF", 1) == std::string::npos) {
        c.perf_type = PERF_TYPE_RAW, c.config = std::stoull(c.name.substr(1), nullptr, 16);
        return true;
    }
    static bool pfm_ready = pfm_initialize() == PFM_SUCCESS;
    if (!pfm_ready) {
        c.reason = "not a generic perf event and libpfm4 could not initialise";
        return false;
    }
    perf_event_attr attr{};
    pfm_perf_encode_arg_t arg{};
    arg.attr = &attr;
    arg.size = sizeof arg;
    int rc = pfm_get_os_event_encoding(c.name.c_str(), PFM_PLM3 | PFM_PLM0, PFM_OS_PERF_EVENT, &arg);
    if (rc != PFM_SUCCESS) {
        c.reason = std::string("unknown event (") + pfm_strerror(rc) + ")";
        return false;
    }
    c.perf_type = attr.type, c.config = attr.config;
    return true;
}

namespace {

int open_on_cpu(const CounterSpec& c, int cpu) {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = c.perf_type;
    attr.config = c.config;
    return int(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

std::vector<std::string> split_counter_list(const std::string& list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

PerCpuCounters::PerCpuCounters(const std::vector<std::string>& names, int n_cpus) : n_cpus_(n_cpus) {
    const bool perf_faults = knob(Knob::PerfFaults).has_value();
    for (const auto& n : names) {
        CounterSpec c;
        c.name = n;
        if (resolve_counter(c)) {
            std::vector<int> fds;  // one per CPU; -1 throughout for a task_struct counter
            if (!perf_faults && (n == "major-faults" || n == "minor-faults")) {
                c.source = n == "major-faults" ? PI_COUNTER_TASK_MAJ_FLT : PI_COUNTER_TASK_MIN_FLT;
                fds.assign(size_t(n_cpus), -1);
            } else {
                for (int cpu = 0; cpu < n_cpus; ++cpu) {
                    int fd = open_on_cpu(c, cpu);
                    if (fd < 0) {
                        int err = errno;
                        c.reason = err == ENOENT || err == EOPNOTSUPP
                                       ? "not supported by this CPU or hypervisor (no hardware PMU?)"
                                       : std::string("perf_event_open: ") + std::strerror(err);
                        for (int f : fds) close(f);
                        fds.clear();
                        break;
                    }
                    fds.push_back(fd);
                }
            }
            if (!fds.empty()) {
                if (active().size() >= PI_MAX_COUNTERS) {
                    for (int f : fds)
                        if (f >= 0) close(f);
                    c.reason = "more than " + std::to_string(PI_MAX_COUNTERS) + " counters requested";
                } else {
                    c.available = true;
                    fds_.insert(fds_.end(), fds.begin(), fds.end());
                }
            }
        }
        specs_.push_back(c);
    }
}

PerCpuCounters::~PerCpuCounters() {
    for (int fd : fds_)
        if (fd >= 0) close(fd);
}

std::vector<const CounterSpec*> PerCpuCounters::active() const {
    std::vector<const CounterSpec*> a;
    for (const auto& c : specs_)
        if (c.available) a.push_back(&c);
    return a;
}

}  // namespace profinfer
