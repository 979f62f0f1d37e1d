// Which operator a sampled function's code belongs to (--level op-sampled).
#include <gtest/gtest.h>

#include <map>

#include "profinfer/sampled_ops.h"
#include "profinfer/trace_tables.h"
#include "test_support.h"

using namespace profinfer;
using namespace profinfer::test;

TEST(SampledOps, FunctionsAreNamedByTheirOperator) {
    const std::string cpu = "libggml-cpu.so";
    EXPECT_EQ(op_of_sampled_function("ggml_vec_dot_q4_0_q8_0", cpu, false), "MUL_MAT");
    // The f16 helpers: an f16 MUL_MAT's, or flash attention's where its own code was sampled.
    EXPECT_EQ(op_of_sampled_function("ggml_vec_dot_f16", cpu, false), "MUL_MAT");
    EXPECT_EQ(op_of_sampled_function("ggml_vec_dot_f16", cpu, false, true), "FLASH_ATTN_EXT");
    EXPECT_EQ(op_of_sampled_function("ggml_vec_mad_f16", cpu, false, true), "FLASH_ATTN_EXT");
    EXPECT_EQ(op_of_sampled_function("ggml_cpu_fp32_to_fp16", cpu, false, true), "FLASH_ATTN_EXT");
    EXPECT_EQ(op_of_sampled_function("ggml_vec_dot_q4_0_q8_0", cpu, false, true), "MUL_MAT");
    EXPECT_EQ(op_of_sampled_function("_Z28gemv_q4_b32_8x8_q8_0_lut_avxI5blockILi4ELi8EEEviPfmPKvS4_iiDv4_x.constprop.0", cpu,
                                     false),
              "MUL_MAT");
    EXPECT_EQ(op_of_sampled_function("_ZN12_GLOBAL__N_18tinyBLASILi16EDv16_fS1_ttfE9gemm_blocILi4ELi4EEEvll", cpu, false),
              "MUL_MAT");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_mul_mat_id", cpu, false), "MUL_MAT_ID");
    EXPECT_EQ(op_of_sampled_function("ggml_vec_soft_max_f32", cpu, false), "SOFT_MAX");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_rms_norm_mul_fused", cpu, false), "RMS_NORM");
    EXPECT_EQ(op_of_sampled_function("_Z29ggml_compute_forward_rope_fltIfEvPK19ggml_compute_paramsP11ggml_tensorb", cpu,
                                     false),
              "ROPE");
    EXPECT_EQ(op_of_sampled_function("_ZL30ggml_compute_forward_dup_bytesPK19ggml_compute_paramsP11ggml_tensor", cpu, false),
              "CONT");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_get_rows", cpu, false), "GET_ROWS");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_add_non_quantized", cpu, false), "ADD");
    EXPECT_EQ(op_of_sampled_function("ggml_vec_swiglu_f32", cpu, false), "SWIGLU");
    // The GLU family's kernels, as the recorder names their code inlined into the dispatch
    // from DWARF; the dispatch's own code (or all of it without DWARF) is the family's.
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_geglu_f32", cpu, false), "GEGLU");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_swiglu", cpu, false), "SWIGLU");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_glu", cpu, false), "GLU");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward_tanh", cpu, false), "TANH");
    EXPECT_EQ(op_of_sampled_function("ggml_barrier", cpu, false), "[barrier wait]");
    EXPECT_EQ(op_of_sampled_function("", "libgomp.so.1.0.0", false), "[barrier wait]");
    EXPECT_EQ(op_of_sampled_function("ggml_graph_compute_thread.isra.0", cpu, false), "[graph loop]");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward", cpu, false), "[graph loop]");
    EXPECT_EQ(op_of_sampled_function("anything", cpu, true), "[kernel]");
    EXPECT_EQ(op_of_sampled_function("llama_decode", "libllama.so", false), "[other]");
}

// A sample outside the code the trace names (libm's tanhf: no row of code_ranges holds it)
// counts for the caller the recorder found on its stack; with none it stays unnamed.
TEST(SampledOps, ASampleOutsideTheNamedCodeCountsForItsCaller) {
    TempDir d;
    const auto p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        store::TraceTables t(db);
        t.begin();
        t.add(store::CodeRangeRow{0x1000, 0x2000, "libggml-cpu.so", "ggml_compute_forward_tanh"});
        t.add(store::CodeRangeRow{0x2000, 0x3000, "libggml-cpu.so", "ggml_vec_dot_q4_0_q8_0"});
        t.add(store::CpuSampleRow{1, 11, 0, 1, 0x2100});            // in a MatMul kernel
        t.add(store::CpuSampleRow{2, 11, 0, 1, 0x1100});            // in TANH's own code
        t.add(store::CpuSampleRow{3, 11, 0, 1, 0x90000, 0x1200});   // in libm, called by TANH
        t.add(store::CpuSampleRow{4, 11, 0, 1, 0x90008, 0x1204});
        t.add(store::CpuSampleRow{5, 11, 0, 1, 0x90010});           // in libm, no caller found
        // ggml's GLU dispatch, and the one GLU kernel inlined into it that was sampled
        t.add(store::CodeRangeRow{0x3000, 0x3100, "libggml-cpu.so", "ggml_compute_forward_glu"});
        t.add(store::CodeRangeRow{0x3100, 0x3200, "libggml-cpu.so", "ggml_compute_forward_geglu_f32"});
        t.add(store::CpuSampleRow{6, 11, 0, 1, 0x3010});
        t.add(store::CpuSampleRow{7, 11, 0, 1, 0x3110});
        t.commit();
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    std::map<std::string, int64_t> by_op;
    for_each_sampled_function(db, [&](const SampledFunction& s) { by_op[s.op] += s.samples; });
    EXPECT_EQ(by_op["TANH"], 3);
    EXPECT_EQ(by_op["MUL_MAT"], 1);
    EXPECT_EQ(by_op["[other]"], 1);
    EXPECT_EQ(by_op["GEGLU"], 2);  // the dispatch's sample counts for the one GLU kernel sampled
    EXPECT_EQ(by_op.count("GLU"), 0u);
}
