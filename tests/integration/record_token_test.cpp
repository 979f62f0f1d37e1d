// profinfer record on the real llama.cpp: token level, launch mode.
#include <gtest/gtest.h>

#include <fstream>

#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

TEST(RecordToken, LlamaSimpleSixteenTokens) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "run.db", "--", llama_debug().program("llama-simple"), "-m",
                  tiny_model("llama3.2-1b"), "-n", "16", "Hello world"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto s = RunSummary::load(*open_trace(d / "run.db"));
    EXPECT_EQ(s.meta[store::MetaKey::Status], "complete");
    EXPECT_EQ(s.prefill_calls, 1);
    EXPECT_EQ(s.decode_calls, 15);
    EXPECT_TRUE(s.health.losses.empty());
    EXPECT_TRUE(s.missing_probes.empty());
    EXPECT_GT(s.ttft_ms.value_or(0), 0);
    EXPECT_GT(s.median_tpot_ms.value_or(0), 0);

    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode' AND n_tokens = 1"), 15);
    EXPECT_GT(db.scalar("SELECT n_tokens FROM calls WHERE phase = 'prefill'"), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens WHERE end_ns <= start_ns OR ret != 0"), 0);
    // Calls do not overlap and come in order.
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens a JOIN tokens b ON b.id = a.id + 1 WHERE b.start_ns < a.end_ns"), 0);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM libraries WHERE role = 'libllama' AND length(build_id) = 40"), 1);

    auto info = run({profinfer_bin(), "info", "--json", d / "run.db"});
    ASSERT_EQ(info.status, 0) << info.err;
    auto j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["decode_calls"], 15);
    EXPECT_EQ(j["prefill_calls"], 1);
    EXPECT_EQ(j["lost_events"], 0);
}

TEST(RecordToken, NonLlamaProcessFailsClearly) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "run.db", "--", "/bin/true"});
    expect_one_line_failure(r, "never loaded libllama");
    // Nothing was recorded, so nothing is left that would block a retry with the same -o.
    EXPECT_FALSE(fs::exists(d / "run.db"));
    EXPECT_FALSE(fs::exists(d / "run.db-wal"));
}

TEST(RecordToken, WrongPidAndMissingCommandFailClearly) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "a.db", "--pid", "999999999"});
    expect_one_line_failure(r, "no process with pid 999999999");

    r = run({profinfer_bin(), "record", "-o", d / "b.db", "--", "/no/such/program"});
    expect_one_line_failure(r, "cannot run /no/such/program");
}

TEST(RecordToken, RefusesToOverwriteADatabase) {
    TempDir d;
    { store::Database db(d / "x.db", store::Database::Mode::Create); }
    auto r = run({profinfer_bin(), "record", "-o", d / "x.db", "--", "/bin/true"});
    EXPECT_NE(r.status, 0);
    expect_one_line_failure(r, "already exists");
    // An empty file and a symlink, dangling or not, are refused alike: never followed.
    std::ofstream(d / "empty.db").close();
    expect_one_line_failure(run({profinfer_bin(), "record", "-o", d / "empty.db", "--", "/bin/true"}), "already exists");
    fs::create_symlink(d / "elsewhere.db", d / "dangling.db");
    expect_one_line_failure(run({profinfer_bin(), "record", "-o", d / "dangling.db", "--", "/bin/true"}),
                            "already exists (as a symlink)");
    EXPECT_FALSE(fs::exists(d / "elsewhere.db"));
}
