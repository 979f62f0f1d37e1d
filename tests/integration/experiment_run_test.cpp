// The experiment runner on the real llama.cpp (tiny models): every point recorded once,
// resumed without redoing finished points, missing backends skipped with their reason
// (quick) or refused before anything runs; and profinfer diff on two of its points.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "profinfer/experiment.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

const char* kSpec = R"(
name = "tiny-threads"
title = "Tiny threads"
level = "op"
scale = "tiny"
[sweep]
model = ["llama3.2-1b"]
type = ["f16"]
threads = [1, 2]
gen = [8]
prompt = ["8"]
backend = ["cpu"]
[outputs]
stat = ["matmul"]
matmuls = true
[quick]
backend = ["cpu", "vulkan-that-is-not-here"]
threads = [2]
[figure]
x = "threads"
series = "model"
metrics = ["decode_tps", "mul_mat_share_pct"]
)";

// The index is the experiment's own SQLite file, not a trace store.
int64_t index_scalar(const fs::path& index, const std::string& sql) {
    sqlite3* h = nullptr;
    if (sqlite3_open_v2(index.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        sqlite3_close(h);
        return -1;
    }
    int64_t v = -1;
    {
        store::Statement st(h, sql.c_str());
        if (st.step()) v = st.column_int(0);
    }
    sqlite3_close(h);
    return v;
}

std::map<std::string, int64_t> mtimes(const fs::path& dir) {
    std::map<std::string, int64_t> m;
    for (const auto& f : fs::directory_iterator(dir / "points")) {
        if (f.path().extension() != ".db") continue;  // readers touch the -shm file
        struct stat st {};
        stat(f.path().c_str(), &st);
        m[f.path().filename()] = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    return m;
}

}  // namespace

TEST(ExperimentRun, RecordsEachPointOnceAndResumes) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    std::ofstream(d / "spec.toml") << kSpec;
    const fs::path out = d / "out";
    auto r = run({profinfer_bin(), "experiment", "run", d / "spec.toml", "-o", out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("[2/2]"), std::string::npos) << r.err;  // progress
    const fs::path index = out / "index.db";
    EXPECT_EQ(index_scalar(index, "SELECT count(*) FROM points WHERE status = 'done'"), 2);
    for (const char* f : {"table.csv", "table.md", "points.csv", "tiny-threads-decode_tps.png", "tiny-threads-decode_tps.svg",
                          "matmuls.csv", "fit.csv", "fit.md", "tiny-threads-t1.png", "tiny-threads-t2.svg"})
        EXPECT_TRUE(fs::exists(out / f)) << f;
    // Fig. 10 across the points: matmuls.csv is every point's `stat --by matmul`, side by side.
    {
        size_t rows = 0;
        for (const auto& f : fs::directory_iterator(out / "points"))
            if (f.path().extension() == ".db") rows += stats_table(f.path(), "matmul").rows.size();
        std::ifstream in(out / "matmuls.csv");
        const Table all = Table::from_csv(std::string(std::istreambuf_iterator<char>(in), {}));
        EXPECT_GT(rows, 0u);
        EXPECT_EQ(all.rows.size(), rows);
        std::ifstream fin(out / "fit.csv");
        const Table fit = Table::from_csv(std::string(std::istreambuf_iterator<char>(fin), {}));
        bool pooled_decode = false;
        for (const auto& r : fit.rows)
            if (r[fit.column("model")] == "all" && r[fit.column("batch")] == "n=1") {
                pooled_decode = true;
                EXPECT_GT(r[fit.column("ns_per_mnkh")].get<double>(), 0);
            }
        EXPECT_TRUE(pooled_decode);
    }
    // Each point's DB is a complete recording of its own command.
    {
        sqlite3* h = nullptr;
        ASSERT_EQ(sqlite3_open_v2(index.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
        {  // the statement must be finalised before the connection can close
        store::Statement st(h, "SELECT db, params FROM points");
        while (st.step()) {
            store::Database db(st.column_text(0), store::Database::Mode::ReadOnly);
            EXPECT_EQ(db.meta()["status"], "complete");
            const auto params = nlohmann::json::parse(st.column_text(1));
            EXPECT_NE(db.meta()["command"].find("-t " + params["threads"].get<std::string>()), std::string::npos);
            EXPECT_EQ(db.scalar("SELECT count(DISTINCT ith) FROM thread_parts"), std::stoi(params["threads"].get<std::string>()));
        }
        }
        EXPECT_EQ(sqlite3_close(h), SQLITE_OK);
    }
    const auto before = mtimes(out);
    // A second run finds everything done and records nothing.
    r = run({profinfer_bin(), "experiment", "run", d / "spec.toml", "-o", out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("0 recorded, 2 already done"), std::string::npos) << r.err;
    EXPECT_EQ(mtimes(out), before);
    // A point left running (the runner was killed during it) is recorded again, alone.
    ASSERT_EQ(run({"sqlite3", index, "UPDATE points SET status = 'running' WHERE rowid = 2"}).status, 0);
    r = run({profinfer_bin(), "experiment", "run", d / "spec.toml", "-o", out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("1 recorded, 1 already done"), std::string::npos) << r.err;
    const auto after = mtimes(out);
    int changed = 0;
    for (const auto& [f, t] : after) changed += before.count(f) && before.at(f) != t;
    EXPECT_EQ(changed, 1);
    // A fresh clone has the index (committed) but no trace DBs: the points are recorded
    // again, and the tables are written from them.
    for (const auto& [f, t] : after)
        for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(out / "points" / (f + suffix));
    r = run({profinfer_bin(), "experiment", "run", d / "spec.toml", "-o", out});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("2 recorded, 0 already done"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("its trace DB is not here"), std::string::npos) << r.err;
    EXPECT_EQ(mtimes(out).size(), 2u);

    // profinfer diff between the two points: per call, what the statistics say of each.
    std::vector<fs::path> dbs;
    for (const auto& f : fs::directory_iterator(out / "points"))
        if (f.path().extension() == ".db") dbs.push_back(f.path());
    ASSERT_EQ(dbs.size(), 2u);
    auto diff = run({profinfer_bin(), "diff", dbs[0], dbs[1], "--format", "json"});
    ASSERT_EQ(diff.status, 0) << diff.err;
    const auto rows = nlohmann::json::parse(diff.out);
    ASSERT_FALSE(rows.empty());
    auto per_call = [](const fs::path& db, const std::string& op) {  // diff's default: the decode calls
        store::Database s(db, store::Database::Mode::ReadOnly);
        return double(s.scalar("SELECT sum(dur_ns) FROM node_times WHERE phase = 'decode' AND op = '" + op + "'")) / 1e6 /
               double(s.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'"));
    };
    bool matmul = false;
    for (const auto& row : rows) {
        if (row["level"] != "op-type" || row["op"] != "MUL_MAT") continue;
        matmul = true;
        EXPECT_NEAR(row["a_ms_per_call"].get<double>(), per_call(dbs[0], "MUL_MAT"), 1e-6);
        EXPECT_NEAR(row["b_ms_per_call"].get<double>(), per_call(dbs[1], "MUL_MAT"), 1e-6);
        EXPECT_EQ(row["a_count_per_call"], row["b_count_per_call"]);  // same model, same graph
    }
    EXPECT_TRUE(matmul);
}

TEST(ExperimentRun, MissingBackendSkippedInQuickRefusedOtherwise) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    std::string spec = kSpec;
    std::ofstream(d / "spec.toml") << spec;
    auto quick = run({profinfer_bin(), "experiment", "run", d / "spec.toml", "--quick", "-o", d / "q"});
    ASSERT_EQ(quick.status, 0) << quick.err;
    EXPECT_NE(quick.err.find("skipped: backend 'vulkan-that-is-not-here'"), std::string::npos) << quick.err;
    EXPECT_EQ(index_scalar(d / "q" / "index.db", "SELECT count(*) FROM points WHERE status = 'skipped' AND reason != ''"), 1);
    EXPECT_EQ(index_scalar(d / "q" / "index.db", "SELECT count(*) FROM points WHERE status = 'done'"), 1);
    // The full sweep of a spec with a missing backend: refused before anything runs.
    spec.replace(spec.find("backend = [\"cpu\"]"), 17, "backend = [\"cpu\", \"nope\"]");
    std::ofstream(d / "spec2.toml") << spec;
    auto full = run({profinfer_bin(), "experiment", "run", d / "spec2.toml", "-o", d / "f"});
    expect_one_line_failure(full, "backend 'nope'");
    EXPECT_FALSE(fs::exists(d / "f" / "index.db"));
}
