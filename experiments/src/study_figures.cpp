#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "profinfer/plotter.h"
#include "profinfer/study_text.h"
#include "study_parts.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// One metric's figure: series → x → (median, lo, hi), drawn against the study's x values.
struct MetricFigure {
    const Study& s;
    std::string metric;
    std::map<std::string, std::map<std::string, Interval>> series;
    const std::vector<std::string>& xs;
    std::string caption;
    bool log_y = false, below_zero = false;  // below zero: a median or an interval under 0 (a slowdown within noise)
};

// The x values of the points, in order (numbers sorted as numbers).
std::vector<std::string> x_values(const Study& s, bool& x_numeric) {
    std::vector<std::string> xs;
    for (const auto& r : s.points)
        if (std::find(xs.begin(), xs.end(), r.params.at(s.spec.x)) == xs.end()) xs.push_back(r.params.at(s.spec.x));
    // Layers offloaded are drawn as categories: "all" (99) is not a position past 12.
    x_numeric = s.spec.x != "ngl" && std::all_of(xs.begin(), xs.end(), numeric);
    if (x_numeric || (!xs.empty() && std::all_of(xs.begin(), xs.end(), numeric)))
        std::sort(xs.begin(), xs.end(), [](const auto& a, const auto& b) { return std::stod(a) < std::stod(b); });
    return xs;
}

// Every figure's caption: the machine, the models, the level, n.
std::string figure_caption(const Study& s) {
    std::set<std::string> models;
    for (const auto& r : s.points) models.insert(r.params.at("model"));
    std::string model_list;
    for (const auto& m : models) model_list += (model_list.empty() ? "" : ", ") + m;
    // The level: the spec's, unless the points vary the tracer (then each point names its own).
    const bool tracer_varies = std::find(s.varying.begin(), s.varying.end(), "tracer") != s.varying.end();
    const std::string level = tracer_varies ? "level or tracer per point (tracer)" : "--level " + s.spec.level;
    return s.machine() + "; " + model_list + "; " + level + "; n = " + rounds_text(s.min_n, s.max_n) +
           " per point: median and 95 % bootstrap interval" + (s.min_n < kMinRoundsForInterval ? " (none: too few rounds)" : "");
}

// A series per value of every varying parameter but x (spec.series first): two points never
// share one (x, series) cell, where one would hide the other.
void fill_series(MetricFigure& fig) {
    const Study& s = fig.s;
    const ExperimentSpec& spec = s.spec;
    double lo_all = INFINITY, hi_all = 0;
    for (size_t i = 0; i < s.points.size(); ++i) {
        const Interval iv = s.interval_of(i, fig.metric);
        if (!std::isfinite(iv.median)) continue;
        std::string name = spec.series.empty() ? "" : spec.series + "=" + s.points[i].params.at(spec.series);
        for (const auto& v : s.varying)
            if (v != spec.x && v != spec.series) name += (name.empty() ? "" : ", ") + v + "=" + s.points[i].params.at(v);
        fig.series[name.empty() ? fig.metric : name][s.points[i].params.at(spec.x)] = iv;
        if (iv.median > 0) lo_all = std::min(lo_all, iv.median), hi_all = std::max(hi_all, iv.median);
        fig.below_zero = fig.below_zero || iv.median < 0 || (iv.has_interval() && iv.lo < 0);
    }
    fig.log_y = !fig.below_zero && lo_all > 0 && hi_all / lo_all >= 30;  // values spanning decades
}

// Numbers on x: a line per series with the intervals as error bars.
void plot_lines(Gnuplot& gp, const MetricFigure& fig) {
    const ExperimentSpec& spec = fig.s.spec;
    const auto& xs = fig.xs;
    const auto& series = fig.series;
    const std::string& metric = fig.metric;
    const fs::path& out_dir = fig.s.out_dir;
    // Ticks at the values measured (no "1.5 threads"), the outer points off the border.
    if (xs.size() <= 16) {
        std::string tics;
        for (const auto& x : xs) tics += (tics.empty() ? "" : ", ") + x;
        gp << "set xtics (" << tics << ")\n";
    }
    gp << "set offsets graph 0.05, graph 0.05, 0, 0\n";
    std::string cmd = "plot ";
    int k = 0;
    for (const auto& [name, by_x] : series)
        cmd += std::string(k++ ? ", " : "") + "'-' using 1:2:3:4 with yerrorlines lw 2 pt 7 title " +
               gnuplot_quote(name);
    // Paper Fig. 11: the weight stream against the machine's measured triad roof.
    std::vector<std::pair<double, double>> roof;
    if (metric == "weight_stream_gbs" && spec.x == "threads")
        for (const auto& x : xs)
            if (const double r = triad_gbs(machine_json(out_dir), std::stoi(x)); r > 0) roof.emplace_back(std::stod(x), r);
    if (!roof.empty())
        cmd += ", '-' using 1:2 with linespoints dt 2 lw 2 pt 6 lc rgb 'black' title 'triad roof (bench-machine, same threads)'";
    gp << cmd << "\n";
    for (const auto& [name, by_x] : series) {
        std::vector<std::tuple<double, double, double, double>> pts;
        for (const auto& x : xs)
            if (auto it = by_x.find(x); it != by_x.end()) {
                const Interval& iv = it->second;
                pts.emplace_back(std::stod(x), iv.median, iv.has_interval() ? iv.lo : iv.median,
                                 iv.has_interval() ? iv.hi : iv.median);
            }
        gp.send1d(pts);
    }
    if (!roof.empty()) gp.send1d(roof);
}

// Categories that differ between series: a panel per series with only its own categories.
void plot_panels(Gnuplot& gp, const MetricFigure& fig, int rows, int cols, int height) {
    const ExperimentSpec& spec = fig.s.spec;
    const auto& xs = fig.xs;
    const auto& series = fig.series;
    const std::string& metric = fig.metric;
    const std::string& caption = fig.caption;
    // The caption under the last row, in lines that fit the width 16 pixels apart
    // (drawn with the first panel, at screen coordinates); x is the panel's
    // categories, named in its title.
    const auto lines = Plotter::caption_lines(caption, 150);
    const double line = 16.0 / height, bottom = (105.0 + 16.0 * double(lines.size() - 1)) / height;
    gp << "unset title\nunset xlabel\nset multiplot layout " << rows << "," << cols << " title "
       << gnuplot_quote(spec.title + ": " + metric) << " margins 0.07, 0.98, " << bottom << ", "
       << 1 - 70.0 / height << " spacing 0.08, " << 115.0 / height << "\n"
       << "set style data histograms\nset style histogram errorbars gap 1 lw 1\n"
          "set style fill solid 0.5 border -1\nset xtics rotate by -30\nunset key\n";
    Plotter::caption_labels(gp, lines, line, line);
    int k = 0;
    for (const auto& [name, by_x] : series) {
        if (k)
            for (size_t i = 0; i < lines.size(); ++i) gp << "unset label " << 99 - i << "\n";
        gp << "set title " << gnuplot_quote(spec.x + " — " + name);
        gp << "\nplot '-' using 3:4:5:xtic(2) lc " << ++k << "\n";
        int i = 0;
        for (const auto& x : xs)
            if (auto it = by_x.find(x); it != by_x.end()) {
                const Interval& iv = it->second;
                gp << i++ << " " << gnuplot_label(category_label(spec.x, x)) << " " << iv.median << " "
                   << (iv.has_interval() ? iv.lo : iv.median) << " " << (iv.has_interval() ? iv.hi : iv.median) << "\n";
            }
        gp << "e\n";
    }
    gp << "unset multiplot\n";
}

// Categories: clustered bars, one per series, with the interval as an error bar.
void plot_bars(Gnuplot& gp, const MetricFigure& fig) {
    const ExperimentSpec& spec = fig.s.spec;
    const auto& xs = fig.xs;
    const auto& series = fig.series;
    // A bottom margin for the rotated category labels and the axis label above the caption.
    gp << "set style data histograms\nset style histogram errorbars gap 1 lw 1\n"
          "set style fill solid 0.5 border -1\nset xtics rotate by -20\nset bmargin 7\n";
    // Rows "index label median lo hi": an inline data line that begins with 'e' ends
    // the block in gnuplot, so the label is never first.
    std::string cmd = "plot ";
    bool first = true;
    for (const auto& [name, by_x] : series) {
        cmd += std::string(first ? "" : ", ") + "'-' using 3:4:5" + (first ? ":xtic(2)" : "") + " title " +
               gnuplot_quote(name);
        first = false;
    }
    gp << cmd << "\n";
    for (const auto& [name, by_x] : series) {
        for (size_t i = 0; i < xs.size(); ++i) {
            auto it = by_x.find(xs[i]);
            const Interval iv = it == by_x.end() ? Interval{} : it->second;
            const double m = std::isfinite(iv.median) ? iv.median : NAN;
            gp << i << " " << gnuplot_label(category_label(spec.x, xs[i])) << " " << m << " " << (iv.has_interval() ? iv.lo : m) << " "
               << (iv.has_interval() ? iv.hi : m) << "\n";
        }
        gp << "e\n";
    }
}

}  // namespace

void draw_study_figures(const Study& s, std::vector<fs::path>& written) {
    const ExperimentSpec& spec = s.spec;
    bool x_numeric = false;
    const std::vector<std::string> xs = x_values(s, x_numeric);
    const std::string caption = figure_caption(s);
    Plotter plot(s.out_dir);
    for (const auto& metric : spec.metrics) {
        MetricFigure fig{s, metric, {}, xs, caption};
        fill_series(fig);
        const auto& series = fig.series;
        if (series.empty()) continue;
        const std::string unit = unit_of(metric);
        // Categories that differ between series (a study of several programs, each with its
        // own configurations): a panel per series with only its own categories, not one row
        // of mostly empty clusters.
        const bool panels = !x_numeric && series.size() > 1 &&
                            std::any_of(series.begin(), series.end(), [&](const auto& one) { return one.second.size() < xs.size(); });
        const int cols = series.size() > 2 ? 2 : int(series.size());
        const int rows = (int(series.size()) + cols - 1) / cols;
        const int height = 360 * rows + 80;  // panels: pixels (room for rotated labels, titles, caption)
        auto f = plot.draw(spec.name + "-" + metric, spec.title + ": " + metric, [&](Gnuplot& gp) {
            static const std::map<std::string, std::string> kParamUnit = {
                {"ctx", "tokens in the KV cache"}, {"prompt", "tokens"}, {"gen", "tokens"}, {"threads", "threads"},
                {"ngl", "layers on the GPU backend"}};
            const auto xu = kParamUnit.find(spec.x);
            gp << "set xlabel " << gnuplot_quote(spec.x + (xu == kParamUnit.end() ? "" : " (" + xu->second + ")")) << "\nset ylabel "
               << gnuplot_quote(metric + (unit.empty() ? "" : " (" + unit + ")")) << "\n";
            if (!panels) Plotter::caption(gp, caption);  // panels: under the title
            gp << (fig.log_y ? "set logscale y\n" : fig.below_zero ? "set yrange [*:*]\nset xzeroaxis lt -1 lw 1\n" : "set yrange [0:*]\n");
            if (x_numeric) plot_lines(gp, fig);
            else if (panels) plot_panels(gp, fig, rows, cols, height);
            else plot_bars(gp, fig);
        }, panels ? std::pair{1000, height} : std::pair{900, 500});
        written.push_back(f.png);
        written.push_back(f.svg);
    }
}

}  // namespace profinfer
