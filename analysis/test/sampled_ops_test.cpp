// Which operator a sampled function's code belongs to (--level op-sampled).
#include <gtest/gtest.h>

#include "profinfer/sampled_ops.h"

using namespace profinfer;

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
    EXPECT_EQ(op_of_sampled_function("ggml_barrier", cpu, false), "[barrier wait]");
    EXPECT_EQ(op_of_sampled_function("", "libgomp.so.1.0.0", false), "[barrier wait]");
    EXPECT_EQ(op_of_sampled_function("ggml_graph_compute_thread.isra.0", cpu, false), "[graph loop]");
    EXPECT_EQ(op_of_sampled_function("ggml_compute_forward", cpu, false), "[graph loop]");
    EXPECT_EQ(op_of_sampled_function("anything", cpu, true), "[kernel]");
    EXPECT_EQ(op_of_sampled_function("llama_decode", "libllama.so", false), "[other]");
}
