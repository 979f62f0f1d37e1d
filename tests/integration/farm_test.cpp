// make farm on the two-board local inventory (farm/inventory-local.ini): both "boards" run
// a bounded study at once through Ansible, each under its own lock; the results come back
// and their experiment indexes are merged into one database and one side-by-side table.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer::test;

namespace {

RunResult make_farm(const fs::path& results, const std::string& extra) {
    return run({"make", "--no-print-directory", "-C", PROFINFER_SOURCE_DIR, "farm", "INVENTORY=farm/inventory-local.ini",
                "STUDIES=tests/fixtures/farm/smoke.toml", "FARM_RESULTS=" + results.string(),
                "FARM_PROFINFER=" + std::string(PROFINFER_BIN),
                "FARM_EXTRA=-e profinfer=" + std::string(PROFINFER_BIN) + " " + extra});
}

struct Row {
    std::string board, status;
    double started, ended;
};

std::vector<Row> merged_points(const fs::path& db) {
    sqlite3* h = nullptr;
    std::vector<Row> rows;
    if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return rows;
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT board, status, started_at, ended_at FROM runs WHERE study = 'smoke'", -1, &st,
                           nullptr) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW)
            rows.push_back({reinterpret_cast<const char*>(sqlite3_column_text(st, 0)),
                            reinterpret_cast<const char*>(sqlite3_column_text(st, 1)), sqlite3_column_double(st, 2),
                            sqlite3_column_double(st, 3)});
    sqlite3_finalize(st);
    sqlite3_close(h);
    return rows;
}

// What every farm run must show: each board's results back without trace DBs, POINTS
// merged rows all done, the boards' runs overlapping in time, and the side-by-side table.
void expect_farm_results(const fs::path& results, const std::string& a, const std::string& b, size_t points) {
    for (const auto& board : {a, b}) {
        EXPECT_TRUE(fs::exists(results / board / "smoke" / "index.db")) << board;
        EXPECT_TRUE(fs::exists(results / board / "smoke" / "table.csv")) << board;
        if (fs::exists(results / board / "smoke" / "points")) {
            for (auto& e : fs::directory_iterator(results / board / "smoke" / "points"))
                EXPECT_NE(e.path().extension(), ".db") << "trace DBs were brought back: " << e.path();
        }
    }
    auto rows = merged_points(results / "farm.db");
    ASSERT_EQ(rows.size(), points) << "2 boards x 2 points x 2 quick rounds in farm.db";
    double a_start = 1e300, a_end = 0, b_start = 1e300, b_end = 0;
    for (const auto& p : rows) {
        EXPECT_EQ(p.status, "done") << p.board;
        auto& s = p.board == a ? a_start : b_start;
        auto& e = p.board == a ? a_end : b_end;
        s = std::min(s, p.started), e = std::max(e, p.ended);
    }
    // The boards ran at the same time, not one after the other.
    EXPECT_LT(std::max(a_start, b_start), std::min(a_end, b_end)) << "a " << a_start << "-" << a_end << ", b " << b_start
                                                                  << "-" << b_end;
    std::ifstream md(results / "compare" / "smoke.md");
    std::stringstream text;
    text << md.rdbuf();
    EXPECT_NE(text.str().find("| " + a + " | " + b + " |"), std::string::npos) << text.str();
    EXPECT_TRUE(fs::exists(results / "compare" / "smoke-decode_tps.png"));
}

}  // namespace

TEST(Farm, TwoLocalBoardsRunAtOnceAndMerge) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const fs::path results = d / "farm-results";
    auto r = make_farm(results, "");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    expect_farm_results(results, "local-a", "local-b", 8);
}

// One job per board: while a board's lock is held, another farm job on it refuses.
TEST(Farm, ABusyBoardRefuses) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    fs::create_directories("/tmp/profinfer-farm");
    int fd = open("/tmp/profinfer-farm/local-a.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
    auto r = make_farm(d / "farm-results", "--limit local-a");
    close(fd);
    EXPECT_NE(r.status, 0);
    EXPECT_NE((r.out + r.err).find("board local-a is busy"), std::string::npos) << r.out << r.err;
    EXPECT_FALSE(fs::exists(d / "farm-results" / "local-a" / "smoke" / "index.db"));
}

// make farm-vboards: the same bounded study on two virtual arm64 boards (Debian's 6.1 and
// bullseye's 5.10 kernels) reached over SSH as remote hosts — the checkout rsynced to each,
// the study run there by the arm64 build, the results pulled back and merged here.
TEST(FarmVboards, TwoVirtualBoardsOverSshRunAtOnceAndMerge) {
    if (!fs::exists(fs::path(PROFINFER_SOURCE_DIR) / "build-arm64" / "profinfer"))
        GTEST_SKIP() << "no build-arm64/profinfer: make test-vboard builds it (make cross-arm64) before this test";
    TempDir d;
    const fs::path results = d / "farm-results";
    auto r = run({"make", "--no-print-directory", "-C", PROFINFER_SOURCE_DIR, "farm-vboards",
                  "STUDIES=tests/fixtures/farm/smoke.toml", "FARM_RESULTS=" + results.string(),
                  "FARM_PROFINFER=" + std::string(PROFINFER_BIN)});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    expect_farm_results(results, "vboard-5.10", "vboard-6.1", 8);
}
