#include "idle_cpus.h"

#include <sched.h>

#include <fstream>
#include <sstream>
#include <string>

namespace profinfer {

namespace {
std::vector<int> own_cpus() {
    std::vector<int> cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}
}  // namespace

IdleCpus::IdleCpus(std::vector<int> cpus, std::filesystem::path proc)
    : cpus_(cpus.empty() ? own_cpus() : std::move(cpus)), stat_(proc / "stat"), last_(read()) {}

std::map<int, IdleCpus::Ticks> IdleCpus::read() const {
    std::map<int, Ticks> ticks;
    std::ifstream in(stat_);
    std::string line;
    while (std::getline(in, line)) {
        // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"
        if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
        std::istringstream f(line.substr(3));
        int cpu;
        f >> cpu;
        Ticks t;
        unsigned long long v;
        for (int col = 0; col < 8 && (f >> v); ++col) {  // guest time is inside user time already
            t.total += v;
            if (col == 3 || col == 4) t.idle += v;
        }
        ticks[cpu] = t;
    }
    return ticks;
}

double IdleCpus::idle(long min_ticks) {
    const auto now = read();
    double idle = 0;
    unsigned long long most = 0;  // ticks passed on the CPU that saw the most
    for (int c : cpus_) {
        const auto a = last_.find(c);
        const auto b = now.find(c);
        if (a == last_.end() || b == now.end() || b->second.total <= a->second.total) continue;
        const auto passed = b->second.total - a->second.total;
        most = std::max(most, passed);
        idle += double(b->second.idle - a->second.idle) / double(passed);
    }
    if (most < (unsigned long long)min_ticks) return value_;
    last_ = now;
    return value_ = idle;
}

}  // namespace profinfer
