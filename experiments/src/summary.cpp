#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/experiment.h"
#include "profinfer/output_file.h"
#include "profinfer/dag.h"
#include "profinfer/gzip_stream.h"
#include "profinfer/plotter.h"
#include "profinfer/timeline.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

bool numeric(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789.-") == std::string::npos;
}

}  // namespace

nlohmann::json point_metrics(const fs::path& path, const std::string& bench_json) {
    store::Database db(path, store::Database::Mode::ReadOnly);
    nlohmann::json m;
    {
        std::vector<double> tpot;
        store::Statement st(db.handle(), "SELECT dur_ns FROM calls WHERE phase = 'decode'");
        while (st.step()) tpot.push_back(st.column_int(0) / 1e6);
        const double med = median(tpot);
        m["decode_calls"] = tpot.size();
        m["decode_tps"] = number_or_null(1000.0 / med);  // from the median time per decode call
    }
    {
        store::Statement st(db.handle(), "SELECT sum(n_tokens), sum(dur_ns) FROM calls WHERE phase = 'prefill'");
        st.step();
        m["prefill_tps"] = st.column_is_null(0) ? nlohmann::json(nullptr)
                                                 : nlohmann::json(st.column_double(0) * 1e9 / st.column_double(1));
    }
    {
        // Operator time of the decode calls (view node_times), and its MatMul and attention shares.
        store::Statement st(db.handle(),
                            "SELECT sum(dur_ns), sum(CASE WHEN op IN ('MUL_MAT', 'MUL_MAT_ID') THEN dur_ns ELSE 0 END), "
                            "sum(CASE WHEN attention THEN dur_ns ELSE 0 END), count(DISTINCT call) FROM node_times "
                            "WHERE phase = 'decode'");
        st.step();
        const double op = st.column_double(0);
        const int64_t calls = st.column_int(3);
        m["op_ms_per_token"] = calls ? nlohmann::json(op / 1e6 / double(calls)) : nlohmann::json(nullptr);
        m["mul_mat_share_pct"] = op > 0 ? nlohmann::json(100.0 * st.column_double(1) / op) : nlohmann::json(nullptr);
        m["attention_share_pct"] = op > 0 ? nlohmann::json(100.0 * st.column_double(2) / op) : nlohmann::json(nullptr);
    }
    {
        store::Statement st(db.handle(),
                            "SELECT sum(wait_ns), sum(compute_ns + wait_ns), max(barriers), sum(wait_samples), "
                            "sum(samples) FROM thread_parts WHERE phase = 'decode'");
        st.step();
        // Wait is only measured at --level full: exactly where barriers were traced, else
        // as the share of CPU-clock samples in barrier code (--wait sampled).
        m["wait_share_pct"] = st.column_int(2) > 0 && st.column_double(1) > 0
                                  ? nlohmann::json(100.0 * st.column_double(0) / st.column_double(1))
                              : st.column_int(4) > 0 ? nlohmann::json(100.0 * st.column_double(3) / st.column_double(4))
                                                     : nlohmann::json(nullptr);
    }
    {
        // Times a target thread lost its CPU while runnable (preempted), per decode call:
        // the scheduler events of --level full; null without them.
        const int64_t switches = db.scalar("SELECT count(*) FROM sched_switch");
        const std::string pid = db.meta()["pid"];
        const int64_t decode = m["decode_calls"].get<int64_t>();
        m["preempted_per_token"] =
            switches > 0 && decode > 0 && !pid.empty()
                ? nlohmann::json(double(db.scalar("SELECT count(*) FROM sched_switch WHERE prev_state = 0 AND prev_tgid = " +
                                                  std::to_string(store::meta_integer(db, db.meta(), "pid")))) /
                                 double(decode))
                : nlohmann::json(nullptr);
    }
    {
        // Paper Fig. 7: the share of decode call time that belongs to a non-CPU backend
        // (Vulkan here): its graphs (recording and submitting: ggml-vulkan computes
        // asynchronously) and the backend synchronizes that wait for the device. Null when
        // every graph ran on the CPU.
        store::Statement st(db.handle(),
                            "SELECT (SELECT coalesce(sum(g.end_ns - g.start_ns), 0) FROM call_graphs g WHERE g.phase = "
                            "'decode' AND g.api = 'backend' AND g.backend IS NOT NULL AND g.backend != 'CPU') + "
                            "(SELECT coalesce(sum(e.end_ns - e.start_ns), 0) FROM gpu_events e JOIN calls c ON e.start_ns "
                            ">= c.start_ns AND e.end_ns <= c.end_ns AND c.phase = 'decode' WHERE e.kind = 'synchronize'), "
                            "(SELECT sum(dur_ns) FROM calls WHERE phase = 'decode')");
        st.step();
        const double gpu = st.column_double(0), total = st.column_double(1);
        m["gpu_graph_share_pct"] = gpu > 0 && total > 0 ? nlohmann::json(100.0 * gpu / total) : nlohmann::json(nullptr);
    }
    // llama-bench's own measurement of the same run: a JSON array, one object per test.
    m["bench_pp_tps"] = nullptr;
    m["bench_tg_tps"] = nullptr;
    try {
        const auto b = nlohmann::json::parse(bench_json.empty() ? "[]" : bench_json);
        for (const auto& t : b) {
            if (t.value("n_gen", 0) > 0) m["bench_tg_tps"] = t.value("avg_ts", 0.0);
            else if (t.value("n_prompt", 0) > 0) m["bench_pp_tps"] = t.value("avg_ts", 0.0);
        }
    } catch (const nlohmann::json::exception&) {
    }
    return m;
}

std::vector<fs::path> summarise_experiment(const ExperimentSpec& spec, const fs::path& out_dir, bool quick) {
    // The sweep's points by id; a row takes its parameters from here, so that a point
    // recorded before a parameter existed has that parameter's default too.
    std::map<std::string, std::map<std::string, std::string>> sweep;
    for (const auto& p : spec.points(quick)) sweep[p.id()] = p.params;
    struct Row {
        std::map<std::string, std::string> params;
        nlohmann::json metrics;
        std::string id;
        fs::path db;
    };
    std::vector<Row> rows;
    {
        sqlite3* h = nullptr;
        const fs::path index = out_dir / "index.db";
        if (!fs::exists(index)) throw Error("no experiment index at " + index.string() + ": run the experiment first");
        if (sqlite3_open_v2(index.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
            sqlite3_close(h);
            throw Error("cannot open " + index.string());
        }
        try {
            store::Statement st(h, "SELECT params, db, bench, id FROM points WHERE status = 'done' ORDER BY rowid");  // params: as recorded
            while (st.step())
                if (auto it = sweep.find(st.column_text(3)); it != sweep.end())
                    rows.push_back({it->second, point_metrics(st.column_text(1), st.column_text(2)), st.column_text(3),
                                    st.column_text(1)});
        } catch (...) {
            sqlite3_close(h);
            throw;
        }
        sqlite3_close(h);
    }
    if (rows.empty()) throw Error(spec.name + ": no point is done yet");
    // Columns: the parameters that vary, then every metric.
    std::vector<std::string> varying;
    for (const auto& [name, value] : rows.front().params) {
        std::set<std::string> values;
        for (const auto& r : rows) values.insert(r.params.at(name));
        if (values.size() > 1 || name == spec.x || name == spec.series) varying.push_back(name);
    }
    Table t;
    t.columns = varying;
    const std::vector<std::string> metric_names = {"decode_tps",        "prefill_tps",         "bench_tg_tps",
                                                   "bench_pp_tps",      "op_ms_per_token",     "mul_mat_share_pct",
                                                   "attention_share_pct", "wait_share_pct", "preempted_per_token",
                                                   "gpu_graph_share_pct"};
    for (const auto& m : metric_names) t.columns.push_back(m);
    for (const auto& r : rows) {
        std::vector<nlohmann::json> cells;
        for (const auto& v : varying) {
            const std::string& text = r.params.at(v);
            if (!numeric(text))
                cells.push_back(text);
            else if (text.find('.') == std::string::npos)
                cells.push_back(int64_t(std::stoll(text)));  // threads, ctx, ...: printed as integers
            else
                cells.push_back(std::stod(text));
        }
        for (const auto& m : metric_names) cells.push_back(r.metrics.value(m, nlohmann::json(nullptr)));
        t.rows.push_back(cells);
    }
    std::vector<fs::path> written;
    // Per-point outputs, named by the point's id (the index maps ids to parameters).
    for (const auto& r : rows) {
        const fs::path base = out_dir / "points" / r.id;
        if (!spec.dag.empty()) {
            TraceGraphs trace(r.db);
            Dag dag = Dag::build(trace, trace.default_call());
            int max_layer = -1;
            for (const auto& n : dag.nodes) max_layer = std::max(max_layer, n.layer);
            if (!dag.nodes.empty() && max_layer >= 0) {
                dag = dag.filtered(max_layer / 2, spec.dag == "layer" ? "" : spec.dag);
                dag.write(base.string() + "-dag-" + spec.dag + ".svg", Dag::Colour::Time);
                written.push_back(base.string() + "-dag-" + spec.dag + ".svg");
            }
        }
        for (const auto& by : spec.stats) {
            const fs::path f = base.string() + "-stat-" + by + ".csv";
            OutputFile::write(f, stats_table(r.db, by).to_csv());
            written.push_back(f);
        }
        if (spec.timeline) {
            const fs::path f = base.string() + "-trace.json.gz";
            OutputFile file(f);
            GzipStream gz(file.stream());
            write_timeline(r.db, gz);
            gz.finish();
            file.commit();
            written.push_back(f);
        }
    }
    if (spec.matmuls) {
        std::vector<StudyPoint> pts;
        for (const auto& r : rows) pts.push_back({r.params, r.db});
        for (auto& f : summarise_matmuls(spec, pts, out_dir)) written.push_back(f);
    }
    OutputFile::write(out_dir / "table.csv", t.to_csv());
    written.push_back(out_dir / "table.csv");
    {
        // Every parameter of every point beside its metrics: what a later step (profinfer
        // fit) reads, whatever the table shows.
        Table all;
        all.columns = {"id"};
        for (const auto& [name, value] : rows.front().params) all.columns.push_back(name);
        for (const auto& m : metric_names) all.columns.push_back(m);
        for (const auto& r : rows) {
            std::vector<nlohmann::json> cells{r.id};
            for (const auto& [name, value] : r.params) cells.push_back(value);
            for (const auto& m : metric_names) cells.push_back(r.metrics.value(m, nlohmann::json(nullptr)));
            all.rows.push_back(std::move(cells));
        }
        OutputFile::write(out_dir / "points.csv", all.to_csv());
        written.push_back(out_dir / "points.csv");
    }
    {
        std::ostringstream md;
        md << "# " << spec.title << "\n\n";
        if (!spec.paper.empty()) md << "Reproduces: " << spec.paper << ". ";
        md << "Tracer level: `" << spec.level << "`. Sweep: " << (quick ? "quick" : "full") << ", " << rows.size() << " of "
           << sweep.size() << " points recorded.\n\n";
        for (const auto& n : spec.notes) md << "- " << n << "\n";
        md << "- Points: `index.db` (parameters, command, timings); per point `points/<id>.db` and its outputs.\n";
        md << "\n| " ;
        for (const auto& c : t.columns) md << c << " | ";
        md << "\n|";
        for (size_t i = 0; i < t.columns.size(); ++i) md << "---|";
        md << "\n";
        for (const auto& r : t.to_json()) {
            md << "| ";
            for (const auto& c : t.columns) {
                const auto& v = r[c];
                if (v.is_number_float()) {
                    char b[32];
                    std::snprintf(b, sizeof b, "%.3g", v.get<double>());
                    md << b;
                } else {
                    md << (v.is_null() ? "–" : v.is_string() ? v.get<std::string>() : v.dump());
                }
                md << " | ";
            }
            md << "\n";
        }
        OutputFile::write(out_dir / "table.md", md.str());
        written.push_back(out_dir / "table.md");
    }
    // A figure per metric: x against the metric, a line per series value.
    Plotter plot(out_dir);
    std::vector<std::string> xs;
    for (const auto& r : rows)
        if (std::find(xs.begin(), xs.end(), r.params.at(spec.x)) == xs.end()) xs.push_back(r.params.at(spec.x));
    const bool x_numeric = std::all_of(xs.begin(), xs.end(), numeric);
    if (x_numeric) std::sort(xs.begin(), xs.end(), [](const auto& a, const auto& b) { return std::stod(a) < std::stod(b); });
    for (const auto& metric : spec.metrics) {
        std::map<std::string, std::vector<std::tuple<double, double, std::string>>> series;
        for (const auto& r : rows) {
            const auto v = r.metrics.value(metric, nlohmann::json(nullptr));
            if (!v.is_number()) continue;
            const std::string& x = r.params.at(spec.x);
            const double pos = x_numeric ? std::stod(x) : double(std::find(xs.begin(), xs.end(), x) - xs.begin());
            series[spec.series.empty() ? metric : spec.series + "=" + r.params.at(spec.series)].emplace_back(
                pos, v.get<double>(), gnuplot_label(x));
        }
        if (series.empty()) continue;
        auto f = plot.draw(spec.name + "-" + metric, spec.title + ": " + metric, [&](Gnuplot& gp) {
            gp << "set xlabel " << gnuplot_quote(spec.x) << "\nset ylabel " << gnuplot_quote(metric) << "\nset yrange [0:*]\n";
            if (!x_numeric) gp << "set xrange [-0.5:" << xs.size() - 0.5 << "]\n";
            std::string cmd = "plot ";
            int i = 0;
            for (auto& [name, pts] : series) {
                std::sort(pts.begin(), pts.end());
                cmd += std::string(i++ ? ", " : "") + "'-' using 1:2" + (x_numeric ? "" : ":xtic(3)") +
                       " with linespoints lw 2 pt 7 title " + gnuplot_quote(name);
            }
            gp << cmd << "\n";
            for (const auto& [name, pts] : series) gp.send1d(pts);
        });
        written.push_back(f.png);
        written.push_back(f.svg);
    }
    return written;
}

}  // namespace profinfer
