// What --consumer hold reads of /proc/stat before it stores what it holds (idle_cpus.h).
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "idle_cpus.h"

using namespace profinfer;
namespace fs = std::filesystem;

namespace {
struct FakeProc {
    fs::path dir;
    FakeProc() {
        std::string t = (fs::temp_directory_path() / "idle_cpus_XXXXXX").string();
        dir = mkdtemp(t.data());
    }
    ~FakeProc() { fs::remove_all(dir); }
    // Per CPU: user, idle, iowait (the other columns 0; steal 0).
    void stat(std::initializer_list<std::array<unsigned long long, 3>> cpus) const {
        std::ofstream f(dir / "stat");
        f << "cpu  1 2 3 4 5 6 7 8 9 10\n";
        int c = 0;
        for (const auto& v : cpus) f << "cpu" << c++ << " " << v[0] << " 0 0 " << v[1] << " " << v[2] << " 0 0 0 0 0\n";
        f << "intr 1 2 3\nctxt 42\n";
    }
};
}  // namespace

TEST(IdleCpus, CountsIdleAndIowaitOfTheWatchedCpusOnly) {
    FakeProc p;
    p.stat({{100, 100, 0}, {100, 100, 0}, {0, 0, 0}});
    IdleCpus watched({0, 1}, p.dir);
    // 100 ticks each: CPU 0 half idle (40 idle + 10 iowait), CPU 1 all busy; CPU 2, not
    // watched, all idle.
    p.stat({{150, 140, 10}, {200, 100, 0}, {0, 100, 0}});
    EXPECT_DOUBLE_EQ(watched.idle(), 0.5);
    IdleCpus third({2}, p.dir);
    p.stat({{150, 140, 10}, {200, 100, 0}, {0, 200, 0}});
    EXPECT_DOUBLE_EQ(third.idle(), 1.0);
}

TEST(IdleCpus, TooShortAnIntervalKeepsTheLastAnswer) {
    FakeProc p;
    p.stat({{0, 0, 0}});
    IdleCpus c({0}, p.dir);
    EXPECT_EQ(c.idle(), 0.0) << "no interval yet: busy";
    p.stat({{10, 0, 0}});  // 10 ticks: under the 25 asked
    EXPECT_EQ(c.idle(), 0.0);
    p.stat({{20, 20, 0}});  // 40 since the last that counted, half of them idle
    EXPECT_DOUBLE_EQ(c.idle(), 0.5);
    p.stat({{25, 20, 0}});  // 5 more: too short, the last answer stands
    EXPECT_DOUBLE_EQ(c.idle(), 0.5);
    p.stat({{45, 20, 0}});  // 25 since, none idle
    EXPECT_DOUBLE_EQ(c.idle(), 0.0);
}

TEST(IdleCpus, ACpuThatWentAwayCountsBusy) {
    FakeProc p;
    p.stat({{100, 100, 0}, {100, 100, 0}});
    IdleCpus c({0, 1}, p.dir);
    p.stat({{100, 200, 0}});  // CPU 1 offline: its line is gone
    EXPECT_DOUBLE_EQ(c.idle(), 1.0) << "CPU 0 idle throughout, CPU 1 adds nothing";
}

TEST(IdleCpus, WatchesItsOwnAffinityByDefault) {
    IdleCpus own;
    EXPECT_FALSE(own.cpus().empty());
    const double v = own.idle(0);
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, double(own.cpus().size()));
}
