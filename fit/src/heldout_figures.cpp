#include "fit_parts.h"

#include <cmath>
#include <map>
#include <set>

#include "profinfer/plotter.h"

namespace profinfer::fit {

namespace {
std::string threads_text(int64_t n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

std::string list_of(const std::set<std::string>& names) {
    std::string o;
    for (const auto& n : names) o += (o.empty() ? "" : ", ") + n;
    return o;
}
}  // namespace

std::vector<fs::path> draw_heldout(const fs::path& out_dir, const Table& matmul, const Table& decode,
                                   const std::string& caption) {
    std::vector<fs::path> written;
    // Predicted against measured, held-out MatMuls: one figure per thread count.
    Plotter plot(out_dir);
    std::set<int64_t> thread_counts;
    for (const auto& r : matmul.rows) thread_counts.insert(r[2].get<int64_t>());
    for (int64_t th : thread_counts) {
        std::map<std::string, std::vector<std::pair<double, double>>> s;
        std::set<std::string> models;
        double lo = INFINITY, hi = 0;
        for (const auto& r : matmul.rows) {
            if (r[2].get<int64_t>() != th) continue;
            models.insert(r[4].get<std::string>());
            const double meas = r[9].get<double>();
            lo = std::min(lo, meas), hi = std::max(hi, meas);
            s["linear, " + r[3].get<std::string>()].push_back({meas, r[10].get<double>()});
            if (r[11].is_number()) s["roofline, " + r[3].get<std::string>()].push_back({meas, r[11].get<double>()});
        }
        auto f = plot.draw("matmul-heldout-t" + std::to_string(th),
                           "Held-out weight MatMuls, predicted vs measured (" + threads_text(th) + ")", [&](Gnuplot& gp) {
                               Plotter::caption(gp, caption + "; held out: " + list_of(models) +
                                                        "; measured: each shape's median per call over the rounds; "
                                                        "predicted: the lines fitted on the other models (linear), "
                                                        "the machine's measured roofs (roofline)");
                               gp << "set logscale xy\nset xlabel 'measured (us)'\nset ylabel 'predicted (us)'\nset format x '1e%L'\n"
                                     "set format y '1e%L'\n";
                               std::string cmd = "plot ";
                               int i = 0;
                               for (const auto& [name, pts] : s)
                                   cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with points pt 7 ps 0.7 title " + gnuplot_quote(name);
                               cmd += ", '-' using 1:2 with lines lc rgb 'black' title 'exact', '-' using 1:2 with lines dt 2 lc rgb "
                                      "'gray' title '+/-10 %', '-' using 1:2 with lines dt 2 lc rgb 'gray' notitle";
                               gp << cmd << "\n";
                               for (const auto& [name, pts] : s) gp.send1d(pts);
                               for (double f : {1.0, 1.1, 0.9}) gp.send1d(std::vector<std::pair<double, double>>{{lo, lo * f}, {hi, hi * f}});
                           });
        written.push_back(f.png), written.push_back(f.svg);
    }
    if (!decode.rows.empty()) {
        auto f = plot.draw("decode-heldout", "Decode speed, measured vs predicted for held-out models", [&](Gnuplot& gp) {
            gp << "set xlabel 'measured (tokens/s)'\nset ylabel 'predicted (tokens/s)'\nset logscale xy\n";
            std::map<std::string, std::vector<std::tuple<double, double, std::string>>> s;
            std::set<std::string> models;
            size_t not_drawn = 0;  // a prediction at or below 0 tokens/s has no place on a log axis
            double lo = INFINITY, hi = 0;
            for (const auto& r : decode.rows) {
                const double meas = r[4].get<double>();
                lo = std::min(lo, meas), hi = std::max(hi, meas);
                models.insert(r[3].get<std::string>());
                not_drawn += !(r[5].get<double>() > 0) + !(r[7].get<double>() > 0);
                const std::string group = r[1].get<std::string>() + ", " + threads_text(r[2].get<int64_t>());
                s["sum of operators, " + group].push_back({meas, r[5].get<double>(), r[3].get<std::string>()});
                s["direct, " + group].push_back({meas, r[7].get<double>(), ""});
            }
            Plotter::caption(gp, caption + "; held out: " + list_of(models) +
                                     "; measured: median decode speed over the rounds; predicted: the sum of the "
                                     "operators' fitted times (sum) or a line in the weight bytes (direct), fitted on the "
                                     "other models" +
                                     (not_drawn ? "; not drawn: " + std::to_string(not_drawn) + " of " +
                                                      std::to_string(2 * decode.rows.size()) +
                                                      " predictions at or below 0 tokens/s (decode-heldout.csv)"
                                                : ""));
            std::string cmd = "plot ";
            int i = 0;
            for (const auto& [name, pts] : s)  // the model names beside the sum-of-operators points
                cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with points pt 7 title " + gnuplot_quote(name) +
                       (std::get<2>(pts.front()).empty() ? "" : ", '-' using 1:2:3 with labels offset 0.5,0.5 left font ',7' notitle");
            cmd += ", '-' using 1:2 with lines lc rgb 'black' title 'exact'";
            gp << cmd << "\n";
            for (const auto& [name, pts] : s) {
                std::vector<std::pair<double, double>> xy;
                for (const auto& [x, y, l] : pts) xy.push_back({x, y});
                gp.send1d(xy);
                if (!std::get<2>(pts.front()).empty()) gp.send1d(pts);
            }
            gp.send1d(std::vector<std::pair<double, double>>{{lo * 0.9, lo * 0.9}, {hi * 1.1, hi * 1.1}});
        });
        written.push_back(f.png), written.push_back(f.svg);
    }
    return written;
}

std::vector<fs::path> draw_decode_roofs(const fs::path& out_dir, const Table& heldout, const std::string& caption,
                                        const std::string& formula) {
    Plotter plot(out_dir);
    // Series: which check (each model, each thread count) at which thread count; the model
    // names beside the points; the prediction's interval as a vertical bar.
    std::map<std::string, std::vector<std::tuple<double, double, double, double, std::string>>> s;
    double lo = INFINITY, hi = 0;
    size_t not_drawn = 0;
    for (const auto& r : heldout.rows) {
        const double meas = r[heldout.column("measured_tps")].get<double>();
        const auto& pred = r[heldout.column("predicted_tps")];
        if (!pred.is_number()) {
            ++not_drawn;
            continue;
        }
        lo = std::min(lo, meas), hi = std::max(hi, meas);
        s["held out: " + r[heldout.column("check")].get<std::string>() + ", " + threads_text(r[heldout.column("threads")].get<int64_t>())]
            .push_back({meas, pred.get<double>(), r[heldout.column("lo_tps")].get<double>(), r[heldout.column("hi_tps")].get<double>(),
                        r[heldout.column("model")].get<std::string>()});
    }
    auto f = plot.draw("decode-roofs-heldout", "Decode speed from the machine's roofs, measured vs predicted (held out)", [&](Gnuplot& gp) {
        Plotter::caption(gp, caption + "; predicted: " + formula + " fitted without the model "
                                       "(each model) or without the thread count (each thread count); bars: the 95 % interval "
                                       "predict prints" +
                                 (not_drawn ? "; not drawn: " + std::to_string(not_drawn) + " predictions at or below 0" : ""));
        gp << "set xlabel 'measured decode speed (tokens/s)'\nset ylabel 'predicted decode speed (tokens/s)'\nset logscale xy\n"
              "set key inside top left box opaque\n"
           << "set xrange [" << lo * 0.8 << ":" << hi * 1.4 << "]\nset yrange [" << lo * 0.8 << ":" << hi * 1.4 << "]\n";
        std::string cmd = "plot ";
        int i = 0;
        for (const auto& [name, pts] : s)
            cmd += std::string(i++ ? ", " : "") + "'-' using 1:2:3:4 with yerrorbars pt 7 title " + gnuplot_quote(name);
        cmd += ", '-' using 1:2:3 with labels offset 0.5,-0.6 left font ',7' notitle";
        cmd += ", '-' using 1:2 with lines lc rgb 'black' title 'exact', '-' using 1:2 with lines dt 2 lc rgb 'gray' title "
               "'+/-15 %', '-' using 1:2 with lines dt 2 lc rgb 'gray' notitle";
        gp << cmd << "\n";
        std::vector<std::tuple<double, double, std::string>> labels;
        for (const auto& [name, pts] : s) {
            std::vector<std::tuple<double, double, double, double>> xy;
            for (const auto& [x, y, l, h, m] : pts) {
                xy.push_back({x, y, l, h});
                if (name.find("each model") != std::string::npos) labels.push_back({x, y, m});
            }
            gp.send1d(xy);
        }
        gp.send1d(labels);
        for (double k : {1.0, 1.15, 0.85}) gp.send1d(std::vector<std::pair<double, double>>{{lo * 0.9, lo * 0.9 * k}, {hi * 1.1, hi * 1.1 * k}});
    });
    return {f.png, f.svg};
}

}  // namespace profinfer::fit
