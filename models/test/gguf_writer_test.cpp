#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "profinfer/gguf_writer.h"
#include "profinfer/error.h"
#include "profinfer/synth.h"

using namespace profinfer;
using gguf::TensorType;

namespace {

// An independent minimal GGUF header reader, so the writer is checked against the
// format rather than against itself.
struct ParsedHeader {
    uint32_t magic = 0, version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    std::map<std::string, std::string> strings;
    std::map<std::string, uint64_t> uints;
    std::map<std::string, uint64_t> array_sizes;
    struct Tensor {
        std::vector<uint64_t> ne;
        uint32_t type;
        uint64_t offset;
    };
    std::map<std::string, Tensor> tensors;
    size_t end = 0;  // bytes consumed by the header proper (before padding)
};

ParsedHeader parse(const std::vector<uint8_t>& b) {
    ParsedHeader h;
    size_t p = 0;
    auto rd = [&](auto& v) {
        if (p + sizeof v > b.size()) throw std::runtime_error("header truncated");
        std::memcpy(&v, b.data() + p, sizeof v);
        p += sizeof v;
    };
    auto str = [&] {
        uint64_t n;
        rd(n);
        std::string s(reinterpret_cast<const char*>(b.data() + p), n);
        p += n;
        return s;
    };
    auto skip_scalar = [&](uint32_t t) {
        static const std::map<uint32_t, size_t> sz = {{0, 1}, {1, 1}, {2, 2}, {3, 2}, {4, 4}, {5, 4},
                                                      {6, 4}, {7, 1}, {10, 8}, {11, 8}, {12, 8}};
        if (t == 8) return (void)str();
        p += sz.at(t);
    };
    rd(h.magic), rd(h.version), rd(h.n_tensors), rd(h.n_kv);
    for (uint64_t i = 0; i < h.n_kv; ++i) {
        std::string key = str();
        uint32_t t;
        rd(t);
        if (t == 8) {
            h.strings[key] = str();
        } else if (t == 4) {
            uint32_t v;
            rd(v);
            h.uints[key] = v;
        } else if (t == 9) {
            uint32_t et;
            uint64_t n;
            rd(et), rd(n);
            h.array_sizes[key] = n;
            for (uint64_t k = 0; k < n; ++k) skip_scalar(et);
        } else {
            skip_scalar(t);
        }
    }
    for (uint64_t i = 0; i < h.n_tensors; ++i) {
        std::string name = str();
        uint32_t nd;
        rd(nd);
        ParsedHeader::Tensor t;
        t.ne.resize(nd);
        for (auto& d : t.ne) rd(d);
        rd(t.type), rd(t.offset);
        h.tensors[name] = t;
    }
    h.end = p;
    return h;
}

ModelCard tiny_card(const std::string& name) { return ModelCard::load(name, ModelCard::Scale::Tiny); }

}  // namespace

TEST(GgufLayout, HeaderFollowsTheFormat) {
    gguf::Layout g;
    g.set("general.architecture", std::string("llama"));
    g.set("llama.block_count", uint32_t{7});
    g.set("tokenizer.ggml.tokens", gguf::StringArray{"a", "bb", "ccc"});
    g.add_tensor("a", {64, 3}, TensorType::Q4_0);
    g.add_tensor("b", {5}, TensorType::F32);
    g.add_tensor("c", {32, 2}, TensorType::Q8_0);
    auto bytes = g.header();
    auto h = parse(bytes);
    EXPECT_EQ(h.magic, 0x46554747u);
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.n_tensors, 3u);
    EXPECT_EQ(h.n_kv, 4u);  // + general.alignment
    EXPECT_EQ(h.strings["general.architecture"], "llama");
    EXPECT_EQ(h.uints["llama.block_count"], 7u);
    EXPECT_EQ(h.uints["general.alignment"], 32u);
    EXPECT_EQ(h.array_sizes["tokenizer.ggml.tokens"], 3u);
    EXPECT_EQ(bytes.size() % 32, 0u);
    EXPECT_GE(bytes.size(), h.end);
    EXPECT_LT(bytes.size() - h.end, 32u);
    // q4_0: 18 bytes per 32 elements; offsets aligned to 32.
    EXPECT_EQ(h.tensors["a"].type, 2u);
    EXPECT_EQ(h.tensors["a"].offset, 0u);
    EXPECT_EQ(g.tensors()[0].bytes(), 64u * 3 / 32 * 18);
    EXPECT_EQ(h.tensors["b"].offset, 128u);  // 108 padded to 128
    EXPECT_EQ(h.tensors["c"].offset, 128u + 32u);
    EXPECT_EQ(h.tensors["c"].type, 8u);
    EXPECT_EQ(g.data_bytes(), 128u + 32u + 2 * 34 + 28);
}

TEST(GgufLayout, RejectsRowsThatAreNotWholeBlocks) {
    gguf::Layout g;
    EXPECT_THROW(g.add_tensor("x", {48, 2}, TensorType::Q8_0), Error);
}

TEST(GgufLayout, ParseTypeNamesTheAcceptedTypes) {
    EXPECT_EQ(gguf::parse_type("q4_0"), TensorType::Q4_0);
    try {
        gguf::parse_type("q5_k");
        FAIL() << "q5_k accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
    }
}

TEST(ModelLayout, DenseLlamaHasTheRealTensorSet) {
    auto card = ModelCard::load("llama3.2-1b", ModelCard::Scale::Full);
    auto h = parse(model_layout(card, TensorType::F16).header());
    EXPECT_EQ(h.strings["general.architecture"], "llama");
    EXPECT_EQ(h.uints["llama.embedding_length"], 2048u);
    EXPECT_EQ(h.array_sizes["tokenizer.ggml.tokens"], 128256u);
    EXPECT_EQ(h.n_tensors, 2u + 9u * 16);  // tied embeddings: no output.weight
    EXPECT_FALSE(h.tensors.count("output.weight"));
    EXPECT_EQ(h.tensors["blk.15.attn_k.weight"].ne, (std::vector<uint64_t>{2048, 512}));
    EXPECT_EQ(h.tensors["blk.0.ffn_down.weight"].ne, (std::vector<uint64_t>{8192, 2048}));
    EXPECT_EQ(h.tensors["blk.0.attn_norm.weight"].type, 0u);  // norms stay f32
    EXPECT_EQ(h.tensors["blk.0.attn_q.weight"].type, 1u);
}

TEST(ModelLayout, ArchitectureSpecificTensors) {
    auto qwen = parse(model_layout(tiny_card("qwen2.5-1.5b"), TensorType::Q8_0).header());
    EXPECT_TRUE(qwen.tensors.count("blk.1.attn_v.bias"));
    auto gemma = parse(model_layout(tiny_card("gemma2-2b"), TensorType::F16).header());
    EXPECT_TRUE(gemma.tensors.count("blk.0.post_ffw_norm.weight"));
    EXPECT_TRUE(gemma.tensors.count("blk.0.post_attention_norm.weight"));
    EXPECT_EQ(gemma.tensors["blk.0.attn_output.weight"].ne, (std::vector<uint64_t>{128, 64}));
    auto moe = parse(model_layout(ModelCard::load("qwen1.5-moe-a2.7b", ModelCard::Scale::Full), TensorType::Q4_0).header());
    EXPECT_EQ(moe.uints["qwen2moe.expert_count"], 60u);
    EXPECT_EQ(moe.uints["qwen2moe.expert_used_count"], 4u);
    EXPECT_EQ(moe.tensors["blk.3.ffn_up_exps.weight"].ne, (std::vector<uint64_t>{2048, 1408, 60}));
    EXPECT_EQ(moe.tensors["blk.3.ffn_gate_inp.weight"].type, 0u);  // router stays f32
    EXPECT_TRUE(moe.tensors.count("output.weight"));
}
