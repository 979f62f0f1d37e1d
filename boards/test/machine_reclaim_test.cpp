// The kernel's proactive reclaim, read from a DAMON sysfs tree (written here): a pageout
// scheme on a running kdamond is reported with its idle age; anything else is not.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "profinfer/machine_bench.h"
#include "test_support.h"

using namespace profinfer;
using profinfer::test::TempDir;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
}

// A kdamond like this machine's: paddr, 5 s aggregation, pageout of regions idle 12 intervals.
fs::path kdamond(const fs::path& root, const std::string& state, const std::string& action) {
    const fs::path k = root / "sys/kernel/mm/damon/admin/kdamonds/0";
    put(k / "state", state);
    put(k / "contexts/0/operations", "paddr");
    put(k / "contexts/0/monitoring_attrs/intervals/aggr_us", "5000000");
    put(k / "contexts/0/schemes/0/action", action);
    put(k / "contexts/0/schemes/0/access_pattern/age/min", "12");
    return k;
}

}  // namespace

TEST(MachineReclaim, APageoutSchemeIsReportedWithItsIdleAge) {
    TempDir d;
    kdamond(d.path(), "on", "pageout");
    EXPECT_EQ(proactive_reclaim(d.path()), "DAMON pageout (paddr) of memory idle for 60 s or more");
}

TEST(MachineReclaim, NoneWhenOffOtherActionsOrNoDamon) {
    TempDir off, other, none;
    kdamond(off.path(), "off", "pageout");
    kdamond(other.path(), "on", "stat");
    EXPECT_EQ(proactive_reclaim(off.path()), "");
    EXPECT_EQ(proactive_reclaim(other.path()), "");
    EXPECT_EQ(proactive_reclaim(none.path()), "");
}

TEST(MachineReclaim, TheMachineFileKeepsIt) {
    MachineBench m;
    m.cpu = "c";
    m.roofs.push_back({1, 10, 20, {}});
    m.reclaim = "DAMON pageout (paddr) of memory idle for 60 s or more";
    EXPECT_EQ(MachineBench::from_json(m.to_json()).reclaim, m.reclaim);
    m.reclaim.clear();
    EXPECT_FALSE(m.to_json().contains("reclaim"));
}

// The int8 roof measures multiplies, not the adds beside them: its two multiplies a step run
// on fewer ports than an add (AMD Zen 2-4, Intel since Haswell: at most 2 vector multiplies a
// cycle against 3-4 adds), so it cannot reach the rate of the same loop with adds alone. It
// did, at 3.0x its real rate (0.91 against 0.30 on a Zen 4), while the compiler hoisted the multiplies out of the loop.
TEST(MachineRoofs, TheInt8RoofCountsMultipliesNotAdds) {
    const double ratio = int8_avx2_over_adds(true);
    if (std::isnan(ratio)) GTEST_SKIP() << "no AVX2 on this CPU: the AVX2 int8 roof is not measured here";
    std::cout << "int8 (maddubs + madd + add) over adds alone: " << ratio << "\n";
    EXPECT_GT(ratio, 0.0);
    EXPECT_LT(ratio, 0.75);
}

// bench-machine times llama.cpp's own decode MatMul kernel (ggml_kernel_roof, the pinned build):
// each weight type at each thread count, the weights where llama.cpp loads them — q4_0 repacked
// (CPU_REPACK) on x86-64 with AVX2, as llama_model_loader places it; f16 in the CPU's own buffer.
// The rates survive machine.json; a tool that cannot run leaves the synthetic roofs and says why.
TEST(MachineRoofs, BenchMachineTimesLlamaCppsOwnKernels) {
    const MachineBench m = MachineBench::run({1}, true, PROFINFER_KERNEL_ROOF_TOOL);
    ASSERT_EQ(m.roofs.size(), 1u);
    EXPECT_EQ(m.kernels.rfind("ggml_kernel_roof (llama.cpp ", 0), 0u) << m.kernels;
    for (const char* type : {"q4_0", "q8_0", "f16"}) {
        ASSERT_TRUE(m.roofs[0].kernels.count(type)) << type;
        const KernelRoof& k = m.roofs[0].kernels.at(type);
        std::cout << type << " (" << k.buffer << "): " << k.cache_gops << " G ops/s in cache, " << k.stream_gbs << " GB/s streamed\n";
        EXPECT_GT(k.stream_gbs, 0) << type;
        EXPECT_GT(k.cache_gops, 0) << type;
        EXPECT_TRUE(std::isfinite(k.stream_gbs) && std::isfinite(k.cache_gops)) << type;
    }
    EXPECT_EQ(m.roofs[0].kernels.at("f16").buffer, "CPU");
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) EXPECT_EQ(m.roofs[0].kernels.at("q4_0").buffer, "CPU_REPACK");
#endif
    const MachineBench back = MachineBench::from_json(m.to_json());
    EXPECT_EQ(back.kernels, m.kernels);
    EXPECT_EQ(back.roofs[0].kernels.at("q4_0").stream_gbs, m.roofs[0].kernels.at("q4_0").stream_gbs);
    EXPECT_EQ(back.roofs[0].kernels.at("q4_0").buffer, m.roofs[0].kernels.at("q4_0").buffer);

    const MachineBench none = MachineBench::run({1}, true, "/nonexistent/ggml_kernel_roof");
    EXPECT_TRUE(none.roofs[0].kernels.empty());
    EXPECT_EQ(none.kernels.rfind("not measured: no ggml_kernel_roof at /nonexistent", 0), 0u) << none.kernels;
    EXPECT_GT(none.roofs[0].triad_gbs, 0);
}
