#include <algorithm>
#include <cmath>
#include <sstream>

#include "profinfer/number_text.h"
#include "profinfer/output_file.h"
#include "profinfer/run_summary.h"
#include "profinfer/study_text.h"
#include "profinfer/table.h"
#include "profinfer/tracing_cost.h"
#include "study_parts.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

std::string with_interval(const Interval& i) { return format_with_interval(i.median, i.lo, i.hi); }

nlohmann::json cell(const std::string& text) {
    if (!numeric(text)) return text;
    if (text.find('.') == std::string::npos) return int64_t(std::stoll(text));  // threads, ctx, ...: integers
    return std::stod(text);
}

// The metrics this study measured (the table and table.md show these; points.csv has them all).
std::vector<MetricInfo> shown_metrics(const Study& s) {
    std::vector<MetricInfo> shown;
    for (const auto& m : study_metrics()) {
        bool measured = false;
        for (const auto& p : s.samples) measured |= p.metrics.count(m.name) > 0;
        if (measured) shown.push_back(m);
    }
    return shown;
}

bool is_shown(const std::vector<MetricInfo>& shown, const std::string& metric) {
    return std::any_of(shown.begin(), shown.end(), [&](const MetricInfo& x) { return x.name == metric; });
}

}  // namespace

void write_points_tables(const Study& s, std::vector<fs::path>& written) {
    // table.csv: the parameters that vary, n, the run-to-run spread, then every shown
    // metric's median and interval; points.csv: every parameter beside every metric (what a
    // later step, profinfer fit, reads).
    const auto shown = shown_metrics(s);
    Table t, all;
    t.columns = s.varying;
    t.columns.push_back("n");
    t.columns.push_back("decode_tps_cv_pct");  // run-to-run spread: coefficient of variation over the rounds
    all.columns = {"id"};
    for (const auto& [name, value] : s.points.front().params) all.columns.push_back(name);
    all.columns.push_back("n");
    for (const auto& m : study_metrics())
        for (Table* tab : {&t, &all}) {
            if (tab == &t && !is_shown(shown, m.name)) continue;
            tab->columns.push_back(m.name);
            tab->columns.push_back(m.name + "_lo");
            tab->columns.push_back(m.name + "_hi");
        }
    for (size_t i = 0; i < s.points.size(); ++i) {
        const auto& r = s.points[i];
        std::vector<nlohmann::json> cells, every{r.id};
        for (const auto& v : s.varying) cells.push_back(cell(r.params.at(v)));
        for (const auto& [name, value] : r.params) every.push_back(value);
        cells.push_back(int64_t(r.dbs.size()));
        cells.push_back(number_or_null(s.cv_pct(i, "decode_tps")));
        every.push_back(int64_t(r.dbs.size()));
        for (const auto& m : study_metrics()) {
            const Interval iv = s.interval_of(i, m.name);
            for (auto* row : {&cells, &every}) {
                if (row == &cells && !is_shown(shown, m.name)) continue;
                row->push_back(number_or_null(iv.median));
                row->push_back(number_or_null(iv.lo));
                row->push_back(number_or_null(iv.hi));
            }
        }
        t.rows.push_back(std::move(cells));
        all.rows.push_back(std::move(every));
    }
    OutputFile::write(s.out_dir / "table.csv", t.to_csv());
    written.push_back(s.out_dir / "table.csv");
    OutputFile::write(s.out_dir / "points.csv", all.to_csv());
    written.push_back(s.out_dir / "points.csv");
    // Every run (point, round) with its metrics: what the medians and intervals come from.
    Table runs;
    runs.columns = {"id", "round"};
    for (const auto& m : study_metrics()) runs.columns.push_back(m.name);
    for (const auto& r : s.points)
        for (size_t k = 0; k < r.dbs.size(); ++k) {
            std::vector<nlohmann::json> row{r.id, int64_t(r.dbs[k].first)};
            for (const auto& m : study_metrics()) row.push_back(r.metrics[k].value(m.name, nlohmann::json(nullptr)));
            runs.rows.push_back(std::move(row));
        }
    OutputFile::write(s.out_dir / "runs.csv", runs.to_csv());
    written.push_back(s.out_dir / "runs.csv");
}

// Paper Table 5's view: every point against its group's baseline point (spec.baseline), in
// the same rounds: the program's decode (a server's: its throughput) and prompt slowdown and
// the CPU time it adds, each
// the median of per-round ratios' bootstrap (ratio_interval), and the decode slowdown as a
// multiple of the bpftrace floor's.
namespace {
// The baseline point of each group (the parameters the baseline selector does not fix that
// differ between the points).
std::map<std::string, const PointSamples*> baselines(const ExperimentSpec& spec, const std::vector<PointSamples>& points) {
    std::map<std::string, const PointSamples*> base;
    for (const auto& p : points)
        if (p.matches(spec.baseline)) base[group_name(p.params, points, spec.baseline, {})] = &p;
    return base;
}

// A program's speed: its decode rate (a server's: its throughput, serve_tps).
const char* speed_metric(const PointSamples& p) {
    return p.params.at("program") == "server" ? "serve_tps" : "bench_tg_tps";
}
}  // namespace

std::vector<PointSamples> against_baseline(const ExperimentSpec& spec, const std::vector<PointSamples>& points) {
    const auto base = baselines(spec, points);
    std::vector<PointSamples> out;
    for (const auto& p : points) {
        if (p.matches(spec.baseline)) continue;
        const auto b = base.find(group_name(p.params, points, spec.baseline, {}));
        if (b == base.end()) continue;
        PointSamples d{p.params, {}};
        for (const auto& [name, metric] : {std::pair<const char*, std::string>{"decode_slowdown_pct", speed_metric(p)},
                                           {"prefill_slowdown_pct", "bench_pp_tps"}}) {
            const ByRound& bv = b->second->of(metric);
            for (const auto& [round, v] : p.of(metric))
                if (auto it = bv.find(round); it != bv.end() && it->second > 0) d.metrics[name][round] = 100 * (1 - v / it->second);
        }
        out.push_back(std::move(d));
    }
    return out;
}

void write_vs_baseline(const Study& s, std::vector<fs::path>& written) {
    const ExperimentSpec& spec = s.spec;
    const std::vector<PointSamples>& points = s.samples;
    const fs::path& out_dir = s.out_dir;
    const auto base = baselines(spec, points);
    // Where its runs noted what `profinfer estimate` predicted (predicted_slowdown_pct): a
    // column beside the measured slowdown.
    bool predicted = false;
    for (const auto& p : points) predicted = predicted || !p.of("predicted_slowdown_pct").empty();
    Table t;
    t.columns = {"point", "group", "n", "decode_slowdown_pct", "decode_slowdown_lo", "decode_slowdown_hi",
                 "prefill_slowdown_pct", "prefill_slowdown_lo", "prefill_slowdown_hi", "cpu_pct", "cpu_lo", "cpu_hi",
                 "x_floor"};
    if (predicted) t.columns.insert(t.columns.end(), {"predicted_pct", "predicted_lo", "predicted_hi"});
    std::ostringstream md;
    md << "# " << spec.title << ": each point against its baseline (" << spec.name << ")\n\n"
       << "Per point, against the point of its group with";
    for (const auto& [k, v] : spec.baseline) md << " " << k << "=" << v;
    md << ", in the same rounds: slowdown = 100 × (1 − its speed / the baseline's), CPU = 100 × (its CPU time / the "
          "baseline's − 1) (the run's whole CPU time, tracer included); each the median over the rounds of the round's own "
          "ratio (both measured in that round) with a 95 % bootstrap interval over rounds (for program=server the decode "
          "column is the server's throughput, serve_tps); × floor: the decode slowdown over the bpftrace floor's in the same group."
       << (predicted ? " predicted: what `profinfer estimate` predicted for the level from each run's own trace and this "
                       "machine's costs measured right after it (median over the rounds); inside the decode slowdown's "
                       "interval or not."
                     : "")
       << "\n\n| point | group | n | decode slowdown % | prefill slowdown % | CPU time % | × floor |"
       << (predicted ? " predicted % | |\n|---|---|---|---|---|---|---|---|---|\n" : "\n|---|---|---|---|---|---|---|\n");
    struct Row {
        std::string name, group;
        Interval d, p, c, e;  // e: the predicted slowdown
    };
    std::vector<Row> rows;
    std::map<std::string, double> floor;  // the bpftrace floor's decode slowdown, per group
    for (const auto& p : points) {
        if (p.matches(spec.baseline)) continue;
        const std::string g = group_name(p.params, points, spec.baseline, {});
        auto b = base.find(g);
        if (b == base.end()) continue;  // no baseline in its group (e.g. runs measured against themselves)
        std::string name;
        for (const auto& [k, v] : p.params)
            if (spec.baseline.count(k)) name += (name.empty() ? "" : ", ") + k + "=" + v;
        auto slowdown = [](Interval r) {  // ratio → 100 (1 − r), the interval's ends swapped
            Interval o = r;
            o.median = 100 * (1 - r.median), o.lo = 100 * (1 - r.hi), o.hi = 100 * (1 - r.lo);
            return o;
        };
        Interval c = ratio_interval(p.of("cpu_s"), b->second->of("cpu_s"));
        c.median = 100 * (c.median - 1), c.lo = 100 * (c.lo - 1), c.hi = 100 * (c.hi - 1);
        // A server's speed is its throughput (serve_tps): the "decode" column holds it.
        const char* speed = speed_metric(p);
        rows.push_back({name, g, slowdown(ratio_interval(p.of(speed), b->second->of(speed))),
                        slowdown(ratio_interval(p.of("bench_pp_tps"), b->second->of("bench_pp_tps"))), c, {}});
        std::vector<double> e;
        for (const auto& [round, v] : p.of("predicted_slowdown_pct")) e.push_back(v);
        if (!e.empty()) rows.back().e = median_interval(e);
        if (p.params.at("tracer") == "bpftrace") floor[g] = rows.back().d.median;
    }
    for (const auto& r : rows) {
        // Against the floor measured in the same group (model, threads): none there, none given.
        const auto f = floor.find(r.group);
        const double x = f != floor.end() && std::isfinite(f->second) && f->second > 0 ? r.d.median / f->second : NAN;
        t.rows.push_back({r.name, r.group, int64_t(r.d.n), number_or_null(r.d.median), number_or_null(r.d.lo),
                          number_or_null(r.d.hi), number_or_null(r.p.median), number_or_null(r.p.lo), number_or_null(r.p.hi),
                          number_or_null(r.c.median), number_or_null(r.c.lo), number_or_null(r.c.hi), number_or_null(x)});
        if (predicted)
            t.rows.back().insert(t.rows.back().end(),
                                 {number_or_null(r.e.median), number_or_null(r.e.lo), number_or_null(r.e.hi)});
        md << "| " << r.name << " | " << (r.group.empty() ? "–" : r.group) << " | " << r.d.n << " | " << with_interval(r.d)
           << " | " << with_interval(r.p) << " | " << with_interval(r.c) << " | " << format_double(x) << " |";
        if (predicted) {
            const bool inside = std::isfinite(r.e.median) && r.d.has_interval() && r.e.median >= r.d.lo && r.e.median <= r.d.hi;
            md << " " << (std::isfinite(r.e.median) ? format_double(r.e.median) : "–") << " | "
               << (!std::isfinite(r.e.median) || !r.d.has_interval() ? "–" : inside ? "inside" : "outside") << " |";
        }
        md << "\n";
    }
    OutputFile::write(out_dir / "vs-baseline.csv", t.to_csv());
    OutputFile::write(out_dir / "vs-baseline.md", md.str());
    written.push_back(out_dir / "vs-baseline.csv");
    written.push_back(out_dir / "vs-baseline.md");
}

// Operator times against the eval callback's, per round: the program evalcb recorded at
// tracer op, and the same round's callback run (its nodes CSV).
void write_fidelity(const Study& s, std::vector<fs::path>& written) {
    const std::vector<Recorded>& points = s.points;
    const fs::path& out_dir = s.out_dir;
    Table t;
    t.columns = {"round", "operators", "median_rel_err_pct", "callback_slower_pct", "profinfer_ms", "callback_ms",
                 "coverage_pct"};
    std::vector<double> err, slower;
    for (const auto& traced : points) {
        if (traced.params.at("program") != "evalcb" || traced.params.at("tracer") != "op") continue;
        for (const auto& cb : points) {
            if (cb.params.at("program") != "evalcb" || cb.params.at("tracer") != "evalcb") continue;
            auto same = traced.params;
            same["tracer"] = "evalcb";
            if (same != cb.params) continue;
            for (const auto& [round, db] : traced.dbs)
                for (const auto& [cb_round, cb_db] : cb.dbs) {
                    if (cb_round != round) continue;
                    // The callback run wrote its nodes next to where its DB would be.
                    const fs::path nodes = out_dir / "points" / (cb.id + "-r" + std::to_string(round) + ".db.nodes.csv");
                    if (!fs::exists(nodes)) continue;
                    store::Database trace(db, store::Database::Mode::ReadOnly);
                    const Fidelity f = fidelity_against_callback(trace, nodes);
                    std::string cover;
                    for (const auto& [th, pct] : f.coverage_pct) cover += (cover.empty() ? "" : " ") + th + ":" + format_double(pct);
                    t.rows.push_back({int64_t(round), int64_t(f.operators), number_or_null(f.median_rel_err_pct),
                                      number_or_null(f.callback_slower_pct), f.profinfer_ms, f.callback_ms, cover});
                    err.push_back(f.median_rel_err_pct), slower.push_back(f.callback_slower_pct);
                }
        }
    }
    if (t.rows.empty()) return;
    std::ostringstream md;
    md << "# Fidelity: profinfer's operator times against llama.cpp's eval callback\n\n"
       << "Per round: evalcb_peer recorded by `profinfer record --level op` (the callback off) against the same "
          "program with the eval callback timestamping every node (its own run of the round); per (name, op) the mean "
          "time of each, decode calls after the first. Over the rounds: median relative error "
       << with_interval(median_interval(err)) << " %, callback slower in " << with_interval(median_interval(slower))
       << " % of the operators.\n\n| round | operators | median rel. error % | callback slower % | profinfer ms | "
          "callback ms | thread coverage % |\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : t.rows)
        md << "| " << r[0].dump() << " | " << r[1].dump() << " | " << format_double(r[2].is_number() ? r[2].get<double>() : NAN)
           << " | " << format_double(r[3].is_number() ? r[3].get<double>() : NAN) << " | " << format_double(r[4].get<double>()) << " | "
           << format_double(r[5].get<double>()) << " | " << r[6].get<std::string>() << " |\n";
    OutputFile::write(out_dir / "fidelity.csv", t.to_csv());
    OutputFile::write(out_dir / "fidelity.md", md.str());
    written.push_back(out_dir / "fidelity.csv");
    written.push_back(out_dir / "fidelity.md");
}

void write_table_md(const Study& s, const std::vector<ClaimResult>& verdicts, std::vector<fs::path>& written) {
    const ExperimentSpec& spec = s.spec;
    const auto shown = shown_metrics(s);
    std::ostringstream md;
    md << "# " << spec.title << "\n\n";
    if (!spec.paper.empty()) md << "Reproduces: " << spec.paper << ". ";
    md << "Tracer level: `" << spec.level << "`. Sweep: " << (s.quick ? "quick" : "full") << ", " << s.points.size()
       << " of " << spec.points(s.quick).size() << " points recorded, " << rounds_text(s.min_n, s.max_n)
       << " each (n), interleaved, recorded in " << format_double(s.facts.recording_s / 60)
       << " minutes. Cells: median over the rounds [95 % bootstrap interval]";
    if (s.min_n < kMinRoundsForInterval) md << "; no interval where n < " << kMinRoundsForInterval << " (too few rounds)";
    md << ".\n\n";
    md << "Machine: " << (s.facts.machine.empty() ? "not named by its index (recorded before 2026-12-06)" : s.facts.machine)
       << (s.facts.trap_us.empty() ? "" : "; a uprobe trap costs " + s.facts.trap_us + " µs there (measured as the run began)")
       << (s.facts.machine_note.empty() ? "" : "; " + s.facts.machine_note) << ".\n\n";
    if (s.facts.calls_dropped)
        md << "Summarised with the first " << s.facts.calls_dropped << " calls of each trace left out of its metrics, "
           << "per phase (a phase keeps its last call) "
           << "(`experiment summarise --drop-first-calls " << s.facts.calls_dropped << "`).\n\n";
    for (const auto& n : spec.notes) md << "- " << n << "\n";
    md << "- Points: `index.db` (parameters, command, timings per round), `runs.csv` (every round's metrics); "
          "per point `points/<id>-r<round>.db` and the outputs of its first round.\n";
    if (!verdicts.empty()) {
        md << "\n## Verdicts\n\nEach claim as a comparison over the rounds: the median of each round's ratio a / b (or a's "
              "median against a value) with its 95 % bootstrap interval; reproduced or not reproduced only when "
              "the interval excludes no effect"
           << (std::any_of(spec.claims.begin(), spec.claims.end(), [](const Claim& c) { return c.margin.has_value(); })
                   ? "; an equivalence (≈ ± margin) reproduced only when the whole interval lies within the margin, not "
                     "reproduced when it lies wholly outside it"
                   : "")
           << ".\n\n";
        Table t{{"claim", "test", "group", "estimate [95 % interval]", "n", "verdict"}, {}};
        for (const auto& r : verdicts) {
            const Claim& c = *r.claim;
            t.rows.push_back({c.says, c.compared() + " " + c.expectation(), r.group.empty() ? "–" : r.group,
                              with_interval(r.estimate), std::to_string(r.estimate.n),
                              "**" + std::string(to_string(r.verdict)) + "**" + (r.reason.empty() ? "" : ": " + r.reason)});
        }
        md << t.to_markdown();
    }
    md << "\n## Points\n\n| ";
    for (const auto& c : s.varying) md << c << " | ";
    md << "n | decode_tps CV (%) | ";
    for (const auto& m : shown) md << m.name << (m.unit.empty() ? "" : " (" + m.unit + ")") << " | ";
    md << "\n|";
    for (size_t i = 0; i < s.varying.size() + 2 + shown.size(); ++i) md << "---|";
    md << "\n";
    for (size_t i = 0; i < s.points.size(); ++i) {
        const auto& r = s.points[i];
        md << "| ";
        for (const auto& v : s.varying) md << r.params.at(v) << " | ";
        md << r.dbs.size() << " | " << format_double(s.cv_pct(i, "decode_tps")) << " | ";
        for (const auto& m : shown) md << with_interval(s.interval_of(i, m.name)) << " | ";
        md << "\n";
    }
    OutputFile::write(s.out_dir / "table.md", md.str());
    written.push_back(s.out_dir / "table.md");
}

}  // namespace profinfer
