#pragma once
// The experiment harness: one spec per study of the paper (experiments/specs/*.toml),
// expanded into sweep points; each point is a llama.cpp workload recorded by
// `profinfer record` into its own trace DB, listed in the experiment's index DB
// (index.db: point parameters → DB, status, command, timings, llama-bench's own output).
// docs/experiments.md describes the spec format and the index.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace profinfer {

// One sweep point: the value of every parameter.
struct SweepPoint {
    std::map<std::string, std::string> params;  // model, type, threads, backend, ctx, prompt, gen, fa, ngl, reps, hog, ot, nopo, mem
    std::string key() const;                    // "backend=cpu,ctx=0,..." (sorted), the point's identity
    std::string id() const;                     // short stable file name from key()
    const std::string& at(const std::string& name) const;
};

struct ExperimentSpec {
    std::string name, title, paper;  // paper: the figure or table it reproduces
    std::string level = "op";        // tracer level for every point
    std::string scale = "full";      // model scale: full, or tiny (tests)
    std::map<std::string, std::vector<std::string>> sweep;        // parameter → values
    std::map<std::string, std::vector<std::string>> quick_sweep;  // overrides in --quick
    // The figure: metric on y against parameter x, a line per value of series.
    std::string x, series;
    std::vector<std::string> metrics;
    std::vector<std::string> notes;  // what the study needs or how to read it
    // Per-point outputs ([outputs]): the DAG of the middle layer's block ("attn", "ffn",
    // "layer"; empty: none), statistics tables (stat --by VALUE, CSV), the timeline (gzip).
    std::string dag;
    std::vector<std::string> stats;
    bool timeline = false;
    // Paper Fig. 10 across the points: matmuls.csv, fit.csv/.md and a figure per thread count.
    bool matmuls = false;

    static ExperimentSpec load(const std::filesystem::path& file);
    // The points of the sweep (Cartesian product, in the spec's order), quick or full.
    std::vector<SweepPoint> points(bool quick) const;
};

// What a point needs that this machine does not have; empty when it can run. With
// INSTALL, the llama.cpp build of its backend is built or unpacked first if missing.
std::string missing_for(const SweepPoint& p, bool install);

struct RunOptions {
    std::filesystem::path profinfer;  // this binary
    std::filesystem::path out_dir;    // results/<board>/<experiment>
    std::string board = "host";
    bool quick = false, dry_run = false;
    // From the board's profile (boards/profiles): the CPUs the inference threads are pinned
    // to (taskset; empty: not pinned), and the counters --level full records.
    std::vector<int> pin_cpus;
    std::string counters;
};

struct RunReport {
    int points = 0, done = 0, already_done = 0, skipped = 0, failed = 0;
};

// Runs (or resumes) the experiment: points already done are kept, the others are run
// in order, with one progress line each on stderr. A point whose backend is missing
// is refused before anything runs, or, with quick, skipped with its reason.
RunReport run_experiment(const ExperimentSpec& spec, const RunOptions& opt);

// The llama.cpp command of a point, with the model file it needs.
std::vector<std::string> point_command(const SweepPoint& p, const std::filesystem::path& model);
// The GGUF file of a point's model (synthesised into the cache when missing, by PROFINFER).
std::filesystem::path point_model(const SweepPoint& p, const std::string& scale, const std::filesystem::path& profinfer,
                                  bool create);

// Per-point metrics from its trace DB (and llama-bench's own output): decode_tps,
// prefill_tps, bench_tg_tps, bench_pp_tps, op_ms_per_token, mul_mat_share_pct,
// attention_share_pct, wait_share_pct.
nlohmann::json point_metrics(const std::filesystem::path& db, const std::string& bench_json);

// The experiment's table (CSV + Markdown) and figure (PNG + SVG) from its index and
// point DBs, written into out_dir; returns the files written. Only the points of the
// sweep (quick or full) count: an index may also hold the other sweep's points.
std::vector<std::filesystem::path> summarise_experiment(const ExperimentSpec& spec, const std::filesystem::path& out_dir,
                                                        bool quick);

// A recorded point of a study: its parameters and trace DB.
struct StudyPoint {
    std::map<std::string, std::string> params;
    std::filesystem::path db;
};

// Paper Fig. 10: every point's weight MatMuls (stat --by matmul) in matmuls.csv, a line
// time = a + b·M·N·K·H per model, type, backend, thread count and batch class (N = 1, N > 1), pooled over the
// models (fit.csv, fit.md), and a log-log figure per thread count; returns the files.
std::vector<std::filesystem::path> summarise_matmuls(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                                     const std::filesystem::path& out_dir);

}  // namespace profinfer
