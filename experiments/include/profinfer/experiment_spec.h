#pragma once
// A study as its spec says it (experiments/specs/*.toml): the sweep of points, the claims of
// the paper it tests, what it writes. docs/experiments.md describes the format.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace profinfer {

// One sweep point: the value of every parameter.
struct SweepPoint {
    std::map<std::string, std::string> params;  // model, type, threads, backend, ctx, prompt, gen, fa, ngl, reps, hog, ot, nopo, mem, program, tracer
    std::string key() const;                    // "backend=cpu,ctx=0,..." (sorted), the point's identity
    std::string id() const;                     // short stable file name from key()
    const std::string& at(const std::string& name) const;
};

// One testable comparison that states a claim of the paper on a study's metrics
// ([[claim]] in a spec): "a > b" or "a < b" between the points selected by A and by B
// (their medians' ratio against 1), or "a > value" / "a < value" (a's median against a
// number). Evaluated once per combination of the parameters neither side fixes (e.g. per
// model), from every round of the points (docs/experiments.md).
struct Claim {
    std::string says;                                  // the paper's claim, in words
    std::string metric, metric_b;                      // b's metric: metric_b, else metric
    std::map<std::string, std::string> a, b;           // parameter → value selecting each side
    std::optional<double> value;                       // "a > value": the number a is held against
    bool expect_greater = true;                        // "a > …" (else "a < …")
    double factor = 1;                                 // "a > 0.95 × b": the ratio a / b is held against it
    // "a - b < value" (with factor: a − factor × b): each round's difference held against
    // value — for metrics that cross 0 within their noise (a slowdown of ~1 %), where a
    // ratio to b swings through ±∞.
    bool difference = false;
    // "a ~ b" / "a ~ value" with margin m: an equivalence — a / b within 1 ± m, or a within
    // value ± m (with difference: a − b within value ± m); the paper's "unaffected".
    std::optional<double> margin;
    // over = "ctx": a trend over the whole sweep of that (numeric) parameter — per group and
    // round, the least-squares slope of the metric against it, held against value.
    std::string over;
    int requires_cpus = 0;                             // fewer online CPUs: not testable here
    bool requires_pmu = false;                         // no hardware counters: not testable here
    std::string not_testable;                          // why it cannot be tested on any machine like this one
    // What the claim is about: the sweep's points (""), the study's fitted lines ("fits":
    // matmul-dims' lines per model/type/backend/threads/batch, fitted once per round; metrics
    // fit_r2, fit_ns_per_mnkh, fit_intercept_us), or op-sampled's shares against op's
    // ("shares": per model/type/threads, sampled_share_max_gap_pts by round).
    std::string on;
    std::string expectation() const;                   // "a > b", "a < value", as written
    std::string compared() const;                      // "metric", or "metric / metric_b"
};

struct ExperimentSpec {
    std::string name, title, paper;  // paper: the figure or table it reproduces
    std::string level = "op";        // tracer level for every point
    std::string wait;                // record --wait at --level full (exact, sampled; empty: record's default)
    std::string scale = "full";      // model scale: full, or tiny (tests)
    // [duet] load: how program duet starts its two sides' model loads (duet_peer.py --load:
    // together, apart, gated; empty: the peer's default).
    std::string duet_load;
    // parameter → values: one sweep ([sweep]) or several joined ([[sweep]]).
    std::vector<std::map<std::string, std::vector<std::string>>> sweeps;
    std::map<std::string, std::vector<std::string>> quick_sweep;  // overrides in --quick, for every sweep
    // The figure: metric on y against parameter x, a line per value of series.
    std::string x, series;
    std::vector<std::string> metrics;
    std::vector<std::string> notes;  // what the study needs or how to read it
    // Per-point outputs ([outputs]): the DAG of the middle layer's block ("attn", "ffn",
    // "layer"; empty: none), statistics tables (stat --by VALUE, CSV), the timeline (gzip).
    std::string dag;
    std::vector<std::string> stats;
    bool timeline = false;
    std::vector<std::string> figures;  // the recording's figures per point (kFigureKinds: timeline, threads, …)
    // Paper Fig. 10 across the points: matmuls.csv, fit.csv/.md and a figure per thread count.
    bool matmuls = false;
    // Paper Fig. 12 across the points: per weight-MatMul shape of decode, the CPU points' time
    // (their traces) beside the Vulkan points' device time (vkperf = on: ggml-vulkan's
    // timestamps), matmul-backends.csv/.md and a log-axis bar figure.
    bool matmul_backends = false;
    // --level op-sampled against --level op on the same workload (points that differ only in
    // their tracer): per op type the exact and the sampled share with intervals,
    // <name>-sampled-shares.csv/.md, and what claims on "shares" judge.
    bool sampled_shares = false;
    // The table of every point against the point of its group that BASELINE selects
    // (vs-baseline.csv/md: slowdown and CPU time with intervals; e.g. { tracer = "none" }).
    std::map<std::string, std::string> baseline;
    // Operator times of profinfer against llama.cpp's eval callback (program evalcb, tracer op
    // against tracer evalcb), per round: fidelity.csv/md.
    bool fidelity = false;
    // Each traced run of a level (as record takes it by default) asks `profinfer estimate`
    // what the level should cost, from its own trace (predicted_slowdown_pct; about 1.5 s a
    // run; not in a quick run), shown beside the measured slowdown in vs-baseline.md.
    bool predicted = false;
    // Interleaved rounds: each round records every point once, in an order that changes
    // from round to round. At least 5 for the full sweep, 2 for the quick one.
    int rounds = 5, quick_rounds = 2;
    std::vector<Claim> claims;

    int rounds_for(bool quick) const { return quick ? quick_rounds : rounds; }
    // Whether its summaries across points (matmuls, matmul_backends, sampled_shares, the
    // threads figure) read every trace: then it is summarised only where its traces are.
    bool reads_traces_across_points() const;

    static ExperimentSpec load(const std::filesystem::path& file);
    // The points of the sweep (Cartesian product, in the spec's order), quick or full.
    std::vector<SweepPoint> points(bool quick) const;
};

}  // namespace profinfer
