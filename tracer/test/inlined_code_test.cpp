// Code the compiler inlined, found from DWARF (what names an op's kernel inlined into ggml's
// dispatch at --level op-sampled).
#include <gtest/gtest.h>

#include "elf_symbols.h"
#include "inlined_code.h"

using namespace profinfer;

namespace {
// A kernel like ggml's, inlined into the function that dispatches to it.
__attribute__((always_inline)) inline int ggml_compute_forward_testop_f32(volatile int* x) {
    int s = 0;
    for (int i = 0; i < *x; ++i) s += x[1] * i;
    return s;
}
}  // namespace

extern "C" __attribute__((noinline)) int profinfer_test_dispatch(volatile int* x) {
    return ggml_compute_forward_testop_f32(x) + 1;
}

TEST(InlinedCode, AnInlinedKernelLiesInsideTheFunctionItWasInlinedInto) {
    volatile int x[2] = {3, 2};
    EXPECT_EQ(profinfer_test_dispatch(x), 7);
    const auto found = inlined_ranges("/proc/self/exe", "ggml_compute_forward_testop");
    ASSERT_FALSE(found.empty()) << "no DWARF inline entry: is the test built with -g?";
    const ElfSymbols sym("/proc/self/exe");
    const uint64_t at = sym.file_offset("profinfer_test_dispatch"), size = sym.function_size("profinfer_test_dispatch");
    ASSERT_GT(size, 0u);
    for (const auto& r : found) {
        EXPECT_EQ(r.function, "ggml_compute_forward_testop_f32");
        EXPECT_EQ(r.depth, 1);
        EXPECT_LT(r.lo, r.hi);
        EXPECT_GE(r.lo, at);
        EXPECT_LE(r.hi, at + size);
    }
    EXPECT_TRUE(inlined_ranges("/proc/self/exe", "ggml_compute_forward_no_such_op").empty());
}
