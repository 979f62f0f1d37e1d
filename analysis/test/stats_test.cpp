// ProfStat tables on a full-level recording of the tiny MoE model.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "profinfer/error.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {
fs::path moe_recording() { return golden_trace("qwen1.5-moe-a2.7b-full"); }
double num(const nlohmann::json& v) { return v.is_null() ? 0.0 : v.get<double>(); }
}  // namespace

TEST(Stats, ByTokenOneRowPerCallWithConsistentTimes) {
    auto t = stats_table(*open_trace(moe_recording()), "token").to_json();
    ASSERT_EQ(t.size(), 8u);
    EXPECT_EQ(t[0]["phase"], "prefill");
    for (const auto& r : t) {
        EXPECT_GT(num(r["op_ms"]), 0);
        EXPECT_LE(num(r["op_ms"]), num(r["ms"]) * 1.001);
        EXPECT_LE(num(r["mul_mat_ms"]), num(r["op_ms"]) * 1.001);
    }
}

TEST(Stats, ByOpTypeSharesAddUpAndMatMulsAreThere) {
    auto t = stats_table(*open_trace(moe_recording()), "op-type").to_json();
    double share = 0;
    bool mm_id = false;
    for (const auto& r : t) share += num(r["share_pct"]), mm_id |= r["op"] == "MUL_MAT_ID";
    EXPECT_NEAR(share, 100.0, 0.01);
    EXPECT_TRUE(mm_id);
}

// Every (op type, thread) row against its own sum over the raw per-thread records; the wait
// for the other threads against each node's last arrival at its barrier, found here by hand.
TEST(Stats, ByThreadSplitsComputeAndWait) {
    const fs::path trace = golden_trace("qwen1.5-moe-a2.7b-full");
    std::map<std::pair<std::string, int>, std::pair<double, double>> expected;  // compute, wait (ms)
    std::map<std::pair<std::string, int>, double> others;                       // waiting for the others (ms)
    {
        store::Database db(trace, store::Database::Mode::ReadOnly);
        store::Statement st(db.handle(),
                            "SELECT n.op, o.ith, o.start_ns, o.compute_end_ns, o.end_ns, o.graph_seq, o.tensor FROM ops o "
                            "JOIN nodes n ON n.graph_seq = o.graph_seq AND n.tensor = o.tensor");
        std::map<std::pair<int64_t, int64_t>, int64_t> last;  // node → its last arrival
        std::vector<std::tuple<std::string, int, int64_t, std::pair<int64_t, int64_t>>> arrivals;
        while (st.step()) {
            auto& e = expected[{st.column_text(0), int(st.column_int(1))}];
            e.first += (st.column_int(3) - st.column_int(2)) / 1e6;
            e.second += (st.column_int(4) - st.column_int(3)) / 1e6;
            const std::pair<int64_t, int64_t> node{st.column_int(5), st.column_int(6)};
            last[node] = std::max(last[node], st.column_int(3));
            arrivals.emplace_back(st.column_text(0), int(st.column_int(1)), st.column_int(3), node);
        }
        for (const auto& [op, ith, at, node] : arrivals) others[{op, ith}] += (last[node] - at) / 1e6;
    }
    auto t = stats_table(*open_trace(trace), "thread").to_json();
    ASSERT_EQ(t.size(), expected.size());
    double wait = 0, waited_for_others = 0;
    for (const auto& r : t) {
        auto it = expected.find({r["op"].get<std::string>(), r["ith"].get<int>()});
        ASSERT_NE(it, expected.end()) << r.dump();
        EXPECT_NEAR(num(r["compute_ms"]), it->second.first, 1e-9 + 1e-9 * it->second.first) << r.dump();
        EXPECT_NEAR(num(r["wait_ms"]), it->second.second, 1e-9 + 1e-9 * it->second.second) << r.dump();
        const double o = std::min(others[it->first], it->second.second);
        EXPECT_NEAR(num(r["others_wait_ms"]), o, 1e-9 + 1e-9 * o) << r.dump();
        EXPECT_LE(num(r["others_wait_ms"]), num(r["wait_ms"]) + 1e-9) << r.dump();
        wait += num(r["wait_ms"]), waited_for_others += num(r["others_wait_ms"]);
    }
    EXPECT_GT(wait, 0) << "a full-level recording with 2 threads waits at barriers";
    // Some thread waits for the other somewhere; and never all of the barrier time is that
    // (the last to arrive still spends the barrier's exit and its probes there).
    EXPECT_GT(waited_for_others, 0);
    EXPECT_LT(waited_for_others, wait);
}

// Activations and mean reuse distance per (layer, node, expert), computed again here
// from the raw expert ids: calls in which the expert was used, and the mean gap
// between consecutive such calls.
TEST(Stats, ByExpertMatchesAHandCountOfTheRawIds) {
    const fs::path trace = golden_trace("qwen1.5-moe-a2.7b-full");
    std::map<std::tuple<int, std::string, int>, std::set<int>> calls_of;
    {
        store::Database db(trace, store::Database::Mode::ReadOnly);
        std::vector<std::pair<int64_t, int64_t>> calls;
        store::Statement tok(db.handle(), "SELECT start_ns, end_ns FROM tokens ORDER BY start_ns");
        while (tok.step()) calls.emplace_back(tok.column_int(0), tok.column_int(1));
        store::Statement st(db.handle(),
                            "SELECT g.start_ns, e.name, e.expert FROM experts e JOIN graphs g ON g.seq = e.graph_seq");
        while (st.step()) {
            int call = -1;
            for (size_t k = 0; k < calls.size(); ++k)
                if (st.column_int(0) >= calls[k].first && st.column_int(0) <= calls[k].second) call = int(k);
            ASSERT_GE(call, 0);
            const std::string name = st.column_text(1);
            const int layer = std::stoi(name.substr(name.rfind('-') + 1));
            calls_of[{layer, name.substr(0, name.rfind('-')), int(st.column_int(2))}].insert(call);
        }
    }
    auto t = stats_table(*open_trace(trace), "expert").to_json();
    ASSERT_EQ(t.size(), calls_of.size());
    int with_reuse = 0;
    for (const auto& r : t) {
        const auto& c = calls_of.at({r["layer"].get<int>(), r["node"].get<std::string>(), r["expert"].get<int>()});
        EXPECT_EQ(r["activations"].get<int64_t>(), int64_t(c.size())) << r.dump();
        if (c.size() < 2) {
            EXPECT_TRUE(r["mean_reuse_distance"].is_null()) << r.dump();
            continue;
        }
        ++with_reuse;
        const double mean = double(*c.rbegin() - *c.begin()) / double(c.size() - 1);
        EXPECT_NEAR(num(r["mean_reuse_distance"]), mean, 1e-9) << r.dump();
    }
    EXPECT_GT(with_reuse, 0);
}

TEST(Stats, ByExpertCountsEveryActivation) {
    auto t = stats_table(*open_trace(moe_recording()), "expert").to_json();
    ASSERT_FALSE(t.empty());
    int64_t activations = 0;
    for (const auto& r : t) {
        EXPECT_GE(r["expert"].get<int>(), 0);
        EXPECT_LT(r["expert"].get<int>(), 8);
        activations += r["activations"].get<int64_t>();
    }
    // (call, layer, node, expert) activations, distinct per call: exactly what the raw
    // ids hold, counted here in SQL of our own.
    store::Database db(moe_recording(), store::Database::Mode::ReadOnly);
    EXPECT_EQ(activations,
              db.scalar("SELECT count(*) FROM (SELECT DISTINCT t.start_ns, e.name, e.expert FROM experts e JOIN graphs g ON g.seq = e.graph_seq JOIN tokens t ON g.start_ns "
                        "BETWEEN t.start_ns AND t.end_ns)"));
}

// stat --by block on a recording of each tiny architecture (dense LLaMA, Qwen 2 with biases,
// Gemma 2 with its post-norms and unsuffixed nodes, the Qwen MoE).
TEST(Stats, ByBlockTilesEachCallOnEveryArchitecture) {
    for (const char* name : {"llama3.2-1b-full", "qwen2.5-1.5b-full", "gemma2-2b-full", "qwen1.5-moe-a2.7b-full"}) {
        const bool moe = std::string(name).find("moe") != std::string::npos;
        expect_blocks_tile_each_call(golden_trace(name), 2, moe, name);
        auto t = stats_table(*open_trace(golden_trace(name)), "block").to_json();
        ASSERT_EQ(t.size(), 5u) << name;  // two layers × two blocks, and the rest
        double share = 0;
        for (const auto& r : t) share += num(r["share_pct"]);
        EXPECT_NEAR(share, 100.0, 0.01) << name;
        EXPECT_EQ(t[0]["block"], "attention") << name;
        EXPECT_EQ(t[1]["block"], moe ? "moe" : "ffn") << name;
        EXPECT_EQ(t[4]["block"], "rest") << name;
    }
}

TEST(Stats, FormatsAndErrors) {
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

// PROFINFER_SQL_PROFILE=MS lists the statements an analysis ran for MS ms or more, with
// their times; unset, nothing.
TEST(Stats, SqlProfileNamesTheStatementsAndTheirTimes) {
    auto quiet = run({profinfer_bin(), "stat", moe_recording(), "--by", "op-type"});
    ASSERT_EQ(quiet.status, 0) << quiet.err;
    EXPECT_EQ(quiet.err.find("profinfer[sql]"), std::string::npos) << quiet.err;
    auto all = run({profinfer_bin(), "stat", moe_recording(), "--by", "op-type"}, {{"PROFINFER_SQL_PROFILE", "0"}});
    ASSERT_EQ(all.status, 0) << all.err;
    EXPECT_EQ(all.out, quiet.out);
    const std::regex line(R"(profinfer\[sql\]: +[0-9]+\.[0-9] ms  SELECT .*FROM node_times)");
    EXPECT_TRUE(std::regex_search(all.err, line)) << all.err;
    auto none = run({profinfer_bin(), "stat", moe_recording(), "--by", "op-type"}, {{"PROFINFER_SQL_PROFILE", "1e9"}});
    EXPECT_EQ(none.err.find("profinfer[sql]"), std::string::npos) << none.err;
}

// Paper Fig. 10's table: every weight MatMul of the dense golden recording, by shape, with
// dimensions taken from the node and its weight, and counts that add up to the raw nodes.
TEST(Stats, ByMatMulGroupsWeightMatMulsByShape) {
    const fs::path trace = golden_trace("llama3.2-1b-full");
    auto t = stats_table(*open_trace(trace), "matmul").to_json();
    ASSERT_FALSE(t.empty());
    int64_t count = 0;
    for (const auto& r : t) {
        EXPECT_NE(r["name"], "kq");
        EXPECT_NE(r["name"], "kqv");
        EXPECT_EQ(r["mnkh"].get<int64_t>(),
                  r["m"].get<int64_t>() * r["n"].get<int64_t>() * r["k"].get<int64_t>() * r["h"].get<int64_t>());
        EXPECT_GT(num(r["median_us"]), 0);
        if (r["phase"] == "decode") {
            EXPECT_EQ(r["n"], 1);
        }
        count += r["count"].get<int64_t>();
    }
    store::Database db(trace, store::Database::Mode::ReadOnly);
    EXPECT_EQ(count, db.scalar("SELECT count(*) FROM node_times WHERE op = 'MUL_MAT' AND NOT attention"));
    // The FFN up projection of the tiny card: a hidden × ffn weight (64 → 128).
    bool up = false;
    for (const auto& r : t)
        if (r["name"] == "ffn_up" && r["phase"] == "decode") {
            up = true;
            EXPECT_EQ(r["m"], 128);
            EXPECT_EQ(r["k"], 64);
        }
    EXPECT_TRUE(up);
}

// Paper Fig. 13 per call: every MoE node of every call, with its experts' reuse distance
// recomputed here from the raw ids.
TEST(Stats, ByExpertCallMatchesTheRawIds) {
    const fs::path trace = moe_recording();
    auto t = stats_table(*open_trace(trace), "expert-call").to_json();
    ASSERT_FALSE(t.empty());
    store::Database db(trace, store::Database::Mode::ReadOnly);
    // (layer, node, expert) → calls that used it, from expert_uses.
    std::map<std::tuple<int64_t, std::string, int64_t>, std::set<int64_t>> used;
    {
        store::Statement st(db.handle(), "SELECT layer, base, expert, call FROM expert_uses");
        while (st.step()) used[{st.column_int(0), st.column_text(1), st.column_int(2)}].insert(st.column_int(3));
    }
    for (const auto& r : t) {
        const int64_t call = r["call"], layer = r["layer"];
        const std::string node = r["node"];
        int64_t experts = 0, first = 0;
        double dist = 0;
        for (const auto& [k, calls] : used) {
            if (std::get<0>(k) != layer || std::get<1>(k) != node || !calls.count(call)) continue;
            ++experts;
            auto it = calls.find(call);
            if (it == calls.begin()) {
                ++first;
            } else {
                dist += double(call - *std::prev(it));
            }
        }
        EXPECT_EQ(r["experts"].get<int64_t>(), experts);
        EXPECT_EQ(r["first_uses"].get<int64_t>(), first);
        if (experts > first) {
            EXPECT_NEAR(num(r["mean_reuse_distance"]), dist / double(experts - first), 1e-9);
        }
        EXPECT_GT(num(r["time_us"]), 0);
    }
}

// A Wilson interval contains its own estimate, exactly at the edges too (k = 0 gave a lower
// bound of 1.4e-15 above a share of 0 for 22 samples: ExperimentRun.ExactWait... failed).
TEST(Stats, WilsonIntervalContainsItsEstimateAtTheEdges) {
    for (int64_t n : {1, 7, 22, 1000}) {
        EXPECT_EQ(profinfer::wilson_interval(0, n).first, 0.0) << n;
        EXPECT_EQ(profinfer::wilson_interval(n, n).second, 1.0) << n;
        for (int64_t k = 0; k <= n; k += std::max<int64_t>(1, n / 5)) {
            const auto [lo, hi] = profinfer::wilson_interval(k, n);
            EXPECT_LE(lo, double(k) / n) << k << "/" << n;
            EXPECT_GE(hi, double(k) / n) << k << "/" << n;
        }
    }
}

// One list of `stat --by` views: the CLI's option and help are built from it, and
// docs/cli.md's usage line and table must name every view and no other.
TEST(Stats, EveryViewInTheDocsAndNoOther) {
    std::ifstream f(fs::path(PROFINFER_SOURCE_DIR) / "docs" / "cli.md");
    std::stringstream docs;
    docs << f.rdbuf();
    const std::string text = docs.str();
    const size_t usage = text.find("profinfer stat run.db [--by ");
    ASSERT_NE(usage, std::string::npos);
    const size_t open = usage + std::string("profinfer stat run.db [--by ").size();
    const std::string listed = text.substr(open, text.find(']', open) - open);
    std::string expected;
    for (const auto& v : stat_views()) expected += (expected.empty() ? "" : "|") + std::string(v.name);
    EXPECT_EQ(listed, expected) << "docs/cli.md's stat usage line";
    const size_t table = text.find("| --by | rows | columns |", usage);
    ASSERT_NE(table, std::string::npos);
    std::set<std::string> rows;
    for (size_t at = text.find("\n| ", table + 1); at != std::string::npos && at < text.find("\n\n", table);
         at = text.find("\n| ", at + 1)) {
        const size_t start = at + 3;
        rows.insert(text.substr(start, text.find(" |", start) - start));
    }
    rows.erase("---|---|---");
    std::set<std::string> views;
    for (const auto& v : stat_views()) views.insert(v.name);
    EXPECT_EQ(rows, views) << "docs/cli.md's stat table";
    EXPECT_THROW(stats_table(*open_trace(moe_recording()), "roofline-not"), Error);
}

// An exact trace's views are computed once per command: whether the trace has operator times
// (or a sampled trace's fallback applies) is asked of cpu_samples first, not of node_times or
// block_times — an EXISTS over a window view computes the whole window (export pprof read
// block_times twice: 15.8-16.7 s against 7.8-8.9 s on a 1024-token full-level trace).
TEST(Stats, AnExactTraceReadsEachWindowViewOnce) {
    const fs::path trace = golden_trace("llama3.2-1b-full");
    auto count = [](const std::string& err, const std::string& view) {
        const std::regex re("profinfer\\[sql\\]:[^\\n]*FROM " + view + "\\b");
        return std::distance(std::sregex_iterator(err.begin(), err.end(), re), std::sregex_iterator());
    };
    TempDir d;
    auto pprof = run({profinfer_bin(), "export", "pprof", trace, "-o", d / "t.pb"}, {{"PROFINFER_SQL_PROFILE", "0"}});
    ASSERT_EQ(pprof.status, 0) << pprof.err;
    EXPECT_EQ(count(pprof.err, "block_times"), 1) << pprof.err;
    auto stat = run({profinfer_bin(), "stat", trace, "--by", "op-type"}, {{"PROFINFER_SQL_PROFILE", "0"}});
    ASSERT_EQ(stat.status, 0) << stat.err;
    EXPECT_EQ(count(stat.err, "node_times"), 1) << stat.err;
}
