// Every tiny synthetic model loads in the pinned llama.cpp, generates, and computes
// the operator graph its architecture should have. The graph is read through
// llama.cpp's own eval callback (tests/programs/llama_graph_dump), independently of
// profinfer's tracer.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "test_support.h"

using namespace profinfer::test;

namespace {

struct Node {
    std::string name, op, src0, src1;
};

// The nodes of the prompt's graph (call 0), flash attention off as in the paper.
std::vector<Node> computed_graph(const std::string& model) {
    auto r = run({graph_dump_bin(), model, "Hi", "1"});
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<Node> g;
    for (const auto& n : parse_graph_dump(r.out))
        g.push_back({n.name, n.op, n.src.size() > 0 ? n.src[0] : "", n.src.size() > 1 ? n.src[1] : ""});
    return g;
}

int count(const std::vector<Node>& g, const std::string& op) {
    int n = 0;
    for (const auto& x : g) n += x.op == op;
    return n;
}

// The ADD that adds BIAS to the output of the MUL_MAT by WEIGHT.
bool bias_add_after_matmul(const std::vector<Node>& g, const std::string& weight, const std::string& bias) {
    for (size_t i = 0; i < g.size(); ++i) {
        if (g[i].op != "MUL_MAT" || g[i].src0 != weight) continue;
        for (size_t j = i + 1; j < g.size(); ++j)
            if (g[j].op == "ADD" && g[j].src0 == g[i].name && g[j].src1 == bias) return true;
    }
    return false;
}

struct Arch {
    const char* card;
    int layers;
};

class TinyModel : public ::testing::TestWithParam<Arch> {};

}  // namespace

TEST_P(TinyModel, GeneratesSixteenTokens) {
    auto model = tiny_model(GetParam().card);
    auto r = run({llama_debug().program("llama-simple"), "-m", model, "-n", "16", "Hello world"});
    ASSERT_EQ(r.status, 0) << r.err;
    // llama-simple prints "eval time = X ms / 15 runs": the prompt call gives token 1.
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(eval time =.*/\s+15 runs)"))) << r.err;
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(decoded 16 tokens)"))) << r.err;
}

TEST_P(TinyModel, GraphHasTheArchitecturesOperators) {
    const auto arch = GetParam();
    auto g = computed_graph(tiny_model(arch.card));
    ASSERT_GT(g.size(), 20u);
    const int L = arch.layers;
    const std::string card = arch.card;
    EXPECT_GE(count(g, "GET_ROWS"), 1);
    // KQ and KQV per layer (flash attention off), plus the projections.
    EXPECT_GE(count(g, "MUL_MAT"), 6 * L);
    const bool moe = card == "qwen1.5-moe-a2.7b";
    EXPECT_EQ(count(g, "SOFT_MAX"), moe ? 2 * L : L);  // attention, plus the MoE router
    bool biases = bias_add_after_matmul(g, "blk.0.attn_q.weight", "blk.0.attn_q.bias") &&
                  bias_add_after_matmul(g, "blk.0.attn_k.weight", "blk.0.attn_k.bias") &&
                  bias_add_after_matmul(g, "blk.0.attn_v.weight", "blk.0.attn_v.bias");
    if (card == "qwen2.5-1.5b" || card == "qwen1.5-moe-a2.7b")
        EXPECT_TRUE(biases) << "no bias ADD after the Q/K/V MUL_MATs";
    else
        EXPECT_FALSE(biases);
    if (moe) {
        EXPECT_EQ(count(g, "MUL_MAT_ID"), 3 * L);  // gate, up, down experts per layer
    } else {
        EXPECT_EQ(count(g, "MUL_MAT_ID"), 0);
    }
    if (card == "gemma2-2b") {
        // attention soft-capping per layer, final logit soft-capping, and 4 norms per layer
        EXPECT_EQ(count(g, "TANH"), L + 1);
        EXPECT_EQ(count(g, "RMS_NORM"), 4 * L + 1);
    } else {
        EXPECT_EQ(count(g, "TANH"), 0);
        EXPECT_EQ(count(g, "RMS_NORM"), 2 * L + 1);
    }
}

INSTANTIATE_TEST_SUITE_P(Architectures, TinyModel,
                         ::testing::Values(Arch{"llama3.2-1b", 2}, Arch{"qwen2.5-1.5b", 2}, Arch{"gemma2-2b", 2},
                                           Arch{"qwen1.5-moe-a2.7b", 2}),
                         [](const auto& info) {
                             std::string n = info.param.card;
                             for (auto& c : n)
                                 if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                             return n;
                         });

class TinyLlamaType : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyLlamaType, LoadsAndGenerates) {
    auto model = tiny_model("llama3.2-1b", GetParam());
    auto r = run({llama_debug().program("llama-simple"), "-m", model, "-n", "4", "Hello"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(decoded 4 tokens)"))) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Types, TinyLlamaType, ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"));
