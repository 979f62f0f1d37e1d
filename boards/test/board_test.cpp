// Board profiles and detection, on fixtures written from public facts about each board
// (tests/fixtures/boards/*/proc: cpuinfo, device-tree/model, meminfo).
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "counters.h"
#include "profinfer/board.h"
#include "profinfer/error.h"
#include "test_support.h"

using namespace profinfer;
using profinfer::test::expect_one_line_failure;
using profinfer::test::run;
using profinfer::test::TempDir;

namespace {

test::RunResult run_profinfer(std::vector<std::string> args) {
    args.insert(args.begin(), PROFINFER_BIN);
    return run(args);
}

std::filesystem::path fixture(const std::string& name) { return std::filesystem::path(BOARD_FIXTURES_DIR) / name; }

std::string detected(const std::string& name) { return detect_board(MachineFacts::read(fixture(name)), board_profiles()).name; }

}  // namespace

TEST(BoardDetect, FixturesPickTheirBoardProfiles) {
    EXPECT_EQ(detected("orangepi5-plus"), "rk3588");
    EXPECT_EQ(detected("orangepi5-ultra"), "rk3588");
    EXPECT_EQ(detected("rock5b"), "rk3588");  // another RK3588 board: the SoC's CPU parts decide
    EXPECT_EQ(detected("rubikpi3"), "qcs6490");
    EXPECT_EQ(detected("raspberrypi5"), "host");  // four A76 only: virt-a76 needs its device-tree model too
    EXPECT_EQ(detected("virt-a76"), "virt-a76");  // read off a virtual board (scripts/vboard.sh)
    EXPECT_EQ(detected("x86-kvm"), "host");
}

TEST(BoardDetect, ReadsPartsModelAndMemory) {
    auto m = MachineFacts::read(fixture("orangepi5-plus"));
    ASSERT_EQ(m.cpu_parts.size(), 8u);
    EXPECT_EQ(m.cpu_parts[0], "0xd05");
    EXPECT_EQ(m.cpu_parts[7], "0xd0b");
    EXPECT_EQ(m.device_model, "Xunlong Orange Pi 5 Plus");  // without the device tree's NUL
    EXPECT_EQ(m.arch, "aarch64");
    EXPECT_GT(m.memory_bytes, 30ull << 30);
    auto why = detect_board(m, board_profiles()).why;
    EXPECT_NE(why.find("4x part 0xd0b"), std::string::npos) << why;
    EXPECT_NE(why.find("Orange Pi 5 Plus"), std::string::npos) << why;
}

// What machine.json and every caption call the CPU: cpuinfo's model name where it has one
// (x86), else the ARM cores by part with the device model (arm64 has no model name:
// the virtual board's captions said "unknown").
TEST(BoardDetect, CpusAreDescribedByModelNameOrArmParts) {
    EXPECT_EQ(MachineFacts::read(fixture("orangepi5-plus")).cpu_description(),
              "4x Cortex-A55 (0xd05) + 4x Cortex-A76 (0xd0b), Xunlong Orange Pi 5 Plus");
    EXPECT_EQ(MachineFacts::read(fixture("virt-a76")).cpu_description(), "4x Cortex-A76 (0xd0b), linux,dummy-virt");
    const auto x86 = MachineFacts::read(fixture("x86-kvm"));
    EXPECT_EQ(x86.cpu_description(), x86.cpu_models.at(0));
    EXPECT_FALSE(x86.cpu_models.at(0).empty());
    MachineFacts unknown;
    unknown.cpu_parts = {"0xfff"};
    EXPECT_EQ(unknown.cpu_description(), "1x part 0xfff");
}

// A machine's identity tells apart what its CPU name does not: two KVM guests both called
// "AMD EPYC" (Zen 3 with AVX2, Zen 4 with AVX-512) recorded results/host's studies.
TEST(BoardDetect, IdentityTellsMachinesOfOneNameApart) {
    const auto x86 = MachineFacts::read(fixture("x86-kvm"));
    EXPECT_EQ(x86.x86_model, "family 25 model 17");
    EXPECT_EQ(x86.vector_isa, "avx2");
    EXPECT_EQ(x86.kernel, "6.1.0-fixture");
    const std::string id = x86.identity();
    EXPECT_EQ(id.rfind("AMD EPYC, family 25 model 17, avx2, " + std::to_string(x86.cpu_parts.size()) + " CPUs, ", 0), 0u) << id;
    EXPECT_NE(id.find("Linux 6.1.0-fixture"), std::string::npos) << id;
    MachineFacts wider = x86;
    wider.vector_isa = "avx512f";
    EXPECT_NE(wider.identity(), id);
    const auto arm = MachineFacts::read(fixture("orangepi5-plus"));
    EXPECT_EQ(arm.x86_model, "");
    EXPECT_EQ(arm.vector_isa, "asimd");
    EXPECT_NE(arm.identity().find("asimd, 8 CPUs"), std::string::npos) << arm.identity();
    // This machine: some identity, naming its CPUs' count.
    const auto here = MachineFacts::read();
    EXPECT_NE(here.identity().find(std::to_string(here.cpu_parts.size()) + (here.cpu_parts.size() == 1 ? " CPU" : " CPUs")),
              std::string::npos);
}

// The paper's Table 3 events, as each Arm board profile encodes them, resolve to the ARMv8
// PMU's event numbers through the same code record --counters uses.
TEST(BoardProfiles, Table3CountersAreTheArmPmuEvents) {
    const std::map<std::string, uint64_t> armv8 = {
        {"l3d_cache_refill", 0x2a}, {"mem_access_wr", 0x67}, {"cycles", 0x11}, {"stall_backend", 0x24}};
    for (const std::string board : {"rk3588", "qcs6490"}) {
        auto p = board_profile(board);
        std::set<std::string> seen;
        for (const auto& c : p.counters) {
            CounterSpec spec{c.event};
            ASSERT_TRUE(resolve_counter(spec)) << board << " " << c.name << ": " << spec.reason;
            if (auto it = armv8.find(c.name); it != armv8.end()) {
                EXPECT_EQ(spec.perf_type, uint32_t(PERF_TYPE_RAW)) << board << " " << c.name;
                EXPECT_EQ(spec.config, it->second) << board << " " << c.name;
            } else {
                EXPECT_EQ(c.name, "major-faults");
                EXPECT_EQ(spec.perf_type, uint32_t(PERF_TYPE_SOFTWARE));
                EXPECT_EQ(spec.config, uint64_t(PERF_COUNT_SW_PAGE_FAULTS_MAJ));
            }
            seen.insert(c.name);
        }
        EXPECT_EQ(seen.size(), armv8.size() + 1) << board;
        EXPECT_EQ(p.counter_list().find("r2a"), 0u) << board;
    }
}

TEST(BoardProfiles, BigCoresArePinnedAndMatchTheirClusters) {
    auto rk = board_profile("rk3588");
    EXPECT_EQ(rk.pin_cpus, (std::vector<int>{4, 5, 6, 7}));
    for (const auto& c : rk.clusters)
        if (c.core == "Cortex-A76") {
            EXPECT_EQ(c.cpus, rk.pin_cpus);
        }
    auto qc = board_profile("qcs6490");
    int a78 = 0;
    for (const auto& c : qc.clusters)
        if (c.part == "0xd41") a78 += int(c.cpus.size());
    EXPECT_EQ(a78, 4);
    EXPECT_THROW(board_profile("rk3399"), Error);
}

TEST(BoardProfiles, HostIsDescribedFromWhatTheMachineReports) {
    auto h = host_profile(MachineFacts::read(fixture("x86-kvm")));
    EXPECT_EQ(h.name, "host");
    ASSERT_EQ(h.clusters.size(), 1u);
    EXPECT_EQ(h.clusters[0].core, "AMD EPYC");
    EXPECT_EQ(h.clusters[0].cpus, (std::vector<int>{0, 1}));
    EXPECT_EQ(h.threads, (std::vector<int>{1, 2}));
    EXPECT_TRUE(h.pin_cpus.empty());
    auto pi = host_profile(MachineFacts::read(fixture("raspberrypi5")));
    EXPECT_EQ(pi.threads, (std::vector<int>{1, 2, 4}));
}

TEST(BoardProfiles, MalformedProfileNamesFileAndKey) {
    TempDir d;
    const auto f = d.path() / "bad.toml";
    std::ofstream(f) << "name = \"bad\"\ndescription = \"x\"\narch = \"aarch64\"\n[detect]\ncpu_parts = { \"0xd05\" = 4 }\n"
                        "[[clusters]]\ncore = \"A55\"\npart = \"0xd05\"\ncpus = [0, 1]\n[inference]\nthreads = [1]\n";
    try {
        BoardProfile::load(f);
        FAIL() << "a profile whose clusters list 2 CPUs of 4 loaded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.toml"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cpu_parts"), std::string::npos) << e.what();
    }
}

TEST(BoardCli, DetectAndShow) {
    auto r = run_profinfer({"board", "detect", "--root", fixture("rubikpi3").string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "qcs6490\n");
    EXPECT_NE(r.err.find("RUBIK Pi 3"), std::string::npos) << r.err;
    auto s = run_profinfer({"board", "show", "rk3588", "--json"});
    ASSERT_EQ(s.status, 0) << s.err;
    auto j = nlohmann::json::parse(s.out);
    EXPECT_EQ(j["pin_cpus"], nlohmann::json({4, 5, 6, 7}));
    expect_one_line_failure(run_profinfer({"board", "show", "nosuchboard"}), "known: host, qcs6490, rk3588, virt-a76");
}

#if defined(__aarch64__)
// libpfm4's tables are per architecture: the arm64 build (make test-arm64, under qemu-user)
// resolves the Table 3 events by name for a PMU that is not present, forced with
// LIBPFM_FORCE_PMU (read once, when libpfm4 initialises: set before any test runs). Debian's
// libpfm4 has no Cortex-A76 table; Neoverse N1, the A76's server sibling, has the same
// ARMv8 common events.
static const bool kForcedPmu = setenv("LIBPFM_FORCE_PMU", "arm_n1", 1) == 0;

TEST(BoardPmu, Table3EventsByNameThroughArm64Libpfm4) {
    ASSERT_TRUE(kForcedPmu);
    const std::map<std::string, uint64_t> armv8 = {
        {"L3D_CACHE_REFILL", 0x2a}, {"MEM_ACCESS_WR", 0x67}, {"CPU_CYCLES", 0x11}, {"STALL_BACKEND", 0x24}};
    for (const auto& [event, code] : armv8) {
        CounterSpec spec{"arm_n1::" + event};
        ASSERT_TRUE(resolve_counter(spec)) << event << ": " << spec.reason;
        EXPECT_EQ(spec.perf_type, uint32_t(PERF_TYPE_RAW)) << event;
        EXPECT_EQ(spec.config & 0xffff, code) << event;
    }
}
#endif

// A board's studies run as its profile says: inference pinned to the big cores, the
// profile's Table 3 counters at --level full (shown by the plan, which any machine prints).
TEST(BoardCli, BoardPlanPinsTheBigCoresAndTakesItsCounters) {
    auto r = run_profinfer({"experiment", "run", std::string(PROFINFER_SOURCE_DIR) + "/experiments/specs/thread-imbalance.toml",
                            "--board", "rk3588", "--quick", "--dry-run"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("taskset -c 4,5,6,7 "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("counters: r2a,r67,r11,r24,major-faults"), std::string::npos) << r.out;
    auto host = run_profinfer({"experiment", "run", std::string(PROFINFER_SOURCE_DIR) + "/experiments/specs/thread-imbalance.toml",
                               "--quick", "--dry-run"});
    ASSERT_EQ(host.status, 0) << host.err;
    EXPECT_EQ(host.out.find("taskset"), std::string::npos) << host.out;
}

// The virtual board runs its studies at tiny scale (its profile's [reproduce] scale): the
// plan names the cards' tiny models, where the same spec on rk3588 names the full ones.
TEST(BoardCli, EmulatedBoardRunsTinyModels) {
    const std::string spec = std::string(PROFINFER_SOURCE_DIR) + "/experiments/specs/thread-imbalance.toml";
    auto v = run_profinfer({"experiment", "run", spec, "--board", "virt-a76", "--quick", "--dry-run"});
    ASSERT_EQ(v.status, 0) << v.err;
    EXPECT_NE(v.out.find("llama3.2-1b-q4_0-tiny.gguf"), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("taskset -c 0,1,2,3 "), std::string::npos) << v.out;
    auto rk = run_profinfer({"experiment", "run", spec, "--board", "rk3588", "--quick", "--dry-run"});
    ASSERT_EQ(rk.status, 0) << rk.err;
    EXPECT_EQ(rk.out.find("-tiny.gguf"), std::string::npos) << rk.out;
    EXPECT_NE(rk.out.find("llama3.2-1b-q4_0.gguf"), std::string::npos) << rk.out;
}
