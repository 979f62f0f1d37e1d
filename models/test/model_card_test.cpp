#include <gtest/gtest.h>

#include <fstream>

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "test_support.h"

using namespace profinfer;

TEST(ModelCard, PaperModelsCarryThePublicHyperparameters) {
    struct Want {
        const char* card;
        const char* arch;
        uint32_t hidden, layers, heads, kv, head_dim, ffn, vocab;
    };
    const Want want[] = {
        {"llama3.2-1b", "llama", 2048, 16, 32, 8, 64, 8192, 128256},
        {"qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 128, 8960, 151936},
        {"gemma2-2b", "gemma2", 2304, 26, 8, 4, 256, 9216, 256000},
        {"qwen1.5-moe-a2.7b", "qwen2moe", 2048, 24, 16, 16, 128, 5632, 151936},
    };
    for (const auto& w : want) {
        SCOPED_TRACE(w.card);
        auto c = ModelCard::load(w.card, ModelCard::Scale::Full);
        EXPECT_EQ(c.arch, w.arch);
        EXPECT_EQ(c.hidden, w.hidden);
        EXPECT_EQ(c.layers, w.layers);
        EXPECT_EQ(c.heads, w.heads);
        EXPECT_EQ(c.kv_heads, w.kv);
        EXPECT_EQ(c.head_dim, w.head_dim);
        EXPECT_EQ(c.ffn, w.ffn);
        EXPECT_EQ(c.vocab, w.vocab);
    }
    auto moe = ModelCard::load("qwen1.5-moe-a2.7b", ModelCard::Scale::Full);
    EXPECT_EQ(moe.experts, 60u);
    EXPECT_EQ(moe.experts_used, 4u);
    EXPECT_EQ(moe.expert_ffn, 1408u);
    EXPECT_EQ(moe.shared_expert_ffn, 5632u);
    EXPECT_TRUE(ModelCard::load("qwen2.5-1.5b", ModelCard::Scale::Full).qkv_bias);
    EXPECT_GT(ModelCard::load("gemma2-2b", ModelCard::Scale::Full).final_softcap, 0.0f);
}

TEST(ModelCard, TinyOverridesOnlyWhatItNames) {
    auto full = ModelCard::load("gemma2-2b", ModelCard::Scale::Full);
    auto tiny = ModelCard::load("gemma2-2b", ModelCard::Scale::Tiny);
    EXPECT_EQ(tiny.arch, "gemma2");
    EXPECT_EQ(tiny.hidden, 64u);
    EXPECT_EQ(tiny.attn_softcap, full.attn_softcap);
    EXPECT_EQ(tiny.final_softcap, full.final_softcap);
}

namespace {
std::string error_of(const std::string& text) {
    test::TempDir d;
    auto p = d / "card.toml";
    std::ofstream(p) << text;
    try {
        ModelCard::load(p, ModelCard::Scale::Full);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
const char* kValid = "name='x'\narch='llama'\nhidden=64\nlayers=1\nheads=4\nkv_heads=2\nhead_dim=16\nffn=128\nvocab=300\n";
}  // namespace

TEST(ModelCard, BadCardsGiveAnErrorNamingTheProblem) {
    EXPECT_EQ(error_of(kValid), "");
    EXPECT_NE(error_of("name = 'x'\narch = \n").find("malformed card"), std::string::npos);
    EXPECT_NE(error_of(std::string(kValid) + "arch='mamba'\n").find("malformed"), std::string::npos);  // duplicate key
    std::string unknown = kValid;
    unknown.replace(unknown.find("llama"), 5, "mamba");
    EXPECT_NE(error_of(unknown).find("unknown architecture 'mamba'"), std::string::npos);
    std::string missing = kValid;
    missing.erase(missing.find("hidden=64\n"), 10);
    EXPECT_NE(error_of(missing).find("missing required key 'hidden'"), std::string::npos);
    std::string wrong = kValid;
    wrong.replace(wrong.find("heads=4"), 7, "heads='four'");
    EXPECT_NE(error_of(wrong).find("'heads' has the wrong type"), std::string::npos);
    std::string moe = kValid;
    moe.replace(moe.find("llama"), 5, "qwen2moe");
    EXPECT_NE(error_of(moe).find("missing required key 'experts'"), std::string::npos);
    EXPECT_THROW(ModelCard::load("no-such-card", ModelCard::Scale::Full), Error);
}

TEST(ModelCard, ScaleNamesRoundTripAndAnUnknownOneIsRefused) {
    for (auto s : {ModelCard::Scale::Full, ModelCard::Scale::Tiny})
        EXPECT_EQ(ModelCard::parse_scale(ModelCard::scale_name(s)), s);
    EXPECT_STREQ(ModelCard::scale_name(ModelCard::Scale::Tiny), "tiny");
    try {
        ModelCard::parse_scale("small");
        ADD_FAILURE() << "'small' was taken for a scale";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("known: full, tiny"), std::string::npos) << e.what();
    }
}
