// ggml-vulkan's GGML_VK_PERF_LOGGER output read back: lines as the stock library of the
// pinned commit prints them (captured from its llama-bench on lavapipe, a tiny model).
#include <gtest/gtest.h>

#include <sstream>

#include "profinfer/vulkan_timings.h"

using namespace profinfer;

namespace {

const char* kTwoGraphs =
    "llama_context: n_ctx = 256\n"
    "----------------\n"
    "Vulkan Timings:\n"
    "ADD: 1 x 80.102 us = 80.102 us\n"
    "FLASH_ATTN_EXT dst(16,4,1,1),  q(16,1,4,1),  k(16,256,2,1),  v(16,256,2,1),  m(256,1,1,1): 2 x 686.367 us = 1372.73 us (0.0954824 GFLOPS/s)\n"
    "MUL_MAT_ADD MUL_MAT_VEC q4_0 m=64 n=1 k=128: 2 x 196.797 us = 393.594 us (0.0829281 GFLOPS/s)\n"
    "MUL_MAT_VEC q4_0 m=128 n=1 k=64: 4 x 259.255 us = 1037.02 us (0.0627026 GFLOPS/s)\n"
    "RMS_NORM_MUL RMS_NORM(64,1,1,1): 5 x 5849.42 us = 29247.1 us\n"
    "Total time: 32130.5 us.\n"
    "MUL_MAT_VEC q4_0 m=128 n=1 k=64: 9 x 1 us = 9 us\n"  // outside a block: not the logger's
    "----------------\n"
    "Vulkan Timings:\n"
    "MUL_MAT_VEC q4_0 m=128 n=1 k=64: 4 x 250 us = 1000 us (0.06 GFLOPS/s)\n"
    "MUL_MAT f16 m=256 n=1 k=16 batch=4: 2 x 50 us = 100 us\n"
    "Total time: 1100 us.\n";

const VulkanOpTiming* find(const std::vector<VulkanOpTiming>& v, const std::string& name) {
    for (const auto& t : v)
        if (t.name == name) return &t;
    return nullptr;
}

}  // namespace

TEST(VulkanTimings, SumsEveryBlockPerNameAndReadsMatMulShapes) {
    std::istringstream in(kTwoGraphs);
    const auto t = parse_vulkan_timings(in);
    ASSERT_EQ(t.size(), 6u);
    const auto* vec = find(t, "MUL_MAT_VEC q4_0 m=128 n=1 k=64");
    ASSERT_NE(vec, nullptr);
    EXPECT_EQ(vec->count, 8);                 // 4 + 4: the line outside a block is not counted
    EXPECT_DOUBLE_EQ(vec->total_us, 2037.02);
    EXPECT_NEAR(vec->mean_us(), 254.6275, 1e-9);
    EXPECT_EQ(vec->op, "MUL_MAT_VEC");
    EXPECT_EQ(vec->type, "q4_0");
    EXPECT_EQ(vec->m, 128);
    EXPECT_EQ(vec->n, 1);
    EXPECT_EQ(vec->k, 64);
    EXPECT_TRUE(vec->fused.empty());
    EXPECT_FALSE(vec->batched);
    const auto* fused = find(t, "MUL_MAT_ADD MUL_MAT_VEC q4_0 m=64 n=1 k=128");
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(fused->fused, "MUL_MAT_ADD");
    EXPECT_EQ(fused->op, "MUL_MAT_VEC");
    EXPECT_EQ(fused->m, 64);
    EXPECT_EQ(fused->k, 128);
    const auto* kq = find(t, "MUL_MAT f16 m=256 n=1 k=16 batch=4");
    ASSERT_NE(kq, nullptr);
    EXPECT_TRUE(kq->batched);
    const auto* fa = find(t, "FLASH_ATTN_EXT dst(16,4,1,1),  q(16,1,4,1),  k(16,256,2,1),  v(16,256,2,1),  m(256,1,1,1)");
    ASSERT_NE(fa, nullptr);
    EXPECT_EQ(fa->op, "FLASH_ATTN_EXT");
    EXPECT_EQ(fa->m, 0);
    EXPECT_EQ(fa->count, 2);
}

TEST(VulkanTimings, FileSitsBesideTheTrace) {
    EXPECT_EQ(vulkan_timings_file("points/a-r3.db"), "points/a-r3.vulkan-timings.txt");
}
