#pragma once
// The stages of a study's summary (summarise_experiment, summary.cpp), shared by the files
// that hold them: the runs read from the index (study_runs.cpp), the tables (study_tables.cpp),
// the claims (claims.cpp) and the figures (study_figures.cpp).
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "profinfer/intervals.h"
#include "profinfer/study_summary.h"

namespace profinfer {

// A study metric and the unit its axis and table show (study_runs.cpp: every metric a run
// may have, in the order of the tables' columns).
struct MetricInfo {
    std::string name, unit;
};
const std::vector<MetricInfo>& study_metrics();
const std::string& unit_of(const std::string& metric);

// A point of the study with every round recorded for it.
struct Recorded {
    std::string id;
    std::map<std::string, std::string> params;
    std::vector<std::pair<int, std::filesystem::path>> dbs;  // (round, trace DB), by round
    std::vector<nlohmann::json> metrics;                     // per entry of dbs
    PointSamples samples() const;
};

// What the index says of the study as a whole.
struct StudyFacts {
    std::string board = "host";
    std::string machine, machine_note, trap_us;  // the index's word on the machine that recorded it
    double recording_s = 0;  // the runs' own time, summed
    int calls_dropped = 0;   // the first calls of each trace its metrics leave out
};

// The runs done of the sweep's points, from the index, point by point in the sweep's order,
// each with its metrics: the program's own, and its trace's (trace_metrics and the
// tracing-cost measures a run makes on itself) with the first CALLS_DROPPED calls of the trace
// left out — from the trace where it is here (and kept in the index: each trace's metrics as
// computed, by calls_dropped), else as the index kept them; an error where neither is.
std::vector<Recorded> read_runs(const ExperimentSpec& spec, const std::filesystem::path& out_dir, bool quick,
                                StudyFacts& facts, int calls_dropped = 0);

// A study being summarised: its recorded points, their samples and what varies among them.
struct Study {
    const ExperimentSpec& spec;
    std::filesystem::path out_dir;
    bool quick = false;
    StudyFacts facts;
    std::vector<Recorded> points;
    std::vector<PointSamples> samples;  // per point
    std::vector<std::string> varying;   // the parameters that vary (and x, series): the tables' columns
    size_t min_n = 0, max_n = 0;        // rounds per point

    Study(const ExperimentSpec& spec, const std::filesystem::path& out_dir, bool quick, int calls_dropped = 0);
    // Point I's METRIC over its rounds: median and 95 % interval.
    Interval interval_of(size_t i, const std::string& metric) const;
    // Coefficient of variation of point I's METRIC over the rounds (sample SD / mean), in %.
    double cv_pct(size_t i, const std::string& metric) const;
    // The caption's machine: results/<board>/machine.json's CPU and the board.
    std::string machine() const;
};

// results/<board>/machine.json beside the study (the study's folder is results/<board>/NAME,
// or results/<board>/quick/NAME); null when there is none.
nlohmann::json machine_json(const std::filesystem::path& out_dir);
// The machine's triad bandwidth at THREADS (the roof of the largest thread count measured up
// to THREADS), 0 without a machine.json.
double triad_gbs(const nlohmann::json& machine, int threads);
// A category as a figure's axis prints it: an --override-tensor rule by the weight it moves
// and where ("attn_q → Vulkan0", not the whole regular expression), -ngl 99 as every layer;
// other values as they are.
std::string category_label(const std::string& param, const std::string& value);
// A parameter's value is a number (threads, ctx, ...).
bool numeric(const std::string& s);

// The parameters naming a point's group for a comparison: those the selectors do not fix
// and that differ between the points.
std::string group_name(const std::map<std::string, std::string>& params, const std::vector<PointSamples>& points,
                       const std::map<std::string, std::string>& fixed_a, const std::map<std::string, std::string>& fixed_b);

// The stages' outputs, each appending the files it wrote to WRITTEN.
// Per point, from its first recorded round: the DAG, stat tables, figures, timeline.
void write_point_outputs(const Study& s, std::vector<std::filesystem::path>& written);
// The summaries across points (MatMul lines, wait methods, backends, sampled shares); returns
// the fitted lines and the shares' gaps, for claims on them.
DerivedSamples write_across_points(const Study& s, std::vector<std::filesystem::path>& written);
// table.csv, points.csv (what profinfer fit reads) and runs.csv (every run's metrics).
void write_points_tables(const Study& s, std::vector<std::filesystem::path>& written);
// vs-baseline.csv/.md: every point against its group's baseline point (spec.baseline).
void write_vs_baseline(const Study& s, std::vector<std::filesystem::path>& written);
// fidelity.csv/.md: operator times against the eval callback's, per round.
void write_fidelity(const Study& s, std::vector<std::filesystem::path>& written);
// verdicts.csv: every claim's estimate and verdict.
void write_verdicts(const Study& s, const std::vector<ClaimResult>& verdicts, std::vector<std::filesystem::path>& written);
// table.md: the study's notes, verdicts and points.
void write_table_md(const Study& s, const std::vector<ClaimResult>& verdicts, std::vector<std::filesystem::path>& written);
// A figure per metric of the spec's [figure]: x against the metric's median and interval.
void draw_study_figures(const Study& s, std::vector<std::filesystem::path>& written);

}  // namespace profinfer
