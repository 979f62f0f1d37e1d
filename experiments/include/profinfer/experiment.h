#pragma once
// The experiment harness: one spec per study of the paper (experiments/specs/*.toml),
// expanded into sweep points; each point is a llama.cpp workload recorded by
// `profinfer record` into its own trace DB, listed in the experiment's index DB
// (index.db: point parameters → DB, status, command, timings, llama-bench's own output).
// docs/experiments.md describes the spec format and the index.
#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "profinfer/intervals.h"
#include "profinfer/store.h"

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
    int requires_cpus = 0;                             // fewer online CPUs: not testable here
    bool requires_pmu = false;                         // no hardware counters: not testable here
    std::string not_testable;                          // why it cannot be tested on any machine like this one
    // What the claim is about: the sweep's points (""), or the study's fitted lines ("fits":
    // matmul-dims' lines per model/type/backend/threads/batch, fitted once per round; metrics
    // fit_r2, fit_ns_per_mnkh, fit_intercept_us).
    std::string on;
    std::string expectation() const;                   // "a > b", "a < value", as written
    std::string compared() const;                      // "metric", or "metric / metric_b"
};

struct ExperimentSpec {
    std::string name, title, paper;  // paper: the figure or table it reproduces
    std::string level = "op";        // tracer level for every point
    std::string wait;                // record --wait at --level full (exact, sampled; empty: record's default)
    std::string scale = "full";      // model scale: full, or tiny (tests)
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
    // The table of every point against the point of its group that BASELINE selects
    // (vs-baseline.csv/md: slowdown and CPU time with intervals; e.g. { tracer = "none" }).
    std::map<std::string, std::string> baseline;
    // Operator times of profinfer against llama.cpp's eval callback (program evalcb, tracer op
    // against tracer evalcb), per round: fidelity.csv/md.
    bool fidelity = false;
    // Interleaved rounds: each round records every point once, in an order that changes
    // from round to round. At least 5 for the full sweep, 2 for the quick one.
    int rounds = 5, quick_rounds = 2;
    std::vector<Claim> claims;

    int rounds_for(bool quick) const { return quick ? quick_rounds : rounds; }
    static ExperimentSpec load(const std::filesystem::path& file);
    // The points of the sweep (Cartesian product, in the spec's order), quick or full.
    std::vector<SweepPoint> points(bool quick) const;
};


struct RunOptions {
    std::filesystem::path profinfer;  // this binary
    std::filesystem::path out_dir;    // results/<board>/<experiment>
    std::string board = "host";
    bool quick = false, dry_run = false;
    int rounds = 0;                   // interleaved rounds; 0: the spec's (rounds_for(quick))
    std::filesystem::path model;      // every point's model file; empty: the card's, synthesised in the cache
    // From the board's profile (boards/profiles): the CPUs the inference threads are pinned
    // to (taskset; empty: not pinned), the counters --level full records, and the backends
    // it can run (empty: any this machine has) with the profile's word on the others.
    std::vector<int> pin_cpus;
    std::string counters;
    std::vector<std::string> backends;
    std::string backend_notes;
};

// What a point needs that this machine (or its board's profile) does not have; empty when it can run. With
// INSTALL, the llama.cpp build of its backend is built or unpacked first if missing.
std::string missing_for(const SweepPoint& p, const RunOptions& opt, bool install);

// Counts of (point, round) runs.
// This process's own binary (/proc/self/exe): the profinfer the runner records with.
std::filesystem::path self_executable();

struct RunReport {
    int points = 0, rounds = 0, done = 0, already_done = 0, skipped = 0, failed = 0;
};

// The order round ROUND (1-based) visits N points in: a permutation that differs from
// round to round and is the same on every run of the spec (a resume follows it).
std::vector<size_t> round_order(const std::string& spec_name, int round, size_t n);

// What one run of a point executes (experiments/src/workload.cpp).
struct Workload {
    std::vector<std::string> program;  // the program's own command (what the index shows)
    std::vector<std::string> argv;     // what runs: the program, or profinfer record -- program
    std::vector<std::pair<std::string, std::string>> env;  // set for the run (ablations, NODE_PATH)
    std::string bpftrace;              // a bpftrace program to run beside it (the floor); empty: none
    bool stream = false;               // bpftrace prints a line per hit, read to the end
    bool traced = false;               // argv records into the run's DB
    std::filesystem::path nodes_csv;   // program evalcb under tracer evalcb: the callback's node times
};
// Whether the point's run records a trace DB (profinfer record around the program) rather
// than running the program alone. Program attach records its own windows and keeps no DB.
bool is_traced(const SweepPoint& p);
Workload workload(const ExperimentSpec& spec, const RunOptions& opt, const SweepPoint& p,
                  const std::filesystem::path& model, const std::filesystem::path& db);

// bpftrace beside a run: started and attached before it, stopped (SIGINT) after it.
class BpftraceFloor {
public:
    BpftraceFloor(const std::string& script, bool stream);
    ~BpftraceFloor();
    BpftraceFloor(const BpftraceFloor&) = delete;
    BpftraceFloor& operator=(const BpftraceFloor&) = delete;
    int stop();  // exit status

private:
    pid_t pid_ = -1;
    FILE* out_ = nullptr;
    std::thread reader_;
    int status_ = 0;
};

// Runs (or resumes) the experiment in interleaved rounds: each round records every point
// once (points/<id>-r<round>.db), in round_order; runs already done are kept, with one
// progress line each on stderr. A point whose backend is missing is refused before
// anything runs, or, with quick, skipped with its reason.
RunReport run_experiment(const ExperimentSpec& spec, const RunOptions& opt);

// The llama.cpp command of a point, with the model file it needs.
std::vector<std::string> point_command(const SweepPoint& p, const std::filesystem::path& model);
// The GGUF file of a point's model (synthesised into the cache when missing, by PROFINFER).
std::filesystem::path point_model(const SweepPoint& p, const std::string& scale, const std::filesystem::path& profinfer,
                                  bool create);

// Per-point metrics from its trace DB (and llama-bench's own output): decode_tps,
// prefill_tps, bench_tg_tps, bench_pp_tps, op_ms_per_token, mul_mat_share_pct,
// attention_share_pct, wait_share_pct.
nlohmann::json point_metrics(store::Database* db, const std::string& bench_json);

// The experiment's table (CSV + Markdown) and figure (PNG + SVG) from its index and
// point DBs, written into out_dir; returns the files written. Only the points of the
// sweep (quick or full) count: an index may also hold the other sweep's points.
std::vector<std::filesystem::path> summarise_experiment(const ExperimentSpec& spec, const std::filesystem::path& out_dir,
                                                        bool quick);

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
// Claims on "fits" are judged on FITS (summarise_matmuls' lines, a sample per round).
std::vector<ClaimResult> evaluate_claims(const ExperimentSpec& spec, const std::vector<PointSamples>& points,
                                         const Testbed& here, const std::vector<PointSamples>& fits = {});

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
std::vector<std::filesystem::path> summarise_matmul_backends(const ExperimentSpec& spec,
                                                             const std::vector<StudyPoint>& points,
                                                             const std::filesystem::path& out_dir,
                                                             const std::string& caption);

// How every study table and the results README print a number: 3 significant digits ("–"
// when not finite), and a median with its interval ("42.1 [40.3, 43.0]"; the median alone
// without one).
std::string format_number(double v);
// "1 round", "2 rounds", a range "1–2 rounds": as every caption, table and verdict says it.
std::string rounds_text(size_t lo, size_t hi);
std::string rounds_text(size_t n);
// The machine results are for, for captions: the CPU of results/<board>/machine.json beside
// OUT_DIR (a study's or the models' folder) and the board ("AMD EPYC (host)"); the board alone
// without one.
std::string machine_of(const std::filesystem::path& out_dir, const std::string& board);
// A table cell: the number, or null when it is not finite (no interval, no measure).
nlohmann::json number_or_null(double v);
std::string format_with_interval(double median, double lo, double hi);

// RESULTS_DIR/README.md (results/<board>/ or its quick/), generated whole from the studies
// summarised there (their index.db, verdicts.csv, table.csv) and machine.json: the verdict of
// every claim, each study's rounds and run-to-run spread, links to the rest. Returns its path.
std::filesystem::path write_results_readme(const std::filesystem::path& results_dir);

// `make farm`'s last step: FARM/<board>/<study>/index.db merged into FARM/farm.db, and per
// study the boards side by side in FARM/compare/ (experiments/src/farm_merge.cpp).
struct FarmMerge {
    int64_t runs = 0, boards = 0;
    std::vector<std::filesystem::path> written;
};
FarmMerge merge_farm(const std::filesystem::path& farm);

}  // namespace profinfer
