#pragma once
// How much of the CPUs the recorder may run on sat idle lately, from /proc/stat: what
// `--consumer hold` asks before it stores what it holds. When the target's threads fill those
// CPUs (two decode threads on two CPUs, or a duet), every millisecond of SQLite work is
// taken from a compute thread even at SCHED_IDLE (its weight still buys it ~0.3 % of a
// busy CPU, and the keeper raises it while the ring buffer fills); when a CPU sits idle the
// same work costs the target next to nothing.
#include <filesystem>
#include <map>
#include <vector>

namespace profinfer {

class IdleCpus {
public:
    // CPUS: the CPUs to watch (the recorder's affinity when empty). PROC: where /proc is
    // (tests give a directory of their own).
    explicit IdleCpus(std::vector<int> cpus = {}, std::filesystem::path proc = "/proc");

    // The mean number of those CPUs idle since the last reading that counted (idle and
    // iowait over all time, per CPU), or the last value while less than MIN_TICKS of
    // USER_HZ ticks have passed on them since (too short to say). Before any interval
    // has passed: 0 (busy: nothing is known yet). A CPU that went offline counts busy.
    double idle(long min_ticks = 25);

    const std::vector<int>& cpus() const { return cpus_; }

private:
    struct Ticks {
        unsigned long long idle = 0, total = 0;
    };
    std::map<int, Ticks> read() const;

    std::vector<int> cpus_;
    std::filesystem::path stat_;
    std::map<int, Ticks> last_;
    double value_ = 0;
};

}  // namespace profinfer
