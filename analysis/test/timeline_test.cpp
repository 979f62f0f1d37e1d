// ProfTime output validated as a trace viewer would need it.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

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
