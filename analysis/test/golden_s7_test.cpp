// The golden trace of the current schema (tests/golden/synthetic-decode.db), written
// without BPF by the recorder's own TraceWriter (tests/programs/synthetic_golden.cpp): it
// still matches what the writer writes today, and every analysis command reads it to the
// numbers the generator put in (8 decode calls of one 64-node CPU graph on 2 threads, one
// preemption by a hog).
#include <algorithm>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "profinfer/store.h"
#include "profinfer/text_file.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

constexpr int kNodes = 64, kSteps = 8, kThreads = 2;

fs::path golden() { return golden_trace("synthetic-decode"); }


// Every row of every table, in a stable order: what two traces must share to be the same.
std::string table_dump(const fs::path& path) {
    store::Database db(path, store::Database::Mode::ReadOnly);
    std::string out;
    std::vector<std::string> tables;
    {
        store::Statement st(db.handle(), "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
        while (st.step())
            if (st.column_text(0) != "node_spans") tables.push_back(st.column_text(0));  // derived at the end
    }
    for (const auto& t : tables) {
        store::Statement st(db.handle(), ("SELECT * FROM \"" + t + "\" ORDER BY rowid").c_str());
        out += "## " + t + "\n";
        while (st.step()) {
            for (int c = 0; c < st.column_count(); ++c) out += (st.column_is_null(c) ? "NULL" : st.column_text(c)) + "|";
            out += "\n";
        }
    }
    return out;
}

}  // namespace

TEST(GoldenTrace, IsOfTheCurrentSchemaAndComplete) {
    store::Database db(golden(), store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("PRAGMA user_version"), store::kSchemaVersion)
        << "the schema changed: regenerate tests/golden/synthetic-decode.db (docs/trace-store.md)";
    EXPECT_EQ(store::run_health(db).status, "complete");
    EXPECT_EQ(db.scalar("SELECT count(*) FROM node_defs"), kNodes);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM graph_nodes"), kNodes * kSteps);
}

TEST(GoldenTrace, TheWriterStillWritesIt) {
    TempDir d;
    const fs::path again = d / "again.db";
    auto r = run({SYNTHETIC_GOLDEN_BIN, again.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(table_dump(again), table_dump(golden()))
        << "TraceWriter or TraceTables writes other rows than the committed golden: if intended, regenerate it with "
           "synthetic_golden tests/golden/synthetic-decode.db";
}

// What the generator wrote, as every command reports it: thread 0 runs each node from t
// to t + 1000 ns (compute to t + 500), thread 1 from t + 7; one graph per call.
TEST(GoldenTrace, EveryAnalysisCommandReadsWhatTheGeneratorWrote) {
    TempDir d;
    const std::string g = golden().string();
    {
        auto r = run({profinfer_bin(), "info", g, "--json"});
        ASSERT_EQ(r.status, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["status"], "complete");
        EXPECT_EQ(j["tokens"], kSteps);
        EXPECT_EQ(j["decode_calls"], kSteps);
        EXPECT_EQ(j["prefill_calls"], 0);
        EXPECT_EQ(j["operators"], kNodes * kSteps);
        EXPECT_EQ(j["op_records"], kNodes * kSteps * kThreads);
        EXPECT_EQ(j["threads"], kThreads);
        EXPECT_EQ(j["op_types"], 2);
        EXPECT_EQ(j["sched_switches"], 1);
        EXPECT_EQ(j["sched_wakeups"], 1);
        EXPECT_EQ(j["lost_events"], 0);
        // A call: 10 ns, the nodes at 1 µs each, 10 ns.
        EXPECT_NEAR(j["median_tpot_ms"].get<double>(), (20 + 1000.0 * kNodes) / 1e6, 1e-9);
        // What the peers read instead of SQL: every call, and the span from the first's start
        // to the last's end (kSteps calls of that length, back to back or apart).
        EXPECT_EQ(j["calls_recorded"], kSteps);
        EXPECT_GE(j["last_call_end_ns"].get<int64_t>() - j["first_call_start_ns"].get<int64_t>(),
                  int64_t(kSteps) * (20 + 1000 * kNodes));
        EXPECT_GT(j["first_call_start_ns"].get<int64_t>(), 0);
    }
    {
        auto r = run({profinfer_bin(), "stat", g, "--by", "op-type", "--format", "csv"});
        ASSERT_EQ(r.status, 0) << r.err;
        // op,count,total_ms,mean_ms,share_pct: node time is the compute part (500 ns).
        for (const char* op : {"MUL_MAT", "ADD"}) {
            const std::string row = std::string(op) + "," + std::to_string(kNodes / 2 * kSteps) + ",";
            EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
        }
        EXPECT_NE(r.out.find(",0.0005,50\n"), std::string::npos) << r.out;
    }
    {
        auto r = run({profinfer_bin(), "stat", g, "--by", "thread", "--format", "csv"});
        ASSERT_EQ(r.status, 0) << r.err;
        // At --level op the wait is not split off: a thread's whole part counts (1000 and 993 ns).
        EXPECT_NE(r.out.find("MUL_MAT,0,0.256,0,"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("MUL_MAT,1,0.254208,0,"), std::string::npos) << r.out;
    }
    {
        auto r = run({profinfer_bin(), "dag", g, "--layer", "0", "-o", (d / "g.dot").string()});
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.err.find(std::to_string(kNodes / 2) + " operators, " + std::to_string(kNodes / 2 - 1) + " edges"),
                  std::string::npos)
            << r.err;  // layer 0 is a chain of 32 nodes
        EXPECT_NE(read_text(d / "g.dot").find("ffn_mm-0"), std::string::npos);
    }
    {
        auto r = run({profinfer_bin(), "timeline", g, "-o", (d / "t.json").string()});
        ASSERT_EQ(r.status, 0) << r.err;
        const auto j = nlohmann::json::parse(read_text(d / "t.json"));
        std::map<std::string, int> slices;
        for (const auto& e : j["traceEvents"])
            if (e.value("ph", "") == "X") ++slices[e.value("cat", "")];
        EXPECT_EQ(slices["op"], kNodes * kSteps * kThreads);
        EXPECT_EQ(slices["token"], kSteps);
        EXPECT_EQ(slices["graph"], kSteps);
    }
    {
        auto r = run({profinfer_bin(), "report", g, "-o", (d / "r.html").string()});
        ASSERT_EQ(r.status, 0) << r.err;
        const std::string html = read_text(d / "r.html");
        EXPECT_NE(html.find("MUL_MAT"), std::string::npos);
        EXPECT_NE(html.find("ffn_add"), std::string::npos);
    }
    {
        auto r = run({profinfer_bin(), "diff", g, g});
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.out.find("op-type  MUL_MAT"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("slower"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("faster"), std::string::npos) << r.out;
    }
}

// keep_node_times computes the view once into a table: the same rows as the view, and calls
// dropped after it leave the table as they leave the view.
TEST(GoldenTrace, KeptNodeTimesAreTheViewsRows) {
    auto rows = [](store::Database& db) {
        std::string out;
        store::Statement st(db.handle(), "SELECT * FROM node_times ORDER BY graph_seq, tensor");
        while (st.step()) {
            for (int c = 0; c < st.column_count(); ++c) out += (st.column_is_null(c) ? "NULL" : st.column_text(c)) + "|";
            out += "\n";
        }
        return out;
    };
    store::Database view(golden(), store::Database::Mode::ReadOnly), kept(golden(), store::Database::Mode::ReadOnly);
    kept.keep_node_times();
    const std::string all = rows(view);
    EXPECT_GT(std::count(all.begin(), all.end(), '\n'), kSteps * kNodes / 2);
    EXPECT_EQ(rows(kept), all);
    EXPECT_EQ(kept.scalar("SELECT count(*) FROM temp.node_times_kept"), view.scalar("SELECT count(*) FROM node_times"));
    view.drop_first_calls(2);
    kept.drop_first_calls(2);
    const std::string later = rows(view);
    EXPECT_LT(later.size(), all.size());
    EXPECT_EQ(rows(kept), later);
}

// A recording's end keeps node_spans (store::build_indexes): node_times, thread_waits and
// block_times then read the table, and give row for row what they give computed from ops on
// a trace without it (the golden traces were written before it: they read the fallback).
TEST(GoldenTrace, NodeSpansKeptAtTheEndReadAsTheViewsOverOps) {
    auto rows = [](store::Database& db, const std::string& view, const std::string& order) {
        std::string out;
        store::Statement st(db.handle(), ("SELECT * FROM " + view + " ORDER BY " + order).c_str());
        while (st.step()) {
            for (int c = 0; c < st.column_count(); ++c) out += (st.column_is_null(c) ? "NULL" : st.column_text(c)) + "|";
            out += "\n";
        }
        return out;
    };
    for (const char* name : {"synthetic-decode", "llama3.2-1b-full", "gemma2-2b-full", "qwen1.5-moe-a2.7b-full"}) {
        SCOPED_TRACE(name);
        TempDir d;
        const fs::path copy = d / "kept.db";
        fs::copy_file(golden_trace(name), copy);
        {
            store::Database annotate(copy, store::Database::Mode::Annotate);
            store::build_indexes(annotate.handle());
            store::build_indexes(annotate.handle());  // once: a second end adds nothing
        }
        store::Database from_ops(golden_trace(name), store::Database::Mode::ReadOnly), kept(copy, store::Database::Mode::ReadOnly);
        const auto table = [](store::Database& db) {
            return db.scalar("SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = 'node_spans'");
        };
        ASSERT_EQ(table(from_ops), 0) << "the golden trace already holds node_spans: the fallback is not read here";
        ASSERT_EQ(table(kept), 1);
        EXPECT_EQ(kept.scalar("SELECT count(*) FROM main.node_spans"),
                  kept.scalar("SELECT count(*) FROM (SELECT DISTINCT graph_seq, tensor FROM ops)"));
        from_ops.keep_block_times();
        kept.keep_block_times();
        for (const auto& [view, order] : std::vector<std::pair<std::string, std::string>>{
                 {"node_times", "graph_seq, tensor"}, {"thread_waits", "id"}, {"block_times", "graph_seq, tensor"}}) {
            const std::string a = rows(from_ops, view, order);
            EXPECT_GT(std::count(a.begin(), a.end(), '\n'), 100) << view;
            EXPECT_EQ(rows(kept, view, order), a) << view;
        }
    }
}
