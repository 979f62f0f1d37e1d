#include <gtest/gtest.h>

#include "profinfer/error.h"
#include "struct_layout.h"
#include "test_support.h"

using namespace profinfer;

// The built-in table (used for binaries without DWARF) must describe the pinned
// llama.cpp exactly as its debug-info build's DWARF does.
TEST(StructLayout, BuiltinTableMatchesTheDebugBuildsDwarf) {
    const auto& li = test::llama_debug();
    auto dwarf = GgmlLayout::from_dwarf({li.libggml_base, li.libggml_cpu.at(0), li.libllama});
    auto builtin = GgmlLayout::builtin();
    const auto &a = dwarf.offsets, &b = builtin.offsets;
    EXPECT_EQ(a.tensor_type, b.tensor_type);
    EXPECT_EQ(a.tensor_ne, b.tensor_ne);
    EXPECT_EQ(a.tensor_nb, b.tensor_nb);
    EXPECT_EQ(a.tensor_op, b.tensor_op);
    EXPECT_EQ(a.tensor_op_params, b.tensor_op_params);
    EXPECT_EQ(a.tensor_flags, b.tensor_flags);
    EXPECT_EQ(a.tensor_src, b.tensor_src);
    EXPECT_EQ(a.tensor_data, b.tensor_data);
    EXPECT_EQ(a.tensor_view_src, b.tensor_view_src);
    EXPECT_EQ(a.tensor_name, b.tensor_name);
    EXPECT_EQ(a.params_ith, b.params_ith);
    EXPECT_EQ(a.params_nth, b.params_nth);
    EXPECT_EQ(a.cgraph_n_nodes, b.cgraph_n_nodes);
    EXPECT_EQ(a.cgraph_nodes, b.cgraph_nodes);
    EXPECT_EQ(a.cgraph_uid, b.cgraph_uid);
    EXPECT_EQ(a.backend_guid, b.backend_guid);
    EXPECT_EQ(a.batch_n_tokens, b.batch_n_tokens);
    EXPECT_EQ(a.batch_pos, b.batch_pos);
    EXPECT_EQ(a.batch_seq_id, b.batch_seq_id);
    EXPECT_EQ(a.batch_logits, b.batch_logits);
    EXPECT_EQ(a.op_mul_mat_id, b.op_mul_mat_id);
    EXPECT_EQ(dwarf.op_names, builtin.op_names);
    EXPECT_EQ(dwarf.unary_op_names, builtin.unary_op_names);
    EXPECT_EQ(dwarf.glu_op_names, builtin.glu_op_names);
    EXPECT_NE(dwarf.source.find("DWARF"), std::string::npos);
}

TEST(StructLayout, OpNamesResolveSubOps) {
    auto l = GgmlLayout::builtin();
    uint32_t unary = 0;
    while (unary < l.op_names.size() && l.op_names[unary] != "UNARY") ++unary;
    ASSERT_LT(unary, l.op_names.size());
    uint32_t tanh = 0;
    while (tanh < l.unary_op_names.size() && l.unary_op_names[tanh] != "TANH") ++tanh;
    EXPECT_EQ(l.op_name(unary, int32_t(tanh)), "TANH");
    EXPECT_EQ(l.op_name(uint32_t(l.op_names.size())), "");  // out of range: layout is wrong
    EXPECT_EQ(l.op_name(l.offsets.op_mul_mat_id), "MUL_MAT_ID");
}

TEST(StructLayout, DwarflessLibrariesAreRefused) {
    namespace fs = std::filesystem;
    fs::path rel = PINNED_RELEASE_LIB_DIR;
    EXPECT_THROW(GgmlLayout::from_dwarf({rel / "libggml-base.so", rel / "libggml-cpu-haswell.so"}), Error);
}
