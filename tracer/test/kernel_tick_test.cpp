// What op-sampled reads of the kernel to sample on its tick (kernel_tick.h).
#include <gtest/gtest.h>

#include "kernel_tick.h"

using namespace profinfer;

TEST(KernelTick, HzFromTheConfigLineAndNoOther) {
    EXPECT_EQ(config_hz("CONFIG_HZ_250=y\n# CONFIG_HZ_1000 is not set\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n"), 250u);
    EXPECT_EQ(config_hz("CONFIG_HZ_1000=y\nCONFIG_HZ=1000"), 1000u);
    EXPECT_EQ(config_hz("CONFIG_HZ_250=y\n# CONFIG_HZ is not set\n"), 0u);
    EXPECT_EQ(config_hz(""), 0u);
}

TEST(KernelTick, AddressOfTheExactNameInKallsyms) {
    const std::string k = "ffffffff81443700 t tick_nohz_handler_other\n"
                          "ffffffff814437d0 t tick_nohz_handler\n"
                          "0000000000000000 T tick_sched_timer\n";
    EXPECT_EQ(kallsyms_address(k, "tick_nohz_handler"), 0xffffffff814437d0ull);
    EXPECT_EQ(kallsyms_address(k, "tick_sched_timer"), 0u) << "hidden addresses (kptr_restrict) are no address";
    EXPECT_EQ(kallsyms_address(k, "update_process_times"), 0u);
}

// Whatever this kernel is, the answer is consistent: usable with a rate and a callback, or a
// reason why not.
TEST(KernelTick, UsableOrSaysWhyNot) {
    const KernelTick t = KernelTick::find();
    if (t.usable()) {
        EXPECT_GT(t.hz, 0u);
        EXPECT_NE(t.function, 0u);
    } else {
        EXPECT_FALSE(t.why_not.empty());
    }
}
