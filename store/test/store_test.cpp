// The store's own contract: every meta key registered once and documented, every table
// written through TraceTables and read back as written, lost records of every kind counted.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <vector>

#include <tuple>

#include <optional>

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/experiment_index.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "test_support.h"

using namespace profinfer;
using namespace profinfer::test;
namespace fs = std::filesystem;

TEST(MetaRegistry, EveryKeyOnceInOrderAndInTheDocs) {
    std::ifstream f(fs::path(PROFINFER_SOURCE_DIR) / "docs" / "trace-store.md");
    std::stringstream docs;
    docs << f.rdbuf();
    ASSERT_FALSE(docs.str().empty());
    std::set<std::string> names;
    const auto& r = store::meta_registry();
    for (size_t i = 0; i < r.size(); ++i) {
        EXPECT_EQ(static_cast<size_t>(r[i].key), i) << r[i].name << " is out of MetaKey's order";
        EXPECT_TRUE(names.insert(r[i].name).second) << r[i].name << " registered twice";
        EXPECT_NE(docs.str().find(std::string("| `") + r[i].name + "` |"), std::string::npos)
            << r[i].name << " is not in docs/trace-store.md's meta table";
        EXPECT_GT(std::string(r[i].meaning).size(), 2u) << r[i].name;
    }
    EXPECT_EQ(store::name(store::MetaKey::HogStopNs), std::string("hog_stop_ns"));
}

TEST(MetaRegistry, IntegersAreCheckedAndNameTheTraceAndKey) {
    TempDir d;
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        db.set_meta(store::MetaKey::Pid, "123");
        db.set_meta(store::MetaKey::RecorderPid, "12x");
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    const auto meta = db.meta();
    EXPECT_EQ(meta.integer(store::MetaKey::Pid), 123);
    EXPECT_EQ(meta[store::MetaKey::Level], "");
    EXPECT_FALSE(meta.has(store::MetaKey::Level));
    try {
        meta.integer(store::MetaKey::RecorderPid);
        FAIL() << "a non-integer was read as one";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("recorder_pid"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
}

// One row of every table through the writer, read back column by column through the
// reader's views where there is one.
// A trace written where the tests run (the build directory: in a virtual board the checkout
// shared in by 9p, whose shared memory SQLite's write-ahead log cannot use — the first write
// failed there with "disk I/O error"): the journal matches the file system, the rows read back.
TEST(TraceTables, ATraceWritesAndReadsBackOnTheBuildDirectorysFileSystem) {
    const fs::path dir = fs::current_path() / ("store-fs-" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path p = dir / "t.db";
    // The mount's type, as `stat -f` cannot tell (9p reports the host's file system).
    const auto df = run({"findmnt", "-n", "-o", "FSTYPE", "--target", dir.string()});
    std::cout << "file system: " << df.out;
    if (df.out.rfind("9p", 0) == 0) {
        EXPECT_TRUE(store::wal_unsafe_filesystem(p)) << "9p";
    }
    if (df.out.rfind("ext4", 0) == 0 || df.out.rfind("tmpfs", 0) == 0) {
        EXPECT_FALSE(store::wal_unsafe_filesystem(p)) << df.out;
    }
    {
        store::Database db(p, store::Database::Mode::Create);
        {
            store::Statement mode(db.handle(), "PRAGMA journal_mode");
            ASSERT_TRUE(mode.step());
            EXPECT_EQ(mode.column_text(0), store::wal_unsafe_filesystem(p) ? "truncate" : "wal");
        }
        store::TraceTables t(db);
        for (int i = 0; i < 3; ++i) {
            t.begin();
            t.add(store::TokenRow{10, 11, 1, 1000 + i, 5000 + i, 1, 0});
            t.commit();
        }
    }
    {
        store::Database db(p, store::Database::Mode::ReadOnly);
        EXPECT_EQ(db.scalar("SELECT count(*) FROM calls"), 3);
    }
    EXPECT_FALSE(fs::exists(dir / "t.db-wal"));
    EXPECT_FALSE(fs::exists(dir / "t.db-shm"));
    fs::remove_all(dir);
}

TEST(TraceTables, EveryTableReadsBackAsWritten) {
    TempDir d;
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        store::TraceTables t(db);
        t.begin();
        const int64_t tok = t.add(store::TokenRow{10, 11, 1, 1000, 5000, 1, 0});
        t.add_ops_untraced(tok);
        t.add(store::GraphRow{1, 10, 11, 1100, 4900, "cpu", 0xabc, std::nullopt, std::nullopt, std::string("CPU"), 2});
        const int64_t def = t.add(store::NodeDefRow{1, 1100, 0x100, "MUL_MAT", 29, "ffn_up-0", 0, {8, 1, 1, 1}, 0, std::nullopt});
        t.add(store::NodeSrcRow{def, 0, 0x200, true, std::nullopt, 2, 0, {4, 8, 1, 1}});
        t.add(store::NodeSrcRow{def, 1, 0x300, false, std::nullopt, 0, 0, {}});
        store::GraphNodeRow gn{1, 0x100, def};
        t.add_graph_nodes(&gn, 1);
        store::OpRow ops[2] = {
            {1, 11, 0, 2, 0, 0, 1200, 1300, 1400, 0x100, std::nullopt, 1, {}},
            {1, 12, 1, 2, 1, 1, 1210, 1290, 1400, 0x100, int64_t{0x101}, 1, {}},
        };
        ops[0].counters[0] = 777;
        const int64_t first = t.add_ops(ops, 2);
        t.add(store::OpSamplesRow{first + 1, 5, 2, 1});
        t.add(store::GpuEventRow{1, 11, "submit", std::nullopt, 1500, 1600, 0});
        t.add(store::ExpertRow{1, 0x100, std::string("ffn_moe_up-0"), 0, 1, 7});
        t.add(store::SchedSwitchRow{2000, 0, 11, 10, "llama", 0, 99, 98, "hog", 1});
        t.add(store::SchedWakeupRow{2100, 1, 11, 0, 99, 98, "hog"});
        t.add(store::ProbeRow{"llama_decode", "/lib/libllama.so", "uprobe", false, "gone"});
        t.add(store::LibraryRow{"/lib/libllama.so", "libllama", "abcd", true});
        t.add(store::CounterRow{0, "cycles", 0, 0, true, "ignored"});
        t.add(store::QosEventRow{3000, "detach", 12.5, 2990});
        t.set_lost("gpu", 3);
        t.set_lost("gpu", 4);  // replaces
        t.commit();
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens WHERE pid = 10 AND end_ns = 5000"), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM ops_untraced"), 1);
    EXPECT_EQ(db.scalar("SELECT cgraph FROM graphs WHERE backend IS NULL AND backend_name = 'CPU'"), 0xabc);
    EXPECT_EQ(db.scalar("SELECT ne0 FROM node_defs WHERE name = 'ffn_up-0' AND view_src IS NULL"), 8);
    EXPECT_EQ(db.scalar("SELECT ne1 FROM node_def_srcs WHERE slot = 0 AND type = 2"), 8);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM node_def_srcs WHERE slot = 1 AND type IS NULL AND ne0 IS NULL"), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM graph_nodes"), 1);
    EXPECT_EQ(db.scalar("SELECT c0 FROM ops WHERE tid = 11"), 777);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM ops WHERE tid = 11 AND c1 IS NULL AND fused_tensor IS NULL"), 1);
    EXPECT_EQ(db.scalar("SELECT fused_tensor FROM ops WHERE tid = 12"), 0x101);
    EXPECT_EQ(db.scalar("SELECT o.tid FROM op_samples s JOIN ops o ON o.id = s.op_id WHERE s.samples = 5"), 12);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM gpu_events WHERE kind = 'submit' AND tensor IS NULL"), 1);
    EXPECT_EQ(db.scalar("SELECT expert FROM experts WHERE name = 'ffn_moe_up-0' AND slot = 1"), 7);
    EXPECT_EQ(db.scalar("SELECT next_tgid FROM sched_switch WHERE next_comm = 'hog'"), 98);
    EXPECT_EQ(db.scalar("SELECT waker_tgid FROM sched_wakeup WHERE waker_comm = 'hog'"), 98);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM probes WHERE attached = 0 AND reason = 'gone'"), 1);
    EXPECT_EQ(db.scalar("SELECT debug_info FROM libraries WHERE role = 'libllama'"), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM counters WHERE available = 1 AND reason IS NULL"), 1);
    EXPECT_EQ(db.scalar("SELECT start_ns FROM qos_events WHERE action = 'detach'"), 2990);
    EXPECT_EQ(db.scalar("SELECT count FROM lost_events WHERE kind = 'gpu'"), 4);
}

// A server's trace (two sequences): seq 0 is under way when the trace begins (its first run
// a 1-token decode at position 40), seq 1 begins in it at position 0. Attached, or with the
// oldest calls dropped, seq 0's request may have begun before the trace: no prompt, no TTFT
// (it used to show a 1-token prompt and an invented TTFT); seq 1's is whole. Launched with
// nothing dropped, a request's first run is its start wherever it is.
TEST(Requests, ARequestBegunBeforeTheTraceHasNoInventedStart) {
    TempDir d;
    auto make = [&](const std::string& name, std::optional<store::MetaKey> key, const std::string& value) {
        const fs::path p = d / name;
        store::Database db(p, store::Database::Mode::Create);
        store::TraceTables t(db);
        t.begin();
        if (key) t.set_meta(*key, value);
        // call 0: seq 0 decodes at 40; seq 1's 5-token prompt; call 1, 2: one token each
        const int64_t c0 = t.add(store::TokenRow{10, 11, 0, 1000, 2000, 6, 0});
        t.add(store::BatchSeqRow{c0, 0, 40, 1, 1});
        t.add(store::BatchSeqRow{c0, 1, 0, 5, 1});
        for (int64_t i = 1; i <= 2; ++i) {
            const int64_t c = t.add(store::TokenRow{10, 11, 0, 1000 + 1000 * i * 2, 2000 + 1000 * i * 2, 2, 0});
            t.add(store::BatchSeqRow{c, 0, 40 + i, 1, 1});
            t.add(store::BatchSeqRow{c, 1, 4 + i, 1, 1});
        }
        t.commit();
        return p;
    };
    for (const auto& [name, key, value] :
         std::vector<std::tuple<std::string, std::optional<store::MetaKey>, std::string>>{
             {"attached.db", store::MetaKey::Attached, "1"}, {"dropped.db", store::MetaKey::CallsDropped, "12"}}) {
        store::Database db(make(name, key, value), store::Database::Mode::ReadOnly);
        EXPECT_EQ(db.scalar("SELECT count(*) FROM requests"), 2) << name;
        EXPECT_EQ(db.scalar("SELECT begun_before FROM requests WHERE seq = 0"), 1) << name;
        EXPECT_EQ(db.scalar("SELECT count(*) FROM requests WHERE seq = 0 AND prompt_tokens IS NULL AND ttft_ns IS NULL"), 1)
            << name;
        EXPECT_EQ(db.scalar("SELECT generated FROM requests WHERE seq = 0"), 3) << name;
        EXPECT_EQ(db.scalar("SELECT begun_before FROM requests WHERE seq = 1"), 0) << name;
        EXPECT_EQ(db.scalar("SELECT prompt_tokens FROM requests WHERE seq = 1"), 5) << name;
        EXPECT_EQ(db.scalar("SELECT ttft_ns FROM requests WHERE seq = 1"), 1000) << name;
    }
    store::Database launched(make("launched.db", std::nullopt, ""), store::Database::Mode::ReadOnly);
    EXPECT_EQ(launched.scalar("SELECT count(*) FROM requests WHERE begun_before = 0 AND ttft_ns IS NOT NULL"), 2);
}

// The kinds that are whole records (the event header's kinds) count as lost records, the
// Vulkan host records (gpu) among them; data cut inside a record does not.
TEST(RecordKinds, LostRecordsOfEveryKindCountInTheRunsLostTotal) {
    TempDir d;
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        store::TraceTables t(db);
        int64_t n = 1;
        for (size_t k = 1; k < store::kRecordKinds.size(); ++k) t.set_lost(store::kRecordKinds[k], n), n *= 2;
        t.set_lost("expert_ids_truncated", 1000);
        db.set_meta(store::MetaKey::Status, "incomplete");
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    const auto h = store::run_health(db);
    EXPECT_EQ(h.lost_records, (1 << (store::kRecordKinds.size() - 1)) - 1);  // every record kind once
    for (size_t k = 1; k < store::kRecordKinds.size(); ++k)
        EXPECT_EQ(h.losses.at(store::kRecordKinds[k]), int64_t{1} << (k - 1)) << store::kRecordKinds[k];
    EXPECT_EQ(h.losses.at("expert_ids_truncated"), 1000);
    EXPECT_TRUE(store::is_record_kind("gpu"));
    EXPECT_TRUE(store::is_record_kind("batch"));
    EXPECT_FALSE(store::is_record_kind("expert_ids_truncated"));
}

// store/ owns both formats: nothing else writes SQL or opens a database file itself (the
// product's code and scripts; tests make damaged traces on purpose and are left out).
TEST(StoreOwnsTheFormats, NoSqlWritesOrDatabaseOpensOutsideStore) {
    const fs::path root = PROFINFER_SOURCE_DIR;
    const std::regex writes(R"(sqlite3_open|sqlite3_exec|INSERT (OR [A-Z]+ )?INTO|CREATE (TEMP )?(TABLE|INDEX|VIEW)|)"
                            R"(UPDATE [a-z_]+ SET|DELETE FROM|DROP TABLE|ATTACH DATABASE)");
    std::vector<std::string> found;
    size_t files = 0;
    for (const char* dir : {"common", "models", "tracer", "boards", "analysis", "experiments", "fit", "cli", "scripts", "farm"}) {
        for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
            const auto rel = fs::relative(e.path(), root).string();
            if (!e.is_regular_file() || rel.find("/test/") != std::string::npos || rel.find("/bench/") != std::string::npos)
                continue;
            const auto ext = e.path().extension().string();
            if (ext != ".cpp" && ext != ".h" && ext != ".hpp" && ext != ".c" && ext != ".py" && ext != ".sh" && ext != ".yml")
                continue;
            ++files;
            std::ifstream f(e.path());
            std::string line;
            for (int n = 1; std::getline(f, line); ++n)
                if (std::regex_search(line, writes)) found.push_back(rel + ":" + std::to_string(n) + ": " + line);
        }
    }
    EXPECT_GT(files, 100u) << "the source tree was not found";
    std::string all;
    for (const auto& f : found) all += f + "\n";
    EXPECT_TRUE(found.empty()) << "SQL writes or database opens outside store/:\n" << all;
}

// An op-sampled trace of schema 9 (before samples carried their callers) reads as one whose
// samples found no caller.
TEST(TraceTables, ASchema9SampledTraceReadsWithNoCallers) {
    TempDir d;
    const fs::path p = d / "t.db";
    {
        store::Database db(p, store::Database::Mode::Create);
        store::TraceTables t(db);
        t.begin();
        t.add(store::CpuSampleRow{1000, 11, 0, 1, 0x5000, 0x6000});
        t.add(store::CpuSampleRow{2000, 11, 0, 1, 0x5008});
        t.commit();
    }
    {
        store::Database db(p, store::Database::Mode::ReadOnly);
        EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples WHERE caller_ip = 0x6000"), 1);
        EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples WHERE caller_ip IS NULL"), 1);
    }
    {  // the schema-9 table: no caller_ip column
        sqlite3* raw = nullptr;
        ASSERT_EQ(sqlite3_open(p.c_str(), &raw), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE s9 AS SELECT ts_ns, tid, cpu, graph_seq, ip FROM cpu_samples; DROP TABLE "
                               "cpu_samples; ALTER TABLE s9 RENAME TO cpu_samples; PRAGMA user_version = 9", nullptr,
                               nullptr, nullptr),
                  SQLITE_OK)
            << sqlite3_errmsg(raw);
        sqlite3_close(raw);
    }
    store::Database db(p, store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples WHERE caller_ip IS NULL AND ip >= 0x5000"), 2);
}

// A study folder copied elsewhere reads its own traces, not the ones at the paths it was
// recorded to (which may be gone, or another copy's).
TEST(ExperimentIndexRuns, ACopiedStudyReadsTheTracesBesideItsIndex) {
    TempDir d;
    const fs::path first = d / "first", copy = d / "copy";
    fs::create_directories(first / "points");
    fs::create_directories(copy / "points");
    {
        store::ExperimentIndex ix(first / "index.db", store::ExperimentIndex::Mode::Write);
        ix.put({.id = "p", .round = 1, .status = "done", .db = (first / "points" / "p-r1.db").string()});
        ix.put({.id = "q", .round = 1, .status = "done", .db = (first / "points" / "q-r1.db").string()});
        ix.put({.id = "u", .round = 1, .status = "done"});  // untraced: no DB
    }
    fs::copy_file(first / "index.db", copy / "index.db");
    std::ofstream(copy / "points" / "p-r1.db") << "x";
    store::ExperimentIndex ix(copy / "index.db", store::ExperimentIndex::Mode::Read);
    const auto runs = ix.done_runs();
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(runs[0].db, (copy / "points" / "p-r1.db").string());
    EXPECT_EQ(runs[1].db, (first / "points" / "q-r1.db").string()) << "no copy beside: the path as recorded";
    EXPECT_EQ(runs[2].db, "");
}
