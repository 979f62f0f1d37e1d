// Experiment specs: parsing, sweep expansion, quick overrides, errors; the dry run.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "profinfer/error.h"
#include "profinfer/experiment.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {
fs::path write_spec(const TempDir& d, const std::string& text) {
    std::ofstream(d / "spec.toml") << text;
    return d / "spec.toml";
}
const char* kSpec = R"(
name = "t"
title = "T"
level = "op"
[sweep]
model = ["llama3.2-1b", "qwen2.5-1.5b"]
threads = [1, 2, 4]
fa = false
[quick]
threads = [2]
[figure]
x = "threads"
series = "model"
metrics = ["decode_tps"]
)";
}  // namespace

TEST(ExperimentSpec, SweepIsTheCartesianProductWithDefaults) {
    TempDir d;
    auto s = ExperimentSpec::load(write_spec(d, kSpec));
    auto full = s.points(false);
    ASSERT_EQ(full.size(), 6u);
    std::set<std::string> keys, ids;
    for (const auto& p : full) {
        keys.insert(p.key());
        ids.insert(p.id());
        EXPECT_EQ(p.at("fa"), "off");
        EXPECT_EQ(p.at("backend"), "cpu");  // not swept: the default
        EXPECT_EQ(p.params.size(), 14u);
        for (const char* later : {"hog", "ot=", "nopo", "mem"})  // at their defaults, left out of the identity
            EXPECT_EQ(p.key().find(later), std::string::npos) << later;
    }
    EXPECT_EQ(keys.size(), 6u);
    EXPECT_EQ(ids.size(), 6u);
    auto quick = s.points(true);
    ASSERT_EQ(quick.size(), 2u);
    for (const auto& p : quick) EXPECT_EQ(p.at("threads"), "2");
    // A point's identity does not depend on the order it was listed in.
    EXPECT_EQ(full[0].id(), ExperimentSpec::load(write_spec(d, kSpec)).points(false)[0].id());
}

TEST(ExperimentSpec, MistakesAreNamed) {
    TempDir d;
    std::string bad = kSpec;
    bad.replace(bad.find("threads = [1, 2, 4]"), 19, "thread = [1]");
    try {
        ExperimentSpec::load(write_spec(d, bad));
        FAIL() << "an unknown parameter was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown parameter 'thread'"), std::string::npos) << e.what();
    }
    try {
        ExperimentSpec::load(write_spec(d, "name = \"x\"\n[sweep]\nmodel = [\n"));
        FAIL() << "a syntax error was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
    }
    auto r = run({profinfer_bin(), "experiment", "run", (d / "none.toml").string()});
    expect_one_line_failure(r, "none.toml");
}

TEST(ExperimentSpec, EveryShippedSpecLoadsAndDryRuns) {
    int specs = 0;
    for (const auto& f : fs::directory_iterator(fs::path(PROFINFER_SOURCE_DIR) / "experiments" / "specs")) {
        if (f.path().extension() != ".toml") continue;
        ++specs;
        auto s = ExperimentSpec::load(f.path());
        EXPECT_FALSE(s.points(true).empty()) << f.path();
        EXPECT_LE(s.points(true).size(), s.points(false).size()) << f.path();
        auto r = run({profinfer_bin(), "experiment", "run", f.path().string(), "--dry-run", "--quick", "--board", "rk3588"});
        EXPECT_EQ(r.status, 0) << f.path() << ": " << r.err;
        EXPECT_NE(r.out.find("points at --level " + s.level), std::string::npos) << r.out;
    }
    EXPECT_GE(specs, 1);
    // Without --dry-run another board is refused in one line.
    auto r = run({profinfer_bin(), "experiment", "run",
                  (fs::path(PROFINFER_SOURCE_DIR) / "experiments" / "specs" / "thread-scaling.toml").string(), "--board",
                  "rk3588"});
    expect_one_line_failure(r, "rk3588");
}

// A hog on a CPU this machine does not have: the point says so (dry run), and the key of
// a point with a hog names it.
TEST(ExperimentSpec, HogOnAMissingCpuIsNamed) {
    TempDir d;
    std::string spec = kSpec;
    spec.replace(spec.find("fa = false"), 10, "fa = false\nhog = [\"none\", \"cpu9999\"]");
    auto s = ExperimentSpec::load(write_spec(d, spec));
    int with_hog = 0;
    for (const auto& p : s.points(false)) with_hog += p.key().find("hog=cpu9999") != std::string::npos;
    EXPECT_EQ(with_hog, 6);
    auto r = run({profinfer_bin(), "experiment", "run", (d / "spec.toml").string(), "--dry-run"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("skipped: a hog on CPU 9999, but this machine has"), std::string::npos) << r.out;
}
