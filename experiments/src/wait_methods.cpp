// Paper Fig. 6 with its two measures side by side: per op type and thread, the barrier-wait
// share from the exact split (--wait exact: the barrier's own entry and exit) beside the
// sampled estimate (--wait sampled: CPU-clock samples that land in barrier code) with its
// 95 % interval and the number of samples it rests on.
#include <cmath>
#include <map>
#include <tuple>

#include "profinfer/study_summary.h"
#include "profinfer/study_text.h"
#include "profinfer/output_file.h"
#include "profinfer/plotter.h"
#include "profinfer/stats.h"
#include "profinfer/text_escape.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// exact: a point recorded with the barrier split; sampled: with the sampler.
std::string wait_method(const ExperimentSpec& spec, const std::string& tracer) {
    if (tracer == "full-exact" || (tracer == "level" && spec.level == "full" && spec.wait == "exact")) return "exact";
    if (tracer == "full" || (tracer == "level" && spec.level == "full" && spec.wait != "exact")) return "sampled";
    return "";
}

}  // namespace

std::vector<fs::path> summarise_wait_methods(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                             const fs::path& out_dir, const std::string& caption) {
    // Points that differ only in their tracer, first round of each.
    std::map<std::map<std::string, std::string>, std::map<std::string, fs::path>> pairs;
    for (const auto& p : points) {
        const std::string m = wait_method(spec, p.params.at("tracer"));
        if (m.empty()) continue;
        auto key = p.params;
        key.erase("tracer");
        auto& slot = pairs[key][m];
        if (slot.empty() || p.round == 1) slot = p.db;
    }
    std::vector<fs::path> written;
    Plotter plot(out_dir);
    for (const auto& [key, by] : pairs) {
        if (!by.count("exact") || !by.count("sampled")) continue;
        struct Row {
            double exact = NAN, sampled = NAN, lo = NAN, hi = NAN;
            int64_t samples = 0;
        };
        std::map<std::pair<std::string, int>, Row> rows;
        store::Database exact(by.at("exact"), store::Database::Mode::ReadOnly), sampled(by.at("sampled"), store::Database::Mode::ReadOnly);
        for (const auto& r : stats_table(exact, "thread").to_json())
            if (r["wait_share_pct"].is_number()) rows[{r["op"], r["ith"]}].exact = r["wait_share_pct"];
        for (const auto& r : stats_table(sampled, "thread").to_json()) {
            auto& row = rows[{r["op"], r["ith"]}];
            if (r["sampled_wait_pct"].is_number()) row.sampled = r["sampled_wait_pct"];
            if (r["sampled_ci95_lo"].is_number()) row.lo = r["sampled_ci95_lo"], row.hi = r["sampled_ci95_hi"];
            if (r["samples"].is_number()) row.samples = r["samples"];
        }
        Table t{{"op", "ith", "exact_wait_pct", "sampled_wait_pct", "sampled_ci95_lo", "sampled_ci95_hi", "samples"}};
        std::vector<std::tuple<double, double, std::string>> exact_bars;
        std::vector<std::tuple<double, double, double, double, std::string>> sampled_bars;
        int i = 0;
        for (const auto& [k, r] : rows) {
            if (!std::isfinite(r.exact) && !std::isfinite(r.sampled)) continue;
            t.rows.push_back({k.first, k.second, number_or_null(r.exact), number_or_null(r.sampled), number_or_null(r.lo),
                              number_or_null(r.hi), r.samples});
            const std::string label = gnuplot_label(k.first + "_t" + std::to_string(k.second));
            exact_bars.emplace_back(i - 0.2, std::isfinite(r.exact) ? r.exact : 0, label);
            if (std::isfinite(r.sampled))
                sampled_bars.emplace_back(i + 0.2, r.sampled, std::isfinite(r.lo) ? r.lo : r.sampled,
                                          std::isfinite(r.hi) ? r.hi : r.sampled, "n=" + std::to_string(r.samples));
            ++i;
        }
        if (t.rows.empty()) continue;
        const std::string name = spec.name + "-wait-methods-t" + key.at("threads");
        OutputFile::write(out_dir / (name + ".csv"), t.to_csv());
        written.push_back(out_dir / (name + ".csv"));
        auto f = plot.draw(name, "Barrier wait per op type and thread: exact split vs sampled estimate (" + key.at("threads") +
                                     " threads)", [&](Gnuplot& gp) {
            Plotter::caption(gp, caption);
            gp << "set bmargin 8\nset ylabel 'barrier wait (% of the thread''s time in the op)'\nset yrange [0:119]\n"
                  "set xrange [-0.6:" << i - 0.4 << "]\nset xtics rotate by -40 font ',8'\nset key above horizontal\n"
                  "set style fill solid 0.8\nset boxwidth 0.38\n"
                  "plot '-' using 1:2:xtic(3) with boxes lc rgb '#2874a6' title '--wait exact (barrier entry and exit)', "
                  "'-' using 1:2 with boxes lc rgb '#f5b041' title '--wait sampled (samples in barrier code), 95 % interval', "
                  "'-' using 1:2:3:4 with yerrorbars pt 0 lc rgb 'black' notitle, "
                  "'-' using 1:(($4) + 3):5 with labels font ',6' rotate by 90 left notitle\n";
            gp.send1d(exact_bars);
            gp.send1d(sampled_bars);
            gp.send1d(sampled_bars);
            gp.send1d(sampled_bars);
        });
        written.push_back(f.png);
        written.push_back(f.svg);
    }
    return written;
}

}  // namespace profinfer
