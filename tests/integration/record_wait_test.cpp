// --level full's compute/wait split. By default (--wait sampled) no probe is put on
// ggml_barrier: CPU-clock samples are classified by the thread's user IP (in barrier
// code or not). --wait both takes the exact barrier probes too, and every sample also
// says whether the probes had seen the thread enter a barrier in its node: on the same
// samples, the IP classification is checked against the probes' view.
#include <gtest/gtest.h>

#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

fs::path record_full(const TempDir& d, const std::vector<std::string>& wait, const std::string& tokens = "400") {
    std::vector<std::string> argv{profinfer_bin(), "record", "--level", "full", "-o", d / "run.db"};
    argv.insert(argv.end(), wait.begin(), wait.end());
    for (const std::string& a : {std::string("--"), graph_dump_bin().string(), tiny_model("llama3.2-1b").string(),
                                 std::string("Hello world"), tokens, std::string("2"), std::string("--no-callback")})
        argv.push_back(a);
    auto r = run(argv);
    EXPECT_EQ(r.status, 0) << r.err;
    return d / "run.db";
}

}  // namespace

TEST(RecordWait, SampledSplitTakesNoBarrierProbe) {
    PROFINFER_REQUIRE_BPF();
    // Enough samples to judge the split, however fast the machine decodes: 400 tokens held
    // 83 samples on a fast one (2000 a second on two threads), so the decode grows until 100.
    std::unique_ptr<TempDir> d;
    fs::path db_path;
    const std::string missing = grow_until_enough([&](int scale) -> std::string {
        d = std::make_unique<TempDir>();
        db_path = record_full(*d, {"--sample-hz", "2000"}, std::to_string(400 * scale));
        const int64_t n = scalar_or_zero(db_path, "SELECT coalesce(sum(samples), 0) FROM thread_parts");
        return n > 100 ? "" : std::to_string(n) + " of more than 100 samples from " + std::to_string(400 * scale) + " tokens";
    });
    ASSERT_EQ(missing, "");
    store::Database db(db_path, store::Database::Mode::ReadOnly);
    auto meta = db.meta();
    EXPECT_EQ(meta[store::MetaKey::WaitMethod], "sampled");
    EXPECT_GE(std::stoi(meta[store::MetaKey::WaitRanges]), 1) << "no barrier code found in the target";
    EXPECT_EQ(db.scalar("SELECT count(*) FROM probes WHERE symbol = 'ggml_barrier' AND attached = 1"), 0);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM ops WHERE barriers > 0"), 0);
    EXPECT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
    const int64_t samples = db.scalar("SELECT coalesce(sum(samples), 0) FROM thread_parts");
    const int64_t waits = db.scalar("SELECT coalesce(sum(wait_samples), 0) FROM thread_parts");
    ASSERT_GT(samples, 100);
    // Two threads on a tiny model meet at a barrier after every node: some samples find
    // one spinning, most do not find both.
    EXPECT_GT(waits, 0);
    EXPECT_LT(waits, samples);
    auto t = stats_table(*open_trace(db_path), "thread").to_json();
    ASSERT_FALSE(t.empty());
    for (const auto& r : t) {
        EXPECT_EQ(r["method"], "sampled") << r.dump();
        if (r["samples"].get<int64_t>() == 0) continue;
        const double share = r["sampled_wait_pct"].get<double>();
        EXPECT_NEAR(r["wait_share_pct"].get<double>(), share, 1e-9) << r.dump();
        EXPECT_LE(r["sampled_ci95_lo"].get<double>(), share + 1e-9) << r.dump();
        EXPECT_GE(r["sampled_ci95_hi"].get<double>(), share - 1e-9) << r.dump();
        EXPECT_NEAR(r["compute_ms"].get<double>() * share, r["wait_ms"].get<double>() * (100 - share),
                    1e-6 * (1 + r["compute_ms"].get<double>() + r["wait_ms"].get<double>()) * 100)
            << r.dump();
    }
}

// On the samples of thread parts with one barrier (the one that ends the node), "IP in
// barrier code" against "the probes saw the barrier entered": an IP in the barrier
// implies it was entered, so the IP count stays within the probes' count; the probes'
// count is higher by the samples between leaving the barrier and the next node (the
// graph loop's own code), a few per cent.
TEST(RecordWait, SampledSplitAgreesWithTheBarrierProbesOnTheSameSamples) {
    PROFINFER_REQUIRE_BPF();
    // A few hundred samples in one-barrier parts: with the barrier probe on an instruction the
    // kernel emulates (probe_site.h) 400 tokens take under a second; the decode grows until
    // there are 100 to compare.
    const std::string parts = "FROM thread_parts WHERE barriers = 1";
    std::unique_ptr<TempDir> d;
    fs::path db_path;
    const std::string missing = grow_until_enough([&](int scale) -> std::string {
        d = std::make_unique<TempDir>();
        db_path = record_full(*d, {"--wait", "both", "--sample-hz", "4000"}, std::to_string(1500 * scale));
        const int64_t n = scalar_or_zero(db_path, "SELECT coalesce(sum(samples), 0) " + parts);
        return n >= 100 ? "" : std::to_string(n) + " of 100 samples in one-barrier parts from " + std::to_string(1500 * scale) + " tokens";
    });
    ASSERT_EQ(missing, "") << "too few samples to compare";
    store::Database db(db_path, store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.meta()[store::MetaKey::WaitMethod], "both");
    store::Statement st(db.handle(),
                        ("SELECT sum(samples), sum(wait_samples), sum(barrier_state_samples) " + parts).c_str());
    ASSERT_TRUE(st.step());
    const double n = st.column_double(0), ip = st.column_double(1), state = st.column_double(2);
    ASSERT_GE(n, 100);
    EXPECT_LE(ip, state + 0.02 * n) << "IP-classified waits " << ip << " > barrier-state waits " << state << " of " << n;
    EXPECT_GE(ip, state - 0.20 * n) << "IP-classified waits " << ip << " << barrier-state waits " << state << " of " << n;
    RecordProperty("samples", std::to_string(int64_t(n)));
    RecordProperty("ip_wait_pct", std::to_string(100 * ip / n));
    RecordProperty("barrier_state_wait_pct", std::to_string(100 * state / n));
}
