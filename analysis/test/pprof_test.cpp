// profinfer export pprof, read back by pprof itself (go tool pprof, Debian's golang-go).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>

#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// A profile as `go tool pprof -raw` prints it: each sample's value and its stack of frame
// names, leaf first.
struct RawSample {
    int64_t value;
    std::vector<std::string> stack;
};

std::vector<RawSample> read_raw(const fs::path& profile) {
    auto r = run({"go", "tool", "pprof", "-raw", profile.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    std::map<int64_t, std::string> names;
    std::vector<std::pair<int64_t, std::vector<int64_t>>> ids;
    std::istringstream in(r.out);
    std::regex sample(R"(^\s+(\d+): ((?:\d+ )+)\s*$)"), location(R"(^\s+(\d+): 0x0 M=1 (.*) :0 s=0$)");
    bool in_locations = false;
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (line == "Locations") in_locations = true;
        if (in_locations && std::regex_match(line, m, location)) names[std::stoll(m[1])] = m[2];
        if (!in_locations && std::regex_match(line, m, sample)) {
            std::istringstream locs(m[2].str());
            std::vector<int64_t> stack;
            for (int64_t id; locs >> id;) stack.push_back(id);
            ids.push_back({std::stoll(m[1]), stack});
        }
    }
    std::vector<RawSample> out;
    for (const auto& [value, stack] : ids) {
        RawSample s{value, {}};
        for (int64_t id : stack) s.stack.push_back(names.at(id));
        out.push_back(s);
    }
    return out;
}

}  // namespace

// Each tiny architecture's golden recording: pprof reads the profile; every stack is operator
// ← its block ← its layer (no request frame: llama-simple's batches carry no sequence ids),
// and per layer and block the values add up, to the nanosecond, to view block_times.
// `-top` lists each block and layer with its total, `-top -cum` ranks them.
TEST(Pprof, GoToolPprofReadsTheBlocksOfEveryArchitecture) {
    for (const char* name : {"llama3.2-1b-full", "qwen2.5-1.5b-full", "gemma2-2b-full", "qwen1.5-moe-a2.7b-full"}) {
        TempDir d;
        auto r = run({profinfer_bin(), "export", "pprof", golden_trace(name), "-o", d / "run.pb.gz"});
        ASSERT_EQ(r.status, 0) << r.err;
        std::map<std::pair<std::string, std::string>, int64_t> ours, theirs;  // (layer frame, block) → ns
        {
            store::Database db(golden_trace(name), store::Database::Mode::ReadOnly);
            db.keep_block_times();
            store::Statement q(db.handle(), "SELECT block_layer, block, sum(dur_ns) FROM block_times GROUP BY 1, 2");
            while (q.step())
                ours[{q.column_is_null(0) ? "outside the layers" : "layer " + std::to_string(q.column_int(0)),
                      q.column_text(1)}] = q.column_int(2);
        }
        auto samples = read_raw(d / "run.pb.gz");
        ASSERT_FALSE(samples.empty()) << name;
        for (const auto& s : samples) {
            ASSERT_EQ(s.stack.size(), 3u) << name;
            EXPECT_EQ(s.stack[0].rfind(s.stack[1] + ": ", 0), 0u) << name << ": " << s.stack[0] << " under " << s.stack[1];
            theirs[{s.stack[2], s.stack[1]}] += s.value;
        }
        EXPECT_EQ(theirs, ours) << name;

        // -top (each block with its total, below the operators), and -top -cum (ranked).
        for (const char* order : {"-flat", "-cum"}) {
            auto top = run({"go", "tool", "pprof", "-top", order, (d / "run.pb.gz").string()});
            ASSERT_EQ(top.status, 0) << top.err;
            const bool moe = std::string(name).find("moe") != std::string::npos;
            for (const char* frame : {"  attention\n", moe ? "  moe\n" : "  ffn\n", "  layer 0\n", "  layer 1\n"})
                EXPECT_NE(top.out.find(frame), std::string::npos) << name << " " << order << " lacks" << frame << top.out;
            EXPECT_EQ(top.err.find("Main binary filename not available"), std::string::npos) << top.err;
        }
    }
}

// A recording below --level op has no operator time: an empty profile, and profinfer says so.
TEST(Pprof, ATokenLevelRecordingGivesAnEmptyProfileAndSaysSo) {
    TempDir d;
    {
        store::Database db(d / "run.db", store::Database::Mode::Create);
    }
    auto r = run({profinfer_bin(), "export", "pprof", d / "run.db", "-o", d / "run.pb"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("no operator time"), std::string::npos) << r.err;
    EXPECT_TRUE(read_raw(d / "run.pb").empty());
    auto bad = run({profinfer_bin(), "export", "pprof", d / "none.db", "-o", d / "x.pb"});
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find("no such trace database"), std::string::npos) << bad.err;
    EXPECT_FALSE(fs::exists(d / "x.pb"));
}
