// Experiment specs: parsing, sweep expansion, quick overrides, errors; the dry run.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <set>

#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/study_summary.h"
#include "profinfer/results_readme.h"
#include "profinfer/number_text.h"
#include "profinfer/experiment_index.h"
#include "profinfer/trace_metrics.h"
#include "profinfer/table.h"
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
        EXPECT_EQ(p.params.size(), 20u);
        for (const char* later : {"hog", "ot=", "nopo", "mem", "program", "tracer", "routing", "vkperf", "mmap", "clients"})  // at their defaults, left out of the identity
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

// mmap off: llama-bench reads the weights into memory (`-mmp 0`); on, the default, it maps
// the file and the point keeps the identity it had before the parameter existed.
TEST(ExperimentSpec, MmapOffReadsTheWeightsIn) {
    TempDir d;
    std::string spec = kSpec;
    spec.replace(spec.find("threads = [1, 2, 4]"), 19, "threads = [1]\nmmap = [\"on\", \"off\"]");
    auto points = ExperimentSpec::load(write_spec(d, spec)).points(false);
    ASSERT_FALSE(points.empty());
    int off = 0;
    for (const auto& p : points) {
        const auto argv = point_command(p, "m.gguf");
        const auto mmp = std::find(argv.begin(), argv.end(), "-mmp");
        if (p.at("mmap") == "off") {
            ++off;
            ASSERT_NE(mmp, argv.end());
            EXPECT_EQ(*(mmp + 1), "0");
            EXPECT_NE(p.key().find("mmap=off"), std::string::npos) << p.key();
        } else {
            EXPECT_EQ(mmp, argv.end());
            EXPECT_EQ(p.key().find("mmap"), std::string::npos) << p.key();
        }
    }
    EXPECT_EQ(off * 2, int(points.size()));
    spec.replace(spec.find("\"off\"]"), 6, "\"no\"]");
    EXPECT_THROW(ExperimentSpec::load(write_spec(d, spec)), Error);
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
    // Values checked before any run: a thread count of 0, a figure's x that is no parameter.
    for (const auto& [from, to, said] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"threads = [1, 2, 4]", "threads = [0]", "threads is a whole number from 1"},
             {"threads = [1, 2, 4]", "threads = [\"two\"]", "not 'two'"},
             {"x = \"threads\"", "x = \"bogus\"", "x 'bogus' is not a parameter"}}) {
        std::string spec = kSpec;
        ASSERT_NE(spec.find(from), std::string::npos) << from;
        spec.replace(spec.find(from), from.size(), to);
        auto bad_value = run({profinfer_bin(), "experiment", "run", write_spec(d, spec).string(), "--dry-run"});
        expect_one_line_failure(bad_value, said);
    }
    // [duet] load: one of the peer's starts, in a study of duets only.
    std::string duet = kSpec;
    duet.replace(duet.find("[sweep]\n"), 8, "[sweep]\nprogram = [\"duet\"]\n");
    EXPECT_EQ(ExperimentSpec::load(write_spec(d, duet + "[duet]\nload = \"gated\"\n")).duet_load, "gated");
    EXPECT_EQ(ExperimentSpec::load(write_spec(d, duet)).duet_load, "");
    for (const auto& [spec, said] : std::vector<std::pair<std::string, std::string>>{
             {duet + "[duet]\nload = \"halfway\"\n", "[duet] load is together, apart or gated, not 'halfway'"},
             {std::string(kSpec) + "[duet]\nload = \"gated\"\n", "[duet] belongs to a study with program duet"}}) {
        try {
            ExperimentSpec::load(write_spec(d, spec));
            ADD_FAILURE() << "accepted: " << spec;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
        }
    }
}

TEST(ExperimentSpec, EveryShippedSpecLoadsAndDryRuns) {
    int specs = 0;
    // The paper's studies and the investigations (experiments/specs/investigations/).
    int investigations = 0;
    for (const auto& f : fs::recursive_directory_iterator(fs::path(PROFINFER_SOURCE_DIR) / "experiments" / "specs")) {
        if (f.path().extension() != ".toml") continue;
        ++specs;
        investigations += f.path().parent_path().filename() == "investigations";
        auto s = ExperimentSpec::load(f.path());
        EXPECT_FALSE(s.points(true).empty()) << f.path();
        EXPECT_LE(s.points(true).size(), s.points(false).size()) << f.path();
        auto r = run({profinfer_bin(), "experiment", "run", f.path().string(), "--dry-run", "--quick", "--board", "rk3588"});
        EXPECT_EQ(r.status, 0) << f.path() << ": " << r.err;
        EXPECT_NE(r.out.find("points × " + std::to_string(s.quick_rounds) + " interleaved rounds at --level " + s.level), std::string::npos) << r.out;
    }
    EXPECT_GT(specs, investigations);
    EXPECT_GE(investigations, 1);
    // Without --dry-run another board is refused in one line.
    auto r = run({profinfer_bin(), "experiment", "run",
                  (fs::path(PROFINFER_SOURCE_DIR) / "experiments" / "specs" / "thread-scaling.toml").string(), "--board",
                  "rk3588"});
    expect_one_line_failure(r, "rk3588");
}

// A backend the board's profile does not list is skipped saying so, never fetched or built
// for it (the virtual board tried to apt-get BLIS and to fetch the x64 Vulkan package).
TEST(ExperimentSpec, ABackendTheBoardLacksIsSkippedByItsProfile) {
    const std::string spec = (fs::path(PROFINFER_SOURCE_DIR) / "experiments" / "specs" / "backends.toml").string();
    auto r = run({profinfer_bin(), "experiment", "run", spec, "--dry-run", "--quick", "--board", "virt-a76"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("skipped: board virt-a76 has no 'blis' backend"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("skipped: board virt-a76 has no 'vulkan' backend"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("has no 'cpu' backend"), std::string::npos) << r.out;
    // The same spec for a board with every backend names none as missing from the profile.
    auto all = run({profinfer_bin(), "experiment", "run", spec, "--dry-run", "--quick", "--board", "rk3588"});
    ASSERT_EQ(all.status, 0) << all.err;
    EXPECT_EQ(all.out.find("has no 'vulkan' backend"), std::string::npos) << all.out;
}

// A tool a point runs that this machine lacks (bpftrace, missing from the virtual board's
// image, failed each point and then stopped the study) is a skip naming it, found before
// anything runs. The spec is the test's own: a shipped study's quick sweep may leave the
// bpftrace floor out (overhead's did, and this test then found no such point).
TEST(ExperimentSpec, AToolThePointRunsThatIsMissingIsNamed) {
    TempDir d;
    const fs::path spec = write_spec(d, R"(
name = "t"
title = "T"
level = "op"
[sweep]
model = ["llama3.2-1b"]
threads = [1]
tracer = ["none", "bpftrace"]
[figure]
x = "tracer"
series = "threads"
metrics = ["bench_tg_tps"]
)");
    auto r = run({profinfer_bin(), "experiment", "run", spec.string(), "--dry-run", "-o", (d / "o").string()},
                 {{"PATH", d.path().string()}});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("skipped: tracer bpftrace, program llama-bench: cannot run bpftrace: not found in PATH"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("tracer=none,type=q4_0\n    skipped: tracer"), std::string::npos) << r.out;
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

namespace {
const char* kClaims = R"(
name = "c"
title = "C"
[sweep]
model = ["llama3.2-1b", "qwen2.5-1.5b"]
ctx = [0, 2048]
[figure]
x = "ctx"
metrics = ["decode_tps"]
[[claim]]
says = "Decode slows as the KV cache grows"
metric = "decode_tps"
a = { ctx = 2048 }
b = { ctx = 0 }
expect = "a < b"
[[claim]]
says = "MatMul is most of decode"
metric = "mul_mat_share_pct"
value = 97
expect = "a > value"
[[claim]]
says = "The bandwidth wall"
metric = "decode_tps"
a = { ctx = 0 }
b = { ctx = 2048 }
expect = "a > b"
requires_cpus = 64
)";

// Per model: decode t/s at ctx 0 and 2048 over 7 rounds, the second model's two points
// drawn from overlapping ranges.
std::vector<PointSamples> synthetic(const ExperimentSpec& s, double llama_gap, double qwen_gap) {
    std::vector<PointSamples> out;
    const double wobble[7] = {-1.0, 0.5, 1.2, -0.3, 0.8, -0.9, 0.1};
    for (const auto& p : s.points(false)) {
        PointSamples ps{p.params, {}};
        const bool qwen = p.at("model") == "qwen2.5-1.5b", deep = p.at("ctx") == "2048";
        for (int r = 0; r < 7; ++r) {
            // Independent noise per point (no shared drift), ±1 t/s around 40 minus the gap.
            const double noise = wobble[(r + (deep ? 3 : 0)) % 7];
            ps.metrics["decode_tps"][r + 1] = 40 - (deep ? (qwen ? qwen_gap : llama_gap) : 0) + noise;
            ps.metrics["mul_mat_share_pct"][r + 1] = 92 + noise;
        }
        out.push_back(ps);
    }
    return out;
}

Verdict verdict_of(const std::vector<ClaimResult>& rs, const std::string& says, const std::string& group) {
    for (const auto& r : rs)
        if (r.claim->says == says && r.group == group) return r.verdict;
    ADD_FAILURE() << "no result for " << says << " / " << group;
    return Verdict::NotTestable;
}
}  // namespace

TEST(ExperimentSpec, ClaimsAreReadWithTheirSides) {
    TempDir d;
    const auto s = ExperimentSpec::load(write_spec(d, kClaims));
    ASSERT_EQ(s.claims.size(), 3u);
    EXPECT_EQ(s.claims[0].a.at("ctx"), "2048");
    EXPECT_FALSE(s.claims[0].expect_greater);
    EXPECT_EQ(s.claims[0].expectation(), "a < b");
    ASSERT_TRUE(s.claims[1].value);
    EXPECT_DOUBLE_EQ(*s.claims[1].value, 97);
    EXPECT_EQ(s.claims[2].requires_cpus, 64);
    EXPECT_EQ(s.rounds, 5);
    EXPECT_EQ(s.quick_rounds, 2);
    for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
             {"expect = \"a < b\"", "expect = \"b < a\""},
             {"a = { ctx = 2048 }", "a = { nope = 1 }"},
             {"name = \"c\"", "name = \"c\"\nrounds = 3"}}) {
        std::string text = kClaims;
        text.replace(text.find(bad), bad.size(), says);
        EXPECT_THROW(ExperimentSpec::load(write_spec(d, text)), Error) << says;
    }
}

// The verdict follows the intervals: a 10 t/s drop is reproduced for each model; when one
// model's two points overlap (a 0.3 t/s drop inside ±1 t/s of noise) its verdict is
// "within noise", the other's unchanged; 92 % against "> 97 %" is not reproduced; a claim
// needing 64 CPUs is not testable here, saying why.
TEST(ExperimentSpec, VerdictFlipsToWithinNoiseWhenIntervalsOverlap) {
    TempDir d;
    const auto s = ExperimentSpec::load(write_spec(d, kClaims));
    const Testbed small{2, false};
    auto clear = evaluate_claims(s, synthetic(s, 10, 10), small);
    EXPECT_EQ(verdict_of(clear, "Decode slows as the KV cache grows", "model=llama3.2-1b"), Verdict::Reproduced);
    EXPECT_EQ(verdict_of(clear, "Decode slows as the KV cache grows", "model=qwen2.5-1.5b"), Verdict::Reproduced);
    auto overlap = evaluate_claims(s, synthetic(s, 10, 0.3), small);
    EXPECT_EQ(verdict_of(overlap, "Decode slows as the KV cache grows", "model=llama3.2-1b"), Verdict::Reproduced);
    EXPECT_EQ(verdict_of(overlap, "Decode slows as the KV cache grows", "model=qwen2.5-1.5b"), Verdict::WithinNoise);
    EXPECT_EQ(verdict_of(overlap, "MatMul is most of decode", "ctx=0, model=llama3.2-1b"), Verdict::NotReproduced);
    EXPECT_EQ(verdict_of(overlap, "The bandwidth wall", ""), Verdict::NotTestable);
    for (const auto& r : overlap)
        if (r.claim->says == "The bandwidth wall") {
            EXPECT_NE(r.reason.find("64 CPUs"), std::string::npos) << r.reason;
        }
    EXPECT_EQ(verdict_of(evaluate_claims(s, synthetic(s, 10, 10), Testbed{64, false}), "The bandwidth wall", "model=llama3.2-1b"),
              Verdict::Reproduced);
    // Two rounds: no interval, so no verdict either way.
    auto two = synthetic(s, 10, 10);
    for (auto& p : two)
        for (auto& [m, by] : p.metrics) by.erase(by.upper_bound(2), by.end());
    const auto few = evaluate_claims(s, two, small);
    EXPECT_EQ(verdict_of(few, "Decode slows as the KV cache grows", "model=llama3.2-1b"), Verdict::NotTestable);
    for (const auto& r : few)
        if (r.group == "model=llama3.2-1b" && r.claim->says.starts_with("Decode")) {
            EXPECT_NE(r.reason.find("too few"), std::string::npos) << r.reason;
        }
}

// "a - b < value" (factor: a − factor × b): each round's difference, paired, judged against
// value — testable where b crosses 0 (a ratio to it is not), and read back as written.
TEST(ExperimentSpec, ADifferenceClaimIsJudgedWhereARatioCannotBe) {
    TempDir d;
    const std::string text = std::string(kClaims) + R"(
[[claim]]
says = "Deep context costs at most 1.2 times the shallow one, plus 5"
metric = "decode_tps"
a = { ctx = 2048 }
b = { ctx = 0 }
factor = 1.2
value = 5
expect = "a - b < value"
)";
    const auto s = ExperimentSpec::load(write_spec(d, text));
    ASSERT_EQ(s.claims.size(), 4u);
    EXPECT_TRUE(s.claims[3].difference);
    EXPECT_EQ(s.claims[3].expectation(), "a − 1.2 × b < value");
    auto points = synthetic(s, 10, 10);
    for (auto& p : points)  // b crosses 0 in one round: a ratio claim would be not testable
        if (p.params.at("ctx") == "0") p.metrics["decode_tps"].begin()->second = 0;
    for (const auto& r : evaluate_claims(s, points, Testbed{2, false})) {
        if (r.claim != &s.claims[3]) continue;
        // 30 − 1.2 × 40 = −18 per round (−18 ± noise; the zeroed round: 30 − 0 = 30): under 5.
        EXPECT_EQ(r.verdict, Verdict::Reproduced) << r.group << ": " << r.estimate.median;
        EXPECT_NEAR(r.estimate.median, -18, 2.5) << r.group;
    }
    std::string no_value = text.substr(0, text.rfind("value = 5")) + "expect = \"a - b < value\"\n";
    EXPECT_THROW(ExperimentSpec::load(write_spec(d, no_value)), Error) << "a difference needs value";
}

// "a ~ b" / "a ~ value" with margin: an equivalence (the paper's "unaffected", "does not
// grow") — reproduced only when the whole interval lies within the margin, not reproduced when
// it lies wholly outside, within noise when the interval is too wide to tell; read back as
// written; margin and "~" only together.
TEST(ExperimentSpec, AnEquivalenceClaimIsReproducedOnlyInsideItsMargin) {
    TempDir d;
    auto with = [&](const std::string& claims) { return ExperimentSpec::load(write_spec(d, std::string(kClaims) + claims)); };
    const auto s = with(R"(
[[claim]]
says = "Deep context leaves decode unaffected"
metric = "decode_tps"
a = { ctx = 2048 }
b = { ctx = 0 }
margin = 0.1
expect = "a ~ b"
[[claim]]
says = "The same, to a hundredth"
metric = "decode_tps"
a = { ctx = 2048 }
b = { ctx = 0 }
margin = 0.01
expect = "a ~ b"
[[claim]]
says = "MatMul is 92 % of decode"
metric = "mul_mat_share_pct"
a = { ctx = 0 }
value = 92
margin = 5
expect = "a ~ value"
[[claim]]
says = "MatMul is 80 % of decode"
metric = "mul_mat_share_pct"
a = { ctx = 0 }
value = 80
margin = 5
expect = "a ~ value"
)");
    ASSERT_EQ(s.claims.size(), 7u);
    EXPECT_EQ(s.claims[3].expectation(), "a ≈ b ± 0.1");
    EXPECT_EQ(s.claims[5].expectation(), "a ≈ value ± 5");
    // llama: deep 0.2 t/s slower (a ratio of ~0.995 ± ~3 %), qwen: 10 slower (0.75).
    const auto rs = evaluate_claims(s, synthetic(s, 0.2, 10), Testbed{2, false});
    EXPECT_EQ(verdict_of(rs, "Deep context leaves decode unaffected", "model=llama3.2-1b"), Verdict::Reproduced);
    EXPECT_EQ(verdict_of(rs, "Deep context leaves decode unaffected", "model=qwen2.5-1.5b"), Verdict::NotReproduced);
    EXPECT_EQ(verdict_of(rs, "The same, to a hundredth", "model=llama3.2-1b"), Verdict::WithinNoise);
    for (const char* model : {"model=llama3.2-1b", "model=qwen2.5-1.5b"}) {
        EXPECT_EQ(verdict_of(rs, "MatMul is 92 % of decode", model), Verdict::Reproduced) << model;
        EXPECT_EQ(verdict_of(rs, "MatMul is 80 % of decode", model), Verdict::NotReproduced) << model;
    }
    const std::string base = "\n[[claim]]\nsays = \"x\"\nmetric = \"decode_tps\"\na = { ctx = 2048 }\nb = { ctx = 0 }\n";
    EXPECT_THROW(with(base + "expect = \"a ~ b\"\n"), Error) << "an equivalence needs its margin";
    EXPECT_THROW(with(base + "margin = 0.1\nexpect = \"a < b\"\n"), Error) << "a margin belongs to an equivalence";
    EXPECT_THROW(with(base + "margin = -1\nexpect = \"a ~ b\"\n"), Error) << "a margin is positive";
}

// over = PARAM: a trend over the whole sweep — per group and round the least-squares slope of
// the metric against PARAM, its median and interval held against value (not one chosen pair
// of the sweep's points); the axis itself names no group; what it cannot take is refused.
TEST(ExperimentSpec, ATrendClaimReadsTheSlopeOverTheWholeSweep) {
    TempDir d;
    auto with = [&](const std::string& claims) { return ExperimentSpec::load(write_spec(d, std::string(kClaims) + claims)); };
    const auto s = with(R"(
[[claim]]
says = "Decode slows over the whole context sweep"
metric = "decode_tps"
over = "ctx"
value = 0
expect = "a < value"
)");
    ASSERT_EQ(s.claims.size(), 4u);
    EXPECT_EQ(s.claims[3].expectation(), "slope over ctx < value");
    // llama: 10 t/s slower at 2048 (a slope of about −0.0049 t/s per token), qwen: 0.3 slower
    // within ±1 of noise.
    const auto rs = evaluate_claims(s, synthetic(s, 10, 0.3), Testbed{2, false});
    EXPECT_EQ(verdict_of(rs, "Decode slows over the whole context sweep", "model=llama3.2-1b"), Verdict::Reproduced);
    EXPECT_EQ(verdict_of(rs, "Decode slows over the whole context sweep", "model=qwen2.5-1.5b"), Verdict::WithinNoise);
    for (const auto& r : rs)
        if (r.claim == &s.claims[3] && r.group == "model=llama3.2-1b") {
            EXPECT_NEAR(r.estimate.median, -10.0 / 2048, 1.5 / 2048);
        }
    const std::string base = "\n[[claim]]\nsays = \"x\"\nmetric = \"decode_tps\"\nover = \"ctx\"\n";
    EXPECT_THROW(with(base + "expect = \"a < b\"\nb = { ctx = 0 }\n"), Error) << "a trend has no b";
    EXPECT_THROW(with(base + "expect = \"a < value\"\n"), Error) << "a trend needs value";
    EXPECT_THROW(with(base + "a = { ctx = 0 }\nvalue = 0\nexpect = \"a < value\"\n"), Error) << "a cannot fix the axis";
}

// A ratio claim whose b is not above 0 in every round (a slowdown within its noise) is not
// testable, saying why, rather than judged on ratios that swing through ±∞.
TEST(ExperimentSpec, ARatioToAValueThatCrossesZeroIsNotTestable) {
    TempDir d;
    const auto s = ExperimentSpec::load(write_spec(d, kClaims));
    auto decode_claim = [](const std::vector<ClaimResult>& rs) -> const ClaimResult* {
        for (const auto& r : rs)
            if (r.claim->says == "Decode slows as the KV cache grows" && r.group == "model=llama3.2-1b") return &r;
        return nullptr;
    };
    auto points = synthetic(s, 10, 10);
    const auto before = evaluate_claims(s, points, Testbed{2, false});  // kept: fine points into it
    const auto* fine = decode_claim(before);
    ASSERT_NE(fine, nullptr);
    EXPECT_NE(fine->verdict, Verdict::NotTestable);
    bool changed = false;
    for (auto& p : points)  // one round of each b side at 0: a speed that cannot be, a slowdown that can
        if (p.params.at("model") == "llama3.2-1b")
            for (auto& [m, by] : p.metrics) by.begin()->second = 0, changed = true;
    ASSERT_TRUE(changed);
    const auto rs = evaluate_claims(s, points, Testbed{2, false});
    const auto* zero = decode_claim(rs);
    ASSERT_NE(zero, nullptr);
    EXPECT_EQ(zero->verdict, Verdict::NotTestable);
    EXPECT_NE(zero->reason.find("not above 0 in 1 of"), std::string::npos) << zero->reason;
}

// A claim between two metrics of the same points (metric_b) that one side never measured
// (Fig. 8's "before the hog" when the hog starts before the first decode call) is not
// testable, naming the metric and the side that has none — not the other one.
TEST(ExperimentSpec, AMetricMissingOnOneSideIsNamedWithItsSide) {
    TempDir d;
    const std::string within = R"(
[[claim]]
says = "Slower during than before"
metric = "decode_tps_during_hog"
metric_b = "decode_tps_before_hog"
a = { ctx = 0 }
b = { ctx = 0 }
expect = "a < b"
)";
    const auto s = ExperimentSpec::load(write_spec(d, std::string(kClaims) + within));
    const Claim& c = s.claims.back();
    EXPECT_EQ(c.compared(), "decode_tps_during_hog / decode_tps_before_hog");
    EXPECT_EQ(s.claims.front().compared(), "decode_tps");
    auto reason_of = [&](const std::vector<PointSamples>& points) {
        for (const auto& r : evaluate_claims(s, points, Testbed{2, false}))
            if (r.claim == &c && r.group == "model=llama3.2-1b") {
                EXPECT_EQ(r.verdict, Verdict::NotTestable);
                return r.reason;
            }
        ADD_FAILURE() << "no result";
        return std::string();
    };
    auto points = synthetic(s, 10, 10);
    EXPECT_EQ(reason_of(points), "decode_tps_during_hog was not measured in a; decode_tps_before_hog was not measured in b");
    for (auto& p : points)
        for (int r = 1; r <= 7; ++r) p.metrics["decode_tps_during_hog"][r] = 20 + r;
    EXPECT_EQ(reason_of(points), "decode_tps_before_hog was not measured in b");
    for (auto& p : points)
        for (int r = 1; r <= 7; ++r) p.metrics["decode_tps_before_hog"][r] = 40 + r;
    for (const auto& r : evaluate_claims(s, points, Testbed{2, false})) {
        if (r.claim == &c) {
            EXPECT_EQ(r.verdict, Verdict::Reproduced) << r.group << ": " << r.reason;
        }
    }
}

// A claim on the fitted lines is judged on the lines' per-round samples, grouped like a
// point claim; its selectors name a line's parameters (batch among them), which a claim on
// the points may not.
TEST(ExperimentSpec, ClaimsOnFitsJudgeTheLinesPerRound) {
    TempDir d;
    const std::string fits_claim = R"(
[[claim]]
says = "Linear in MNKH"
on = "fits"
metric = "fit_r2"
a = { model = "all", batch = "n=1" }
expect = "a > value"
value = 0.95
)";
    const auto s = ExperimentSpec::load(write_spec(d, std::string(kSpec) + fits_claim));
    ASSERT_EQ(s.claims.size(), 1u);
    EXPECT_EQ(s.claims[0].on, "fits");
    auto line = [](const std::string& model, const std::string& type, double r2) {
        PointSamples p{{{"model", model}, {"type", type}, {"backend", "cpu"}, {"threads", "2"}, {"batch", "n=1"}}, {}};
        const double wobble[5] = {-0.004, 0.002, 0.003, -0.001, 0.0};
        for (int r = 0; r < 5; ++r) p.metrics["fit_r2"][r + 1] = r2 + wobble[r];
        return p;
    };
    const std::vector<PointSamples> fits{line("all", "q4_0", 0.99), line("all", "q8_0", 0.90), line("llama3.2-1b", "q4_0", 0.5)};
    const auto rs = evaluate_claims(s, {}, Testbed{2, false}, {{"fits", fits}});
    std::map<std::string, Verdict> by_group;
    for (const auto& r : rs) by_group[r.group] = r.verdict;
    EXPECT_EQ(by_group, (std::map<std::string, Verdict>{{"type=q4_0", Verdict::Reproduced}, {"type=q8_0", Verdict::NotReproduced}}));
    // No line: not testable, saying so.
    const auto none = evaluate_claims(s, {}, Testbed{2, false});
    ASSERT_EQ(none.size(), 1u);
    EXPECT_EQ(none[0].verdict, Verdict::NotTestable);
    EXPECT_NE(none[0].reason.find("no fitted line"), std::string::npos) << none[0].reason;
    // batch is a line's parameter, not a point's; "on" takes fits or nothing.
    std::string on_points = fits_claim;
    on_points.replace(on_points.find("on = \"fits\"\n"), 12, "");
    EXPECT_THROW(ExperimentSpec::load(write_spec(d, std::string(kSpec) + on_points)), Error);
    std::string on_what = fits_claim;
    on_what.replace(on_what.find("\"fits\""), 6, "\"lines\"");
    EXPECT_THROW(ExperimentSpec::load(write_spec(d, std::string(kSpec) + on_what)), Error);
}

// Table 7: two programs' profilers, each against its own program untraced in the same round
// (on = "baseline"): the per-round difference of their slowdowns, not of their speeds.
TEST(ExperimentSpec, ClaimsOnTheBaselineCompareEachPointsOwnSlowdown) {
    TempDir d;
    const std::string spec = R"(
name = "t"
title = "T"
[[sweep]]
program = ["llama-bench"]
tracer = ["none", "op"]
mmap = "off"
[[sweep]]
program = ["ort"]
tracer = ["none", "ort-profile"]
[outputs]
baseline = { tracer = "none" }
[figure]
x = "tracer"
metrics = ["bench_tg_tps"]
[[claim]]
says = "op costs less than ORT's profiler"
on = "baseline"
metric = "decode_slowdown_pct"
a = { tracer = "op", program = "llama-bench", mmap = "off" }
b = { tracer = "ort-profile", program = "ort" }
value = 0
expect = "a - b < value"
)";
    const auto s = ExperimentSpec::load(write_spec(d, spec));
    // llama-bench at 40 t/s untraced and ORT at 20: op slows its program by OP %, the profiler
    // its own by 15 % (in speeds, op's side is always the faster one: no measure of cost).
    auto points = [](double op_pct) {
        auto point = [](const std::string& program, const std::string& tracer, double tps) {
            PointSamples p{{{"program", program}, {"tracer", tracer}, {"mmap", program == "ort" ? "on" : "off"}, {"gen", "48"}}, {}};
            const double wobble[5] = {-0.3, 0.1, 0.2, -0.1, 0.0};
            for (int r = 0; r < 5; ++r) p.metrics["bench_tg_tps"][r + 1] = tps * (1 + wobble[r] / 100);
            return p;
        };
        return std::vector<PointSamples>{point("llama-bench", "none", 40), point("llama-bench", "op", 40 * (1 - op_pct / 100)),
                                          point("ort", "none", 20), point("ort", "ort-profile", 17)};
    };
    for (const auto& [op_pct, expected] : {std::pair<double, Verdict>{5, Verdict::Reproduced}, {25, Verdict::NotReproduced}}) {
        SCOPED_TRACE(op_pct);
        const auto pts = points(op_pct);
        const auto derived = against_baseline(s, pts);
        ASSERT_EQ(derived.size(), 2u);  // the baselines are not compared
        const auto rs = evaluate_claims(s, pts, Testbed{2, false}, {{"baseline", derived}});
        ASSERT_EQ(rs.size(), 1u);
        EXPECT_EQ(rs[0].verdict, expected) << rs[0].reason;
        EXPECT_NEAR(rs[0].estimate.median, op_pct - 15, 0.5);
    }
    // A claim on the baseline needs one.
    std::string no_baseline = spec;
    no_baseline.replace(no_baseline.find("[outputs]\nbaseline = { tracer = \"none\" }\n"), 41, "");
    EXPECT_THROW(ExperimentSpec::load(write_spec(d, no_baseline)), Error);
}

TEST(ExperimentSpec, FigureKindsAreChecked) {
    TempDir d;
    const auto s = ExperimentSpec::load(write_spec(d, std::string(kSpec) + "[outputs]\nfigures = [\"timeline\", \"threads\"]\n"));
    EXPECT_EQ(s.figures, (std::vector<std::string>{"timeline", "threads"}));
    try {
        ExperimentSpec::load(write_spec(d, std::string(kSpec) + "[outputs]\nfigures = [\"timeline\", \"gantt\"]\n"));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gantt"), std::string::npos) << e.what();
    }
}

TEST(ExperimentSpec, RoundsVisitEveryPointInChangingOrders) {
    std::set<std::vector<size_t>> orders;
    for (int round = 1; round <= 6; ++round) {
        const auto o = round_order("s", round, 10);
        EXPECT_EQ(o, round_order("s", round, 10));  // the same on a resume
        std::set<size_t> seen(o.begin(), o.end());
        EXPECT_EQ(seen.size(), 10u);
        EXPECT_EQ(*seen.rbegin(), 9u);
        orders.insert(o);
    }
    EXPECT_EQ(orders.size(), 6u);
}

// The study metrics of the recorded golden traces: MoE time and faults only where there are
// MoE nodes, the steady state apart from the cold first call; the KQ/weight ratio only
// where KQ and KQV are MatMuls (flash attention off; the golden traces ran it on).
TEST(TraceMetrics, MoeAndAttentionMetricsOnlyWhereTheirNodesAre) {
    const fs::path golden = fs::path(PROFINFER_SOURCE_DIR) / "tests" / "golden";
    const auto moe = trace_metrics(*open_trace(golden / "qwen1.5-moe-a2.7b-full.db"));
    ASSERT_TRUE(moe["moe_ms_per_token"].is_number()) << moe.dump();
    EXPECT_GT(moe["moe_ms_per_token"].get<double>(), 0);
    EXPECT_GT(moe["moe_first_call_ms"].get<double>(), 0);
    // MoE nodes are part of the decode operator time.
    EXPECT_LT(moe["moe_ms_per_token"].get<double>(), moe["op_ms_per_token"].get<double>() * 1.5);
    const auto dense = trace_metrics(*open_trace(golden / "llama3.2-1b-full.db"));
    EXPECT_TRUE(dense["moe_ms_per_token"].is_null());
    EXPECT_TRUE(dense["moe_first_call_ms"].is_null());
    EXPECT_TRUE(dense["kq_over_weight_ratio"].is_null());  // FLASH_ATTN_EXT: no KQ MatMul
}

// The results README is generated whole from the studies' tables: every number in it is a
// number of the study's verdicts.csv or table.csv, or of machine.json, as those tables print
// it; nothing is carried over from the README it replaces.
TEST(ResultsReadme, EveryNumberComesFromATable) {
    TempDir d;
    const fs::path study = d / "across-tokens";
    fs::create_directories(study);
    ASSERT_EQ(run({"sqlite3", study / "index.db",
                   "CREATE TABLE experiment (key TEXT PRIMARY KEY, value TEXT); INSERT INTO experiment VALUES "
                   "('name', 'across-tokens'), ('title', 'Decode against context'), ('paper', 'Fig. 9'), ('level', 'op'), "
                   "('board', 'host'), ('quick', '0'), ('rounds', '7')"})
                  .status,
              0);
    std::ofstream(study / "verdicts.csv")
        << "claim,metric,expect,a,b,group,estimate,lo,hi,n,verdict,reason\n"
           "Decode slows,decode_tps,a < b,ctx=512,ctx=0,fa=off,0.8123,0.7912,0.8344,7,reproduced,\n"
           "Attention grows,attention_share_pct,a > value,ctx=512,33,fa=on,31.27,29.01,35.5,7,within noise,\n"
           "The wall,decode_tps,a < b,threads=4,threads=2,,,,,0,not testable here,needs 4 CPUs or more; this machine has 2\n";
    std::ofstream(study / "table.csv") << "ctx,fa,n,decode_tps_cv_pct,decode_tps,decode_tps_lo,decode_tps_hi\n"
                                          "0,off,7,1.234,40.1,39,41\n512,off,7,4.321,32.5,31,33\n";
    std::ofstream(d / "machine.json")
        << R"({"cpu": "Test CPU", "host": "h", "isa": "f32: avx2", "roofs": [{"threads": 1, "triad_gbs": 21.456, "peak_gflops_f32": 99.87}]})";
    std::ofstream(d / "reproduce.json") << R"({"started": 1000, "finished": 7006, "quick": 0, "commit": "abc1234"})";
    // A study recorded again after that run (two runs 90 s apart, 2026-12-03): named with its
    // day; how long it took is its own README's number, not computed again here.
    {
        const fs::path again = d / "backends";
        fs::create_directories(again);
        store::ExperimentIndex ix(again / "index.db", store::ExperimentIndex::Mode::Write);
        for (const auto& [fact, value] : std::map<std::string, std::string>{
                 {"name", "backends"}, {"title", "Backends"}, {"paper", "Fig. 9"}, {"board", "host"}, {"quick", "0"}})
            ix.set_fact(fact, value);
        for (int round : {1, 2})
            ix.put({.id = "p", .round = round, .status = "done", .started_at = 1796300000.0 + 90 * round,
                    .ended_at = 1796300000.0 + 90 * round + 37});
        std::ofstream(again / "verdicts.csv") << "claim,metric,expect,a,b,group,estimate,lo,hi,n,verdict,reason\n";
        std::ofstream(again / "table.csv") << "n,decode_tps_cv_pct\n";
    }
    const auto r = run({profinfer_bin(), "experiment", "readme", d.path()});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string readme = read_file(d / "README.md");
    EXPECT_NE(readme.find("[backends](backends/) (2026-12-03)"), std::string::npos) << readme;
    // A folder not named after its studies' board ("host") keeps another machine's records: the title says so.
    EXPECT_NE(readme.find("# Results on `host`, kept in `results/" + d.path().filename().string() + "/`"), std::string::npos)
        << readme;
    // What the tables hold, printed as the tables print numbers.
    std::set<std::string> allowed;
    for (double v : {0.8123, 0.7912, 0.8344, 31.27, 29.01, 35.5, 1.234, 4.321, 21.456, 99.87, 33.0, 7.0, 4.0, 2.0, 1.0, 0.0,
                     (7006 - 1000) / 60.0})
        allowed.insert(format_double(v));
    for (const char* words : {"9", "512", "95", "3", "5", "2026", "12", "03"})  // Fig. 9, ctx=512, 95 %, 3 digits, QUICK, a day
        allowed.insert(words);
    for (const char* must : {"0.812 [0.791, 0.834]", "31.3 [29, 35.5]", "**within noise**", "needs 4 CPUs or more",
                             "1.23–4.32", "Test CPU", "21.5 GB/s", "100 minutes", "QUICK=0` at commit `abc1234`"})
        EXPECT_NE(readme.find(must), std::string::npos) << must << "\n" << readme;
    // Every number of the README (outside links and the generated-by comment) is one of those.
    std::regex number(R"((?:^|[^\w.\-/])(\d+(?:\.\d+)?))");
    std::istringstream lines(readme);
    for (std::string line; std::getline(lines, line);) {
        if (line.starts_with("<!--")) continue;
        line = std::regex_replace(line, std::regex(R"(\]\([^)]*\))"), "]");  // link targets
        line = std::regex_replace(line, std::regex(R"(`[^`]*`)"), "");         // commands, file names
        for (std::sregex_iterator it(line.begin(), line.end(), number), end; it != end; ++it)
            EXPECT_TRUE(allowed.count((*it)[1])) << "'" << (*it)[1] << "' in: " << line;
    }
}

// The committed results/host/README.md is what `profinfer experiment readme` writes from the
// committed tables beside it: regenerated from a copy of them (the trace DBs left out), it is
// the same text, so none of its numbers was typed or left behind by an older run.
TEST(ResultsReadme, CommittedReadmeIsGeneratedFromTheCommittedTables) {
    const fs::path host = fs::path(PROFINFER_SOURCE_DIR) / "results" / "host";
    ASSERT_TRUE(fs::exists(host / "README.md")) << host << " has no README.md: results/host is committed with the project";
    TempDir tmp;
    const fs::path d = tmp / "host";  // named as its board, as results/host is
    size_t copied = 0;
    for (const auto& e : fs::directory_iterator(host)) {
        const std::string name = e.path().filename().string();
        if (name == "quick" || name == "README.md") continue;
        if (e.is_regular_file()) {
            fs::create_directories(d);
            fs::copy_file(e.path(), d / name), ++copied;
            continue;
        }
        fs::create_directories(d / name);
        for (const auto& f : fs::directory_iterator(e.path()))  // the study's tables, not its points/
            if (f.is_regular_file()) fs::copy_file(f.path(), d / name / f.path().filename()), ++copied;
    }
    ASSERT_GT(copied, 0u);
    const auto r = run({profinfer_bin(), "experiment", "readme", d});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(read_file(d / "README.md"), read_file(host / "README.md"))
        << "results/host/README.md differs from what its tables give: run `build/profinfer experiment readme results/host`";
}

// No verdict of a committed study rests on the first calls of its runs (a run's warm-up: its
// first page faults and first touches): every study whose index keeps its traces' metrics both
// ways is summarised from its index alone (the traces are not committed), with every call and
// with the first two of each trace left out, and each claim's verdict is the same. A study
// whose summaries across points read the traces themselves (Fig. 10's fits) cannot be
// summarised from its index: it is named, not checked here.
TEST(ExperimentSummary, NoVerdictRestsOnTheFirstTwoCalls) {
    const fs::path src(PROFINFER_SOURCE_DIR);
    size_t studies = 0;
    for (const auto& e : fs::directory_iterator(src / "results" / "host")) {
        const std::string name = e.path().filename().string();
        const fs::path index = e.path() / "index.db", spec = src / "experiments" / "specs" / (name + ".toml");
        if (!fs::exists(index) || !fs::exists(spec)) continue;
        if (ExperimentSpec::load(spec).reads_traces_across_points()) {
            std::cout << "[ not from the index ] " << name << ": its summaries across points read every trace\n";
            continue;
        }
        size_t traced = 0;
        bool both = true;
        {
            store::ExperimentIndex ix(index, store::ExperimentIndex::Mode::Read);
            for (const auto& r : ix.done_runs())
                if (!r.db.empty())
                    ++traced, both = both && ix.trace_metrics(r.id, r.round, 0) && ix.trace_metrics(r.id, r.round, 2);
        }
        if (!traced || !both) continue;
        SCOPED_TRACE(name);
        ++studies;
        std::map<std::string, std::string> verdicts[2];
        for (int k = 0; k < 2; ++k) {
            TempDir d;
            fs::copy_file(index, d / "index.db");
            std::vector<std::string> args = {profinfer_bin(), "experiment", "summarise", spec.string(), "-o", d.path().string()};
            if (k) args.insert(args.end(), {"--drop-first-calls", "2"});
            const auto r = run(args);
            ASSERT_EQ(r.status, 0) << r.err;
            for (const auto& v : Table::read_csv_file(d / "verdicts.csv").to_json())
                verdicts[k][v["claim"].get<std::string>() + " | " + v["group"].dump()] = v["verdict"];
            if (k) {
                EXPECT_NE(read_file(d / "table.md").find("first 2 calls of each trace left out"), std::string::npos);
            }
        }
        EXPECT_FALSE(verdicts[0].empty());
        EXPECT_EQ(verdicts[0], verdicts[1]);
    }
    EXPECT_GT(studies, 0u) << "no committed study keeps its traces' metrics both ways: summarise one where its traces "
                              "are, with and without --drop-first-calls 2";
}

// experiment merge: a bad index is named, the last farm.db stays as it was (it was left
// half-built), a farm.db that is a link is not replaced; experiment readme names a bad table.
TEST(FarmMerge, ABadIndexIsNamedAndTheLastMergeStays) {
    TempDir d;
    const fs::path farm = d / "farm";
    fs::create_directories(farm / "b1" / "s1");
    {
        store::ExperimentIndex ix(farm / "b1" / "s1" / "index.db", store::ExperimentIndex::Mode::Write);
        ix.set_fact("name", "s1");
        ix.put({.id = "p", .round = 1, .status = "done", .started_at = 1.0, .ended_at = 2.0});
    }
    auto good = run({profinfer_bin(), "experiment", "merge", farm.string()});
    ASSERT_EQ(good.status, 0) << good.err;
    const std::string before = read_file(farm / "farm.db");
    ASSERT_FALSE(before.empty());
    fs::create_directories(farm / "b2" / "s1");
    std::ofstream(farm / "b2" / "s1" / "index.db") << "not a database, whatever a board sent back\n";
    auto bad = run({profinfer_bin(), "experiment", "merge", farm.string()});
    expect_one_line_failure(bad, (farm / "b2" / "s1" / "index.db").string());
    EXPECT_EQ(read_file(farm / "farm.db"), before) << "the last merge was replaced by a half-built one";
    for (const auto& e : fs::directory_iterator(farm))
        EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos) << e.path();
    fs::remove(farm / "b2" / "s1" / "index.db");
    fs::rename(farm / "farm.db", d / "elsewhere.db");
    fs::create_symlink(d / "elsewhere.db", farm / "farm.db");
    auto linked = run({profinfer_bin(), "experiment", "merge", farm.string()});
    expect_one_line_failure(linked, "symbolic link");
    EXPECT_TRUE(fs::is_symlink(farm / "farm.db"));

    const fs::path results = d / "results";
    fs::create_directories(results / "s1");
    fs::copy_file(farm / "b1" / "s1" / "index.db", results / "s1" / "index.db");
    std::ofstream(results / "s1" / "verdicts.csv") << "claim,metric\n\"unterminated,1,2,3\n";
    auto readme = run({profinfer_bin(), "experiment", "readme", results.string()});
    EXPECT_NE(readme.status, 0);
    EXPECT_NE(readme.err.find("verdicts.csv"), std::string::npos) << readme.err;
}
