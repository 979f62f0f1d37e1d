// ProfStat tables on a full-level recording of the tiny MoE model.
#include <gtest/gtest.h>

#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {
fs::path moe_recording() { return tiny_recording("qwen1.5-moe-a2.7b", "full", 12); }
double num(const nlohmann::json& v) { return v.is_null() ? 0.0 : v.get<double>(); }
}  // namespace

TEST(Stats, ByTokenOneRowPerCallWithConsistentTimes) {
    PROFINFER_REQUIRE_BPF();
    auto t = stats_table(moe_recording(), "token").to_json();
    ASSERT_EQ(t.size(), 12u);
    EXPECT_EQ(t[0]["phase"], "prefill");
    for (const auto& r : t) {
        EXPECT_GT(num(r["op_ms"]), 0);
        EXPECT_LE(num(r["op_ms"]), num(r["ms"]) * 1.001);
        EXPECT_LE(num(r["mul_mat_ms"]), num(r["op_ms"]) * 1.001);
    }
}

TEST(Stats, ByOpTypeSharesAddUpAndMatMulsAreThere) {
    PROFINFER_REQUIRE_BPF();
    auto t = stats_table(moe_recording(), "op-type").to_json();
    double share = 0;
    bool mm_id = false;
    for (const auto& r : t) share += num(r["share_pct"]), mm_id |= r["op"] == "MUL_MAT_ID";
    EXPECT_NEAR(share, 100.0, 0.01);
    EXPECT_TRUE(mm_id);
}

TEST(Stats, ByThreadSplitsComputeAndWait) {
    PROFINFER_REQUIRE_BPF();
    auto t = stats_table(moe_recording(), "thread").to_json();
    double wait = 0, compute = 0;
    for (const auto& r : t) wait += num(r["wait_ms"]), compute += num(r["compute_ms"]);
    EXPECT_GT(wait, 0);
    EXPECT_GT(compute, 0);
}

TEST(Stats, ByExpertCountsEveryActivation) {
    PROFINFER_REQUIRE_BPF();
    auto t = stats_table(moe_recording(), "expert").to_json();
    ASSERT_FALSE(t.empty());
    int64_t activations = 0;
    for (const auto& r : t) {
        EXPECT_GE(r["expert"].get<int>(), 0);
        EXPECT_LT(r["expert"].get<int>(), 8);
        activations += r["activations"].get<int64_t>();
    }
    // (call, layer, node, expert) activations, distinct per call: at least k per decode call,
    // layer and node, at most all 8 experts.
    store::Database db(moe_recording(), store::Database::Mode::ReadOnly);
    const int64_t decode_calls = db.scalar("SELECT count(*) FROM tokens");
    EXPECT_GE(activations, decode_calls * 2 * 3 * 2);
    EXPECT_LE(activations, decode_calls * 2 * 3 * 8);
}

TEST(Stats, FormatsAndErrors) {
    PROFINFER_REQUIRE_BPF();
    auto csv = run({profinfer_bin(), "stat", moe_recording(), "--by", "op", "--format", "csv"});
    ASSERT_EQ(csv.status, 0) << csv.err;
    EXPECT_EQ(csv.out.rfind("name,op,count,total_ms,mean_ms,share_pct\n", 0), 0u) << csv.out;
    auto json = run({profinfer_bin(), "stat", moe_recording(), "--by", "thread", "--format", "json"});
    ASSERT_EQ(json.status, 0) << json.err;
    EXPECT_TRUE(nlohmann::json::parse(json.out).is_array());
    auto bad = run({profinfer_bin(), "stat", "/no/such.db"});
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find("no such trace database"), std::string::npos) << bad.err;
}
