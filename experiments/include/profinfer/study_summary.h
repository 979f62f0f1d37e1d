#pragma once
// A study's summary: every run's metrics, the points' medians and intervals, the claims'
// verdicts, and the studies across points (MatMul lines, wait methods, backends).
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profinfer/experiment_spec.h"
#include "profinfer/intervals.h"
#include "profinfer/store.h"

namespace profinfer {

// The experiment's table (CSV + Markdown) and figure (PNG + SVG) from its index and
// point DBs, written into out_dir; returns the files written. Only the points of the
// sweep (quick or full) count: an index may also hold the other sweep's points. CALLS_DROPPED:
// the first calls of each trace left out of its metrics (the verdicts' check against a run's
// warm-up calls). Traces not here are read as the index kept their metrics; the outputs that
// need the traces themselves (a point's DAG, stat tables, figures, timeline; matmuls,
// wait methods, backends, sampled shares) are left as they are for those.
std::vector<std::filesystem::path> summarise_experiment(const ExperimentSpec& spec, const std::filesystem::path& out_dir,
                                                        bool quick, int calls_dropped = 0);

// A recorded run of a study's point: its parameters, trace DB and round.
struct StudyPoint {
    std::map<std::string, std::string> params;
    std::filesystem::path db;
    int round = 1;
};

// A point's metrics over the rounds it was recorded in.
struct PointSamples {
    std::map<std::string, std::string> params;
    std::map<std::string, ByRound> metrics;  // metric → round → value
    // METRIC's values by round (none when the point never measured it).
    const ByRound& of(const std::string& metric) const {
        static const ByRound kNone;
        auto it = metrics.find(metric);
        return it == metrics.end() ? kNone : it->second;
    }
    // Whether every parameter of SELECTOR has its value here.
    bool matches(const std::map<std::string, std::string>& selector) const {
        for (const auto& [k, v] : selector)
            if (params.at(k) != v) return false;
        return true;
    }
};

// The samples of every point of the sweep recorded so far in OUT_DIR (its index and runs):
// what the tables, figures and verdicts are computed from.
std::vector<PointSamples> study_samples(const ExperimentSpec& spec, const std::filesystem::path& out_dir, bool quick);

// What a claim may need of the machine.
struct Testbed {
    int cpus = 0;
    bool pmu = false;  // hardware performance counters can be opened
    static Testbed here();
};

struct ClaimResult {
    const Claim* claim = nullptr;
    std::string group;    // the parameters neither side fixes ("model=qwen2.5-1.5b"); empty: one group
    Interval estimate;    // ratio a / b, or a's median
    Verdict verdict = Verdict::NotTestable;
    std::string reason;   // why not testable
};

// Every claim of SPEC on the points' samples: per group, the estimate with its interval and
// the verdict (judge()); not testable, with the reason, when the machine lacks what the
// claim requires, a side has no point, or there are too few rounds for an interval.
// Claims on "fits" or "shares" are judged on DERIVED's samples of that name (summarise_matmuls'
// lines, summarise_sampled_shares' gaps: a sample per round).
using DerivedSamples = std::map<std::string, std::vector<PointSamples>>;
// Every point but the baselines, with a baseline in its group (SPEC's [outputs] baseline), as
// samples of decode_slowdown_pct and prefill_slowdown_pct by round: 100 × (1 − its speed / the
// baseline's in the same round; a server's speed is its throughput) — what claims on
// "baseline" compare (Table 7: two programs' profilers, each against its own program untraced).
std::vector<PointSamples> against_baseline(const ExperimentSpec& spec, const std::vector<PointSamples>& points);
std::vector<ClaimResult> evaluate_claims(const ExperimentSpec& spec, const std::vector<PointSamples>& points,
                                         const Testbed& here, const DerivedSamples& derived = {});

// Paper Fig. 10: every point's weight MatMuls (stat --by matmul) in matmuls.csv, a line
// time = a + b·M·N·K·H per model, type, backend, thread count and batch class (N = 1, N > 1), pooled over the
// models (fit.csv, fit.md), and a log-log figure per thread count; the files, and the lines
// fitted again on each round's shapes alone (params model, type, backend, threads, batch;
// metrics fit_r2, fit_ns_per_mnkh, fit_intercept_us by round): what claims "on fits" judge.
struct MatmulSummary {
    std::vector<std::filesystem::path> files;
    std::vector<PointSamples> fits;
};
MatmulSummary summarise_matmuls(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                const std::filesystem::path& out_dir, const std::string& caption = "");
// Paper Fig. 6, both measures: for points that differ only in their tracer, one recorded
// with --wait exact and one with --wait sampled, per op type and thread the exact wait share
// beside the sampled estimate with its interval and sample count (<study>-wait-methods-tN.csv,
// figure of the same name).
std::vector<std::filesystem::path> summarise_wait_methods(const ExperimentSpec& spec,
                                                          const std::vector<StudyPoint>& points,
                                                          const std::filesystem::path& out_dir,
                                                          const std::string& caption);
// --level op-sampled against --level op (points that differ only in their tracer, paired by
// round): per model and op type the exact share of operator time beside the sampled one, the
// five largest exact op types of each model (<name>-sampled-shares.csv/.md); GAPS: per model,
// each round's largest |sampled − exact| among them (sampled_share_max_gap_pts).
struct SampledShares {
    std::vector<std::filesystem::path> files;
    std::vector<PointSamples> gaps;
};
SampledShares summarise_sampled_shares(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                       const std::filesystem::path& out_dir, const std::string& caption);
std::vector<std::filesystem::path> summarise_matmul_backends(const ExperimentSpec& spec,
                                                             const std::vector<StudyPoint>& points,
                                                             const std::filesystem::path& out_dir,
                                                             const std::string& caption);

}  // namespace profinfer
