// ProfTime output validated as a trace viewer would need it.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>

#include "profinfer/store.h"
#include "profinfer/timeline.h"
#include "profinfer/trace_graph.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

TEST(Timeline, WellFormedStrictlyNestedMonotonicPerTrack) {
    TempDir d;
    auto r = run({profinfer_bin(), "timeline", golden_trace("qwen2.5-1.5b-full"), "-o", d / "trace.json"});
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "trace.json"));  // throws if malformed
    const auto& ev = j.at("traceEvents");
    ASSERT_GT(ev.size(), 100u);

    struct Slice {
        double start, end;
        std::string cat, name;
    };
    std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> tracks;
    std::map<std::pair<int64_t, int64_t>, double> last_ts;
    std::map<std::string, int> cats;
    int named_threads = 0, processes = 0;
    for (const auto& e : ev) {
        const std::string ph = e.at("ph");
        if (ph == "M") {
            named_threads += e["name"] == "thread_name";
            processes += e["name"] == "process_name";
            continue;
        }
        auto key = std::make_pair(e.at("pid").get<int64_t>(), e.value("tid", int64_t{-1}));
        double ts = e.at("ts");
        EXPECT_GE(ts, last_ts.count(key) ? last_ts[key] : -1e300) << "timestamps go back on a track";
        last_ts[key] = ts;
        if (ph == "X") {
            double dur = e.at("dur");
            EXPECT_GE(dur, 0);
            tracks[key].push_back({ts, ts + dur, e.value("cat", ""), e.at("name")});
            ++cats[e.value("cat", "")];
        }
    }
    EXPECT_EQ(processes, 1);
    EXPECT_GE(named_threads, 2);
    for (const char* c : {"token", "graph", "op", "wait", "sched"}) EXPECT_GT(cats[c], 0) << c;
    // Strict nesting: two slices of a track are disjoint or one contains the other.
    const double eps = 1e-3;  // 1 ns
    for (const auto& [key, slices] : tracks) {
        std::vector<const Slice*> stack;
        for (const auto& s : slices) {
            while (!stack.empty() && stack.back()->end <= s.start + eps) stack.pop_back();
            if (!stack.empty()) {
                EXPECT_LE(s.end, stack.back()->end + eps)
                    << s.cat << " " << s.name << " overlaps " << stack.back()->cat << " " << stack.back()->name;
            }
            stack.push_back(&s);
        }
    }
    // The main thread nests token ⊃ graph ⊃ op.
    bool op_in_graph_in_token = false;
    for (const auto& [key, slices] : tracks)
        for (const auto& t : slices)
            if (t.cat == "token")
                for (const auto& g : slices)
                    if (g.cat == "graph" && g.start >= t.start && g.end <= t.end)
                        for (const auto& o : slices)
                            op_in_graph_in_token |= o.cat == "op" && o.start >= g.start && o.end <= g.end;
    EXPECT_TRUE(op_in_graph_in_token);
}

// -o trace.json.gz: the same trace, gzip-compressed as it is written.
TEST(Timeline, GzipOutputIsTheSameTrace) {
    TempDir d;
    auto plain = run({profinfer_bin(), "timeline", golden_trace("llama3.2-1b-full"), "-o", d / "trace.json"});
    ASSERT_EQ(plain.status, 0) << plain.err;
    auto gz = run({profinfer_bin(), "timeline", golden_trace("llama3.2-1b-full"), "-o", d / "trace.json.gz"});
    ASSERT_EQ(gz.status, 0) << gz.err;
    EXPECT_LT(fs::file_size(d / "trace.json.gz") * 4, fs::file_size(d / "trace.json"));
    auto unzip = run({"gzip", "-dc", d / "trace.json.gz"});
    ASSERT_EQ(unzip.status, 0) << unzip.err;
    EXPECT_EQ(unzip.out, read_file(d / "trace.json"));
}

// --calls FIRST-LAST: only those calls, and the scheduler's events between the first one's
// start and the last one's end; a small recording keeps every call by default and says
// nothing; a window past the recording's calls, or not a window, is refused.
TEST(Timeline, ACallWindowHoldsItsCallsAndTheirSpanOnly) {
    TempDir d;
    const auto golden = golden_trace("llama3.2-1b-full");
    auto events_of = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> argv = {profinfer_bin(), "timeline", golden, "-o", d / "t.json"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        auto r = run(argv);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.err.find("the timeline holds calls"), std::string::npos) << r.err;
        return nlohmann::json::parse(std::ifstream(d / "t.json")).at("traceEvents");
    };
    auto calls_in = [](const nlohmann::json& ev) {
        std::set<int64_t> calls;
        double first = 1e300, last = -1e300, lo = 1e300, hi = -1e300;
        int sched = 0;
        for (const auto& e : ev) {
            if (e.value("cat", "") == "token") {
                calls.insert(e.at("args").at("call").get<int64_t>());
                first = std::min(first, e.at("ts").get<double>());
                last = std::max(last, e.at("ts").get<double>() + e.at("dur").get<double>());
            }
            if (e.value("cat", "") == "sched") {
                ++sched;
                lo = std::min(lo, e.at("ts").get<double>());
                hi = std::max(hi, e.at("ts").get<double>());
            }
        }
        return std::tuple{calls, first, last, lo, hi, sched};
    };
    const auto [all, a_first, a_last, a_lo, a_hi, a_sched] = calls_in(events_of({}));
    ASSERT_EQ(all.size(), 8u);  // the golden's calls, every one by default
    const auto [some, first, last, lo, hi, sched] = calls_in(events_of({"--calls", "2-4"}));
    EXPECT_EQ(some, (std::set<int64_t>{2, 3, 4}));
    ASSERT_GT(sched, 0);
    EXPECT_LT(sched, a_sched);
    EXPECT_GE(lo, first - 1e-3);  // µs
    EXPECT_LE(hi, last + 1e-3);
    EXPECT_EQ(std::get<0>(calls_in(events_of({"--calls", "5"}))), std::set<int64_t>{5});
    EXPECT_EQ(std::get<0>(calls_in(events_of({"--calls", "all"}))), all);
    expect_one_line_failure(run({profinfer_bin(), "timeline", golden, "-o", d / "x.json", "--calls", "8-9"}),
                            "the recording has calls 0-7");
    expect_one_line_failure(run({profinfer_bin(), "timeline", golden, "-o", d / "x.json", "--calls", "4-2"}),
                            "comes before the first");
    expect_one_line_failure(run({profinfer_bin(), "timeline", golden, "-o", d / "x.json", "--calls", "two"}),
                            "--calls takes FIRST-LAST, N or all");
    EXPECT_FALSE(fs::exists(d / "x.json"));
}

// The default window of a recording too long for a viewer: the first calls whose operator
// parts fit the limit (at least one call), counted as the calls' ops rows.
TEST(Timeline, TheDefaultWindowIsTheFirstCallsThatFit) {
    store::Database db(golden_trace("llama3.2-1b-full"), store::Database::Mode::ReadOnly);
    const int64_t parts = db.scalar("SELECT count(*) FROM thread_parts");
    ASSERT_GT(parts, 0);
    auto every = default_call_window(db, parts);
    ASSERT_TRUE(every);
    EXPECT_EQ(every->first, 0);
    EXPECT_EQ(every->last, db.scalar("SELECT max(call) FROM calls"));
    auto half = default_call_window(db, parts / 2);
    ASSERT_TRUE(half);
    EXPECT_EQ(half->first, 0);
    EXPECT_LT(half->last, every->last);
    EXPECT_LE(db.scalar("SELECT count(*) FROM thread_parts WHERE call <= " + std::to_string(half->last)), parts / 2);
    EXPECT_GT(db.scalar("SELECT count(*) FROM thread_parts WHERE call <= " + std::to_string(half->last + 1)), parts / 2);
    auto one = default_call_window(db, 1);
    ASSERT_TRUE(one);
    EXPECT_EQ(one->last, 0);
}

// Fig. 8's timeline: in a trace with a hog's window (the interference study's), the decode
// step drawn by default is one wholly inside the window — the middle of those — not the
// middle of the whole run, which may fall before or after the hog.
TEST(Timeline, TheDefaultDecodeStepOfAHogRunIsInsideTheHogsWindow) {
    TempDir d;
    const fs::path db_path = d / "t.db";
    fs::copy_file(golden_trace("qwen2.5-1.5b-full"), db_path);
    std::vector<DecodeCall> calls;
    int untouched = -1;
    {
        store::Database db(db_path, store::Database::Mode::ReadOnly);
        TraceGraphs t(db);
        calls = t.calls();
        untouched = t.default_call();
        EXPECT_FALSE(t.inside_hog_window(untouched));  // no window: nothing is inside one
    }
    std::vector<int> decode;
    for (const auto& c : calls)
        if (c.phase == "decode") decode.push_back(c.index);
    ASSERT_GE(decode.size(), 4u);
    // A window over the first few decode calls, away from the run's middle.
    const DecodeCall& first = calls.at(size_t(decode[0])), &last = calls.at(size_t(decode[1]));
    ASSERT_LT(last.index, untouched);
    store::note_hog_window(db_path, {first.start_ns - 1, last.end_ns + 1});
    store::Database db(db_path, store::Database::Mode::ReadOnly);
    TraceGraphs t(db);
    const int chosen = t.default_call();
    EXPECT_GE(chosen, first.index);
    EXPECT_LE(chosen, last.index);
    EXPECT_TRUE(t.inside_hog_window(chosen));
    EXPECT_FALSE(t.inside_hog_window(untouched));
}
