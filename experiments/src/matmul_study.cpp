// Paper Fig. 10 across a study's points: every point's weight MatMuls (stat --by matmul)
// gathered into matmuls.csv — the input of `profinfer fit` — with a least-squares line
// time = a + b·MNKH per model, thread count and batch class (N = 1, N > 1; fit.csv, fit.md) and a log-log
// figure per thread count.
#include <algorithm>
#include <cmath>
#include <set>
#include <fstream>
#include <sstream>
#include <tuple>

#include "profinfer/error.h"
#include "profinfer/study_summary.h"
#include "profinfer/study_text.h"
#include "profinfer/number_text.h"
#include "profinfer/output_file.h"
#include "profinfer/number_text.h"
#include "profinfer/perf_models.h"
#include "profinfer/plotter.h"
#include "profinfer/regression.h"
#include "profinfer/intervals.h"
#include "profinfer/stats.h"
#include "profinfer/text_escape.h"
#include "profinfer/vulkan_timings.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// The point parameters a MatMul row carries: what its time depends on besides its shape.
const std::vector<std::string> kRowParams = {"model", "type", "backend", "threads"};


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

namespace {

using Groups = std::map<std::vector<std::string>, Group>;  // kRowParams values + batch class → shapes

// Every point's weight MatMuls: the rows of matmuls.csv, the shapes of each line, the same per
// round, and the thread counts.
struct MatmulShapes {
    Table all;
    Groups groups;
    std::map<std::vector<std::string>, std::map<int, Group>> by_round;
    std::set<std::string> threads;
};

MatmulShapes read_matmul_shapes(const std::vector<StudyPoint>& points) {
    MatmulShapes out;
    Table& all = out.all;
    auto& groups = out.groups;
    auto& by_round = out.by_round;
    auto& threads = out.threads;
    all.columns = kRowParams;
    for (const auto& p : points) {
        store::Database trace(p.db, store::Database::Mode::ReadOnly);
        Table t = stats_table(trace, "matmul");
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
            const int64_t n = r[col("n")].get<int64_t>();
            const bool one = n == 1;
            key.push_back(perf::batch_class(n));
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
    return out;
}

// Each line fitted again on each round's shapes alone: the claims' samples.
std::vector<PointSamples> round_fits(const std::map<std::vector<std::string>, std::map<int, Group>>& by_round) {
    std::vector<PointSamples> out;
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
        if (!s.metrics.empty()) out.push_back(std::move(s));
    }
    return out;
}

// The lines (per model, and pooled over the models) and fit.csv's table of them.
Table fit_lines(const Groups& groups, const Groups& pooled, std::map<std::vector<std::string>, LinearFit>& lines) {
    Table fits{{"model", "type", "backend", "threads", "batch", "shapes", "intercept_us", "intercept_lo", "intercept_hi",
                "ns_per_mnkh", "ns_per_mnkh_lo", "ns_per_mnkh_hi", "r2", "max_rel_err_pct"},
               {}};
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
    return fits;
}

void write_fit_md(const ExperimentSpec& spec, const Table& fits, const fs::path& out_dir) {
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
           << " | " << r[5] << " | " << format_double(r[6]) << " [" << format_double(r[7]) << ", " << format_double(r[8]) << "] | "
           << format_double(r[9], "%.4g") << " [" << format_double(r[10], "%.4g") << ", " << format_double(r[11], "%.4g") << "] | " << format_double(r[12], "%.4f")
           << " | " << format_double(r[13], "%.1f") << " |\n";
    OutputFile::write(out_dir / "fit.md", md.str());
}

// One log-log figure per thread count: a series per model, and the pooled lines.
void draw_matmul_figures(const ExperimentSpec& spec, const MatmulShapes& shapes,
                         const std::map<std::vector<std::string>, LinearFit>& lines, const fs::path& out_dir,
                         const std::string& caption, std::vector<fs::path>& written) {
    const auto& groups = shapes.groups;
    Plotter plot(out_dir);
    for (const auto& th : shapes.threads) {
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
        // Decode (n=1) solid and wide under the prompts' (n>1) dashes: lines that coincide both show.
        struct Line {
            std::string name, style;
            std::vector<std::pair<double, double>> pts;
        };
        std::vector<Line> fitted;
        for (const auto& [key, f] : lines) {
            if (key[0] != "all" || key[3] != th) continue;
            std::vector<std::pair<double, double>> pts;
            for (int i = 0; i <= 24; ++i) {
                const double x = lo * std::pow(hi / lo, i / 24.0);
                pts.push_back({x, f.coef[0] + f.coef[1] * x});
            }
            fitted.push_back({"fit, " + key[1] + (key[2] == "cpu" ? "" : " " + key[2]) + ", " + key[4] + " (all models)",
                              key[4] == perf::batch_class(1) ? "dt 1 lw 4" : "dt 2 lw 2", pts});
        }
        auto f = plot.draw(spec.name + "-t" + th, spec.title + " (" + th + " threads)", [&](Gnuplot& gp) {
            Plotter::caption(gp, caption);
            gp << "set logscale xy\nset xlabel 'M x N x K x H'\nset ylabel 'median time per call (us)'\nset format x '1e%L'\n";
            std::string cmd = "plot ";
            int i = 0;
            for (const auto& [name, pts] : series) {  // 8 colours, then the next point shape
                const int pt[] = {7, 5, 9, 11, 13};
                cmd += std::string(i ? ", " : "") + "'-' using 1:2 with points lc " + std::to_string(i % 8 + 1) + " pt " +
                       std::to_string(pt[(i / 8) % 5]) + " ps 0.8 title " + gnuplot_quote(name);
                ++i;
            }
            for (const auto& l : fitted)
                cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with lines " + l.style + " title " + gnuplot_quote(l.name);
            gp << cmd << "\n";
            for (const auto& [name, pts] : series) gp.send1d(pts);
            for (const auto& l : fitted) gp.send1d(l.pts);
        });
        written.push_back(f.png);
        written.push_back(f.svg);
    }
}

}  // namespace

MatmulSummary summarise_matmuls(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                const fs::path& out_dir, const std::string& caption) {
    MatmulSummary out;
    std::vector<fs::path>& written = out.files;
    MatmulShapes shapes = read_matmul_shapes(points);
    if (shapes.all.rows.empty()) throw Error(spec.name + ": no weight MatMul in any point (record with --level op or full)");
    OutputFile::write(out_dir / "matmuls.csv", shapes.all.to_csv());
    written.push_back(out_dir / "matmuls.csv");
    // Per model, thread count and batch class; pooled over models ("all") to test whether one
    // line serves every model.
    const Groups pooled = pooled_over_models(shapes.groups);
    {
        std::map<int, Groups> rounds;  // round → the groups of its shapes
        for (const auto& [key, by] : shapes.by_round)
            for (const auto& [round, g] : by) rounds[round][key] = g;
        for (const auto& [round, groups_of_round] : rounds)
            for (const auto& [pk, g] : pooled_over_models(groups_of_round)) shapes.by_round[pk][round] = g;
    }
    out.fits = round_fits(shapes.by_round);
    std::map<std::vector<std::string>, LinearFit> lines;
    const Table fits = fit_lines(shapes.groups, pooled, lines);
    OutputFile::write(out_dir / "fit.csv", fits.to_csv());
    written.push_back(out_dir / "fit.csv");
    write_fit_md(spec, fits, out_dir);
    written.push_back(out_dir / "fit.md");
    draw_matmul_figures(spec, shapes, lines, out_dir, caption, written);
    return out;
}

// Paper Fig. 12: per weight-MatMul shape of decode (N = 1), the CPU's time against the
// Vulkan device's. CPU: each round's trace, the median per call of the shape's nodes (stat
// --by matmul; names that share a shape pooled). Vulkan: each round's ggml-vulkan timestamps
// (vkperf = on), mean per call. Per side the median over rounds with its interval. Vulkan
// fuses some MatMuls with the ADD after them (the output projection and the FFN down
// projection with the residual): those are a row of their own, named by the fusion.
namespace {

// One decode weight-MatMul shape of the CPU and Vulkan points.
struct BackendRow {
    std::set<std::string> names;
    std::map<int, std::vector<double>> cpu;  // round → the shape's nodes' medians
    std::map<int, double> vulkan;            // round → mean µs per call
    std::map<int, std::vector<double>> vulkan_run_cpu;  // round → the shape's nodes the Vulkan run left on its CPU
};
// (type, m, k, fusion on Vulkan) → row
using BackendRows = std::map<std::tuple<std::string, int64_t, int64_t, std::string>, BackendRow>;

// A shape's bar of the figure.
struct Bar {
    std::string label;
    Interval cpu, vk;
    bool on_cpu = false;  // the Vulkan run left this shape on its CPU: vk is that time
};

BackendRows read_backend_rows(const std::vector<StudyPoint>& points) {
    using Row = BackendRow;
    BackendRows rows;
    std::map<std::tuple<std::string, int64_t, int64_t>, std::set<std::string>> names;
    // The decode weight MatMuls a trace recorded on the CPU (per shape, per node name).
    auto cpu_matmuls = [&](const StudyPoint& p, auto&& add) {
        store::Database trace(p.db, store::Database::Mode::ReadOnly);
        for (const auto& r : stats_table(trace, "matmul").to_json()) {
            if (r["phase"] != "decode" || r["n"].get<int64_t>() != 1) continue;
            const auto shape = std::make_tuple(r["weight_type"].get<std::string>(), r["m"].get<int64_t>(), r["k"].get<int64_t>());
            names[shape].insert(r["name"].get<std::string>());
            add(rows[std::tuple_cat(shape, std::make_tuple(std::string()))], r["median_us"].get<double>());
        }
    };
    for (const auto& p : points) {
        if (p.params.at("backend") == "cpu") {
            cpu_matmuls(p, [&](Row& row, double us) { row.cpu[p.round].push_back(us); });
        } else if (p.params.at("backend") == "vulkan") {
            std::ifstream in(vulkan_timings_file(p.db));
            if (!in) continue;
            for (const auto& t : parse_vulkan_timings(in))
                if (t.op.rfind("MUL_MAT", 0) == 0 && t.n == 1 && !t.batched && t.count > 0)
                    rows[{t.type, t.m, t.k, t.fused}].vulkan[p.round] = t.mean_us();
            // What llama.cpp's scheduler kept on the CPU in the Vulkan run (an operator the
            // device refused, e.g. a weight beyond its largest storage buffer).
            cpu_matmuls(p, [&](Row& row, double us) { row.vulkan_run_cpu[p.round].push_back(us); });
        }
    }
    // A fused shape's CPU side is the unfused shape's (the CPU runs the ADD as its own node).
    for (auto& [key, row] : rows) {
        const auto shape = std::make_tuple(std::get<0>(key), std::get<1>(key), std::get<2>(key));
        row.names = names[shape];
        if (!std::get<3>(key).empty()) {
            auto it = rows.find(std::tuple_cat(shape, std::make_tuple(std::string())));
            if (it != rows.end()) row.cpu = it->second.cpu;
        }
    }
    return rows;
}

// matmul-backends.csv and .md, and the figure's bars.
std::vector<Bar> backend_tables(const ExperimentSpec& spec, const BackendRows& rows, Table& t, std::ostringstream& md) {
    t = Table{{"type", "m", "k", "names", "vulkan_kernel", "cpu_us", "cpu_lo", "cpu_hi", "cpu_n", "vulkan_us", "vulkan_lo",
               "vulkan_hi", "vulkan_n", "vulkan_over_cpu", "vulkan_run_cpu_us", "vulkan_run_cpu_n"}};
    md << "# " << spec.title << ": weight MatMuls of decode per shape, CPU vs Vulkan\n\n"
       << "CPU: each round's trace (median per call of the shape's nodes); Vulkan: ggml-vulkan's own timestamps "
          "(GGML_VK_PERF_LOGGER, mean per call); each the median over rounds with its 95 % interval. Names: the CPU "
          "graph's nodes of that shape. A MUL_MAT_ADD row: on Vulkan, the MatMuls of that shape followed by the residual "
          "ADD (output projection, FFN down) run fused with it, a kernel of their own; the MatMul row of the same shape is "
          "the others (e.g. Q). The CPU runs the ADD as its own node, so its side is the shape's MatMuls alone. "
          "\"on the CPU\": in the Vulkan run llama.cpp's scheduler left that MatMul on the CPU (ggml-vulkan refused it); "
          "its time there is given instead.\n\n"
       << "| names (CPU graph) | type | m × k | Vulkan kernel | CPU µs | Vulkan µs | Vulkan / CPU |\n|---|---|---|---|---|---|---|\n";
    std::vector<Bar> bars;
    auto interval_of = [](const std::map<int, std::vector<double>>& by_round) {
        std::vector<double> v;
        for (const auto& [round, meds] : by_round) v.push_back(median_of(meds));
        return median_interval(v);
    };
    for (const auto& [key, row] : rows) {
        const bool on_cpu = row.vulkan.empty() && !row.vulkan_run_cpu.empty() && std::get<3>(key).empty();
        if (row.cpu.empty() || (row.vulkan.empty() && !on_cpu)) continue;
        std::vector<double> v;
        for (const auto& [round, us] : row.vulkan) v.push_back(us);
        const Interval ci = interval_of(row.cpu), vi = on_cpu ? Interval{} : median_interval(v);
        const Interval oi = interval_of(row.vulkan_run_cpu);
        std::string nm;
        for (const auto& n : row.names) nm += (nm.empty() ? "" : ", ") + n;
        const std::string kernel = on_cpu ? "on the CPU" : std::get<3>(key).empty() ? "MatMul" : std::get<3>(key);
        t.rows.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), nm, kernel, ci.median, number_or_null(ci.lo),
                          number_or_null(ci.hi), ci.n, number_or_null(vi.median), number_or_null(vi.lo),
                          number_or_null(vi.hi), vi.n, number_or_null(vi.median / ci.median), number_or_null(oi.median),
                          oi.n});
        md << "| " << nm << " | " << std::get<0>(key) << " | " << std::get<1>(key) << " × " << std::get<2>(key) << " | "
           << kernel << " | " << format_with_interval(ci.median, ci.lo, ci.hi) << " (n " << ci.n << ") | "
           << (on_cpu ? "– (on the CPU in the Vulkan run: " + format_with_interval(oi.median, oi.lo, oi.hi) + ", n " +
                            std::to_string(oi.n) + ")"
                      : format_with_interval(vi.median, vi.lo, vi.hi) + " (n " + std::to_string(vi.n) + ")")
           << " | " << (on_cpu ? "–" : format_double(vi.median / ci.median)) << " |\n";
        bars.push_back({nm + (kernel == "MatMul" ? "" : " (" + (on_cpu ? std::string("on CPU") : "+ADD") + ")") + " " +
                            std::to_string(std::get<1>(key)) + "x" + std::to_string(std::get<2>(key)),
                        ci, on_cpu ? oi : vi, on_cpu});
    }
    return bars;
}

Figure draw_backend_bars(const ExperimentSpec& spec, const std::vector<Bar>& bars, const fs::path& out_dir,
                         const std::string& caption) {
    // Bars per shape on a log axis, CPU and Vulkan side by side, intervals as error bars; a
    // shape the Vulkan run left on its CPU drawn grey beside the CPU build's.
    double lo = INFINITY, hi = 0;
    for (const auto& b : bars)
        for (const Interval* i : {&b.cpu, &b.vk}) {
            lo = std::min(lo, std::isfinite(i->lo) ? i->lo : i->median);
            hi = std::max(hi, std::isfinite(i->hi) ? i->hi : i->median);
        }
    const double floor = lo / 3;
    const bool any_on_cpu = std::any_of(bars.begin(), bars.end(), [](const Bar& b) { return b.on_cpu; });
    Plotter plot(out_dir);
    auto f = plot.draw(spec.name + "-matmul-shapes", "Decode weight MatMuls per shape (CPU graph names, m x k): CPU vs Vulkan device time", [&](Gnuplot& gp) {
        Plotter::caption(gp, caption);
        gp << "set bmargin 10\nset logscale y\nset ylabel 'time per call (us, log scale)'\nset yrange [" << floor << ":"
           << hi * 3 << "]\nset xrange [-0.6:" << bars.size() - 0.4
           << "]\nset xtics rotate by -25 font ',8'\nset key above horizontal\nset xtics (";
        for (size_t i = 0; i < bars.size(); ++i) gp << (i ? ", " : "") << gnuplot_quote(bars[i].label) << " " << i;
        gp << ")\nplot '-' using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 lc rgb '#2874a6' title 'CPU (trace)', "
              "'-' using 1:2:3:4 with yerrorbars pt 0 lc rgb 'black' notitle, "
              "'-' using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 lc rgb '#c0392b' title 'Vulkan device (ggml-vulkan timestamps)', "
              "'-' using 1:2:3:4 with yerrorbars pt 0 lc rgb 'black' notitle"
           << (any_on_cpu ? ", '-' using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 lc rgb '#aab7b8' title 'Vulkan run, left on "
                            "its CPU (the device refused it)', '-' using 1:2:3:4 with yerrorbars pt 0 lc rgb 'black' notitle"
                          : "")
           << "\n";
        // side 0: the CPU build; 1: the Vulkan device; 2: the Vulkan run's CPU.
        for (int side = 0; side < (any_on_cpu ? 3 : 2); ++side) {
            std::vector<std::tuple<double, double, double, double, double, double>> boxes;
            std::vector<std::tuple<double, double, double, double>> err;
            for (size_t i = 0; i < bars.size(); ++i) {
                if (side > 0 && bars[i].on_cpu != (side == 2)) continue;
                const Interval& v = side ? bars[i].vk : bars[i].cpu;
                const double x = double(i) + (side ? 0.19 : -0.19);
                boxes.emplace_back(x, v.median, x - 0.17, x + 0.17, floor, v.median);
                err.emplace_back(x, v.median, std::isfinite(v.lo) ? v.lo : v.median, std::isfinite(v.hi) ? v.hi : v.median);
            }
            if (boxes.empty()) boxes.emplace_back(-10, floor, -10, -10, floor, floor), err.emplace_back(-10, floor, floor, floor);
            gp.send1d(boxes);
            gp.send1d(err);
        }
    });
    return f;
}

}  // namespace

std::vector<fs::path> summarise_matmul_backends(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                                const fs::path& out_dir, const std::string& caption) {
    const BackendRows rows = read_backend_rows(points);
    Table t;
    std::ostringstream md;
    const std::vector<Bar> bars = backend_tables(spec, rows, t, md);
    std::vector<fs::path> written;
    if (bars.empty()) return written;
    OutputFile::write(out_dir / "matmul-backends.csv", t.to_csv());
    OutputFile::write(out_dir / "matmul-backends.md", md.str());
    written.push_back(out_dir / "matmul-backends.csv");
    written.push_back(out_dir / "matmul-backends.md");
    const auto f = draw_backend_bars(spec, bars, out_dir, caption);
    written.push_back(f.png);
    written.push_back(f.svg);
    return written;
}

}  // namespace profinfer
