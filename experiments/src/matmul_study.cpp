// Paper Fig. 10 across a study's points: every point's weight MatMuls (stat --by matmul)
// gathered into matmuls.csv — the input of `profinfer fit` — with a least-squares line
// time = a + b·MNKH per model, thread count and batch class (N = 1, N > 1; fit.csv, fit.md) and a log-log
// figure per thread count.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/experiment.h"
#include "profinfer/output_file.h"
#include "profinfer/perf_models.h"
#include "profinfer/plotter.h"
#include "profinfer/regression.h"
#include "profinfer/stats.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// The point parameters a MatMul row carries: what its time depends on besides its shape.
const std::vector<std::string> kRowParams = {"model", "type", "backend", "threads"};

std::string fmt(double v, const char* f = "%.3g") {
    if (!std::isfinite(v)) return "–";
    char b[48];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

struct Group {
    std::vector<double> mnkh, us;
};

double max_rel_err_pct(const LinearFit& f, const Group& g) {
    double worst = 0;
    for (size_t i = 0; i < g.us.size(); ++i) worst = std::max(worst, std::abs(f.residuals[Eigen::Index(i)]) / g.us[i]);
    return 100 * worst;
}

// The groups again with every model's shapes pooled under model "all" (key[0]): whether one
// line serves every model.
std::map<std::vector<std::string>, Group> pooled_over_models(const std::map<std::vector<std::string>, Group>& groups) {
    std::map<std::vector<std::string>, Group> pooled;
    for (const auto& [key, g] : groups) {
        auto pk = key;
        pk[0] = "all";
        auto& p = pooled[pk];
        p.mnkh.insert(p.mnkh.end(), g.mnkh.begin(), g.mnkh.end());
        p.us.insert(p.us.end(), g.us.begin(), g.us.end());
    }
    return pooled;
}

}  // namespace

MatmulSummary summarise_matmuls(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                const fs::path& out_dir) {
    MatmulSummary out;
    std::vector<fs::path>& written = out.files;
    Table all;
    all.columns = kRowParams;
    std::map<std::vector<std::string>, Group> groups;  // kRowParams values + batch class → shapes
    std::map<std::vector<std::string>, std::map<int, Group>> by_round;  // the same, one group per round
    std::set<std::string> threads;
    for (const auto& p : points) {
        Table t = stats_table(p.db, "matmul");
        if (all.columns.size() == kRowParams.size()) {
            all.columns.push_back("round");
            all.columns.insert(all.columns.end(), t.columns.begin(), t.columns.end());
        }
        const auto col = [&](const std::string& name) {
            return size_t(std::find(t.columns.begin(), t.columns.end(), name) - t.columns.begin());
        };
        for (auto& r : t.rows) {
            std::vector<nlohmann::json> row;
            std::vector<std::string> key;
            for (const auto& k : kRowParams) row.push_back(p.params.at(k)), key.push_back(p.params.at(k));
            row.push_back(int64_t(p.round));
            // One regime per batch size class: N = 1 (decode, and a prompt's last-token
            // MatMuls) streams the weight once per token; N > 1 reuses it across tokens.
            // A prompt's last-token MatMuls (N = 1 inside a prefill call) are the decode
            // shapes again, timed on one or two calls: listed, not fitted.
            const bool one = r[col("n")].get<int64_t>() == 1;
            key.push_back(one ? "n=1" : "n>1");
            if (!(one && r[col("phase")] == "prefill")) {
                for (Group* g : {&groups[key], &by_round[key][p.round]}) {
                    g->mnkh.push_back(r[col("mnkh")].get<double>());
                    g->us.push_back(r[col("median_us")].get<double>());
                }
            }
            row.insert(row.end(), r.begin(), r.end());
            all.rows.push_back(std::move(row));
        }
        threads.insert(p.params.at("threads"));
    }
    if (all.rows.empty()) throw Error(spec.name + ": no weight MatMul in any point (record with --level op or full)");
    OutputFile::write(out_dir / "matmuls.csv", all.to_csv());
    written.push_back(out_dir / "matmuls.csv");

    // Per model, thread count and batch class; pooled over models ("all") to test whether one
    // line serves every model.
    auto pooled = pooled_over_models(groups);
    {
        std::map<int, std::map<std::vector<std::string>, Group>> rounds;  // round → the groups of its shapes
        for (const auto& [key, by] : by_round)
            for (const auto& [round, g] : by) rounds[round][key] = g;
        for (const auto& [round, groups_of_round] : rounds)
            for (const auto& [pk, g] : pooled_over_models(groups_of_round)) by_round[pk][round] = g;
    }
    // Each line fitted again on each round's shapes alone: the claims' samples.
    for (const auto& [key, rounds] : by_round) {
        PointSamples s;
        for (size_t i = 0; i < kRowParams.size(); ++i) s.params[kRowParams[i]] = key[i];
        s.params["batch"] = key.back();
        for (const auto& [round, g] : rounds) {
            if (g.us.size() < 3) continue;
            try {
                const LinearFit f = fit_matmul_line(g.mnkh, g.us);
                s.metrics["fit_r2"][round] = f.r2;
                s.metrics["fit_ns_per_mnkh"][round] = f.coef[1] * 1e3;
                s.metrics["fit_intercept_us"][round] = f.coef[0];
            } catch (const Error&) {
            }
        }
        if (!s.metrics.empty()) out.fits.push_back(std::move(s));
    }
    Table fits{{"model", "type", "backend", "threads", "batch", "shapes", "intercept_us", "intercept_lo", "intercept_hi",
                "ns_per_mnkh", "ns_per_mnkh_lo", "ns_per_mnkh_hi", "r2", "max_rel_err_pct"},
               {}};
    std::map<std::vector<std::string>, LinearFit> lines;
    for (const auto* set : {&groups, &pooled})
        for (const auto& [key, g] : *set) {
            if (g.us.size() < 3) continue;  // two shapes fix a line and leave nothing to test it
            LinearFit f;
            try {
                f = fit_matmul_line(g.mnkh, g.us);
            } catch (const Error&) {
                continue;  // one distinct shape (rank 1): no line
            }
            lines[key] = f;
            fits.rows.push_back({key[0], key[1], key[2], key[3], key[4], int64_t(g.us.size()), f.coef[0], f.ci_lo[0],
                                 f.ci_hi[0], f.coef[1] * 1e3, f.ci_lo[1] * 1e3, f.ci_hi[1] * 1e3, f.r2,
                                 max_rel_err_pct(f, g)});
        }
    OutputFile::write(out_dir / "fit.csv", fits.to_csv());
    written.push_back(out_dir / "fit.csv");
    {
        std::ostringstream md;
        md << "# " << spec.title << ": least-squares lines\n\n"
           << "time (µs) = intercept + slope × M·N·K·H per model, type, backend, thread count and batch (N = 1: "
              "decode; N > 1: the prompts), fitted for "
              "relative error (weights 1/time²) over the distinct weight-MatMul shapes of the point; `all` pools "
              "every model. Intervals: 95 %. Input: matmuls.csv (median time per shape).\n\n"
           << "| model | type | backend | threads | batch | shapes | intercept µs [95 % CI] | ns per MNKH [95 % CI] | R² | worst error % |\n"
           << "|---|---|---|---|---|---|---|---|---|---|\n";
        for (const auto& r : fits.rows)
            md << "| " << r[0].get<std::string>() << " | " << r[1].get<std::string>() << " | " << r[2].get<std::string>()
               << " | " << r[3].get<std::string>() << " | " << r[4].get<std::string>()
               << " | " << r[5] << " | " << fmt(r[6]) << " [" << fmt(r[7]) << ", " << fmt(r[8]) << "] | "
               << fmt(r[9], "%.4g") << " [" << fmt(r[10], "%.4g") << ", " << fmt(r[11], "%.4g") << "] | " << fmt(r[12], "%.4f")
               << " | " << fmt(r[13], "%.1f") << " |\n";
        OutputFile::write(out_dir / "fit.md", md.str());
        written.push_back(out_dir / "fit.md");
    }

    // One log-log figure per thread count: a series per model, and the pooled lines.
    Plotter plot(out_dir);
    for (const auto& th : threads) {
        std::map<std::string, std::vector<std::pair<double, double>>> series;
        double lo = INFINITY, hi = 0;
        for (const auto& [key, g] : groups) {
            if (key[3] != th) continue;
            auto& s = series[key[0] + (key[1] == "q4_0" ? "" : " " + key[1]) + (key[2] == "cpu" ? "" : " " + key[2])];
            for (size_t i = 0; i < g.us.size(); ++i) {
                s.push_back({g.mnkh[i], g.us[i]});
                lo = std::min(lo, g.mnkh[i]), hi = std::max(hi, g.mnkh[i]);
            }
        }
        if (series.empty()) continue;
        std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> fitted;
        for (const auto& [key, f] : lines) {
            if (key[0] != "all" || key[3] != th) continue;
            std::vector<std::pair<double, double>> pts;
            for (int i = 0; i <= 24; ++i) {
                const double x = lo * std::pow(hi / lo, i / 24.0);
                pts.push_back({x, f.coef[0] + f.coef[1] * x});
            }
            fitted.push_back({"fit, " + key[1] + (key[2] == "cpu" ? "" : " " + key[2]) + ", " + key[4] + " (all models)", pts});
        }
        auto f = plot.draw(spec.name + "-t" + th, spec.title + " (" + th + " threads)", [&](Gnuplot& gp) {
            gp << "set logscale xy\nset xlabel 'M x N x K x H'\nset ylabel 'median time per call (us)'\nset format x '1e%L'\n";
            std::string cmd = "plot ";
            int i = 0;
            for (const auto& [name, pts] : series) {  // 8 colours, then the next point shape
                const int pt[] = {7, 5, 9, 11, 13};
                cmd += std::string(i ? ", " : "") + "'-' using 1:2 with points lc " + std::to_string(i % 8 + 1) + " pt " +
                       std::to_string(pt[(i / 8) % 5]) + " ps 0.8 title " + gnuplot_quote(name);
                ++i;
            }
            for (const auto& [name, pts] : fitted)
                cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with lines dt 2 lw 2 title " + gnuplot_quote(name);
            gp << cmd << "\n";
            for (const auto& [name, pts] : series) gp.send1d(pts);
            for (const auto& [name, pts] : fitted) gp.send1d(pts);
        });
        written.push_back(f.png);
        written.push_back(f.svg);
    }
    return out;
}

}  // namespace profinfer
