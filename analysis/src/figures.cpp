#include "profinfer/figures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <fstream>
#include <tuple>

#include "profinfer/error.h"
#include "profinfer/plotter.h"
#include "profinfer/subprocess.h"
#include "profinfer/text_escape.h"
#include "profinfer/roofline.h"
#include "profinfer/statistics.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "profinfer/trace_graph.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

double num(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : 0.0; }

// Paper Fig. 13: which experts each layer used, step after step (a heat map of layer 0 and
// one of every layer's totals), and the MoE operator's time against its experts' mean
// reuse distance and against the major faults it took, per decode call — the calls in
// which some expert ran for the first time (cold) drawn apart from the steady state.
// Paper Fig. 8: each decode call's latency over the run, the moments an inference thread
// lost its CPU while runnable (preempted), and the window in which the runner's hog
// (profinfer-hog) ran, as the runner noted it in the trace.
template <class Draw>
void draw_latency_figure(store::Database& db, Draw& draw) {
    const auto meta = db.meta();
    if (!meta.has(store::MetaKey::Pid)) return;
    std::vector<std::pair<double, double>> tokens;  // (s since the first decode call, ms)
    store::Statement t(db.handle(), "SELECT start_ns, dur_ns FROM calls WHERE phase = 'decode' ORDER BY start_ns");
    int64_t t0 = -1;
    while (t.step()) {
        if (t0 < 0) t0 = t.column_int(0);
        tokens.emplace_back((t.column_int(0) - t0) / 1e9, t.column_int(1) / 1e6);
    }
    if (tokens.size() < 2) return;
    std::vector<double> preempted;
    store::Statement p(db.handle(), ("SELECT ts_ns FROM preemptions WHERE ts_ns >= " + std::to_string(t0) + " ORDER BY ts_ns").c_str());
    while (p.step()) preempted.push_back((p.column_int(0) - t0) / 1e9);
    const auto w = store::hog_window(meta);
    const bool hog = w.has_value();
    const double a = hog ? (w->start_ns - t0) / 1e9 : 0, b = hog ? (w->stop_ns - t0) / 1e9 : 0;
    double top = 0;
    for (const auto& [x, ms] : tokens) top = std::max(top, ms);
    // Preemptions per decode call: those between its start and the next call's.
    std::vector<std::pair<double, double>> per_call;
    size_t k = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const double end = i + 1 < tokens.size() ? tokens[i + 1].first : INFINITY;
        int n = 0;
        while (k < preempted.size() && preempted[k] < end) n += preempted[k++] >= tokens[i].first;
        per_call.emplace_back(tokens[i].first, n);
    }
    draw("latency", "Per-token latency and preemptions of the inference threads (" + std::to_string(tokens.size()) +
                        " decode calls)", [&](Gnuplot& gp) {
        gp << "set xlabel 'time since the first decode call (s)'\nset ylabel 'decode call latency (ms)'\nset key above horizontal\n"
           << "set yrange [0:" << top * 1.25 << "]\nset y2label 'preemptions of inference threads in the call'\n"
              "set y2range [0:*]\nset y2tics\nset ytics nomirror\n";
        if (hog)
            gp << "set object 1 rect from " << a << ", graph 0 to " << b
               << ", graph 1 behind fc rgb '#f9e79f' fs solid 0.5 noborder\n"
                  "set label 1 'hog (profinfer-hog, nice -10) runs' at " << (a + b) / 2 << ", graph 0.95 center\n";
        gp << "plot '-' using 1:2 axes x1y2 with impulses lw 1 lc rgb '#c0392b' title 'preemptions in the call (right axis)', "
              "'-' using 1:2 with linespoints pt 7 ps 0.4 lc rgb '#2874a6' title 'decode call latency'\n";
        gp.send1d(per_call);
        gp.send1d(tokens);
    });
}

// Paper Fig. 9: each decode step's time stacked by kind — weight MatMuls, attention (KQ,
// softmax, KQV or flash attention: the nodes that grow with the context), every other
// operator, and the call's time outside operators — over the run's decode calls.
template <class Draw>
void draw_steps_figure(store::Database& db, Draw& draw) {
    // node_times summed per call first, then joined to the calls: joined the other way round
    // the view's window ran once per call (24.5 s of a 1024-token trace's report, now 2.0 s).
    store::Statement st(db.handle(),
                        "WITH t AS (SELECT call, sum(CASE WHEN matmul AND NOT attention THEN dur_ns ELSE 0 END) AS mm, "
                        "sum(CASE WHEN attention THEN dur_ns ELSE 0 END) AS att, sum(dur_ns) AS op FROM node_times "
                        "WHERE phase = 'decode' GROUP BY call) "
                        "SELECT c.call, c.dur_ns, coalesce(t.mm, 0), coalesce(t.att, 0), coalesce(t.op, 0) "
                        "FROM calls c LEFT JOIN t ON t.call = c.call WHERE c.phase = 'decode' ORDER BY c.call");
    struct Step {
        double mm, att, other, outside;
    };
    std::vector<Step> steps;
    while (st.step()) {
        const double call = st.column_int(1) / 1e6, mm = st.column_double(2) / 1e6, att = st.column_double(3) / 1e6,
                     op = st.column_double(4) / 1e6;
        steps.push_back({mm, att, op - mm - att, std::max(0.0, call - op)});
    }
    if (steps.size() < 2) return;
    // Bins of consecutive steps (about 64 bins), each kind's median in the bin: a step the
    // scheduler delayed does not hide the trend. Then the stack's cumulative tops.
    const size_t bin = std::max<size_t>(1, steps.size() / 64);
    std::vector<std::tuple<double, double, double, double, double>> rows;  // mid step, tops
    for (size_t i = 0; i + bin <= steps.size(); i += bin) {
        std::vector<double> k[4];
        for (size_t j = i; j < i + bin; ++j)
            k[0].push_back(steps[j].mm), k[1].push_back(steps[j].att), k[2].push_back(steps[j].other), k[3].push_back(steps[j].outside);
        double top[4], sum = 0;
        for (int c = 0; c < 4; ++c) {
            sum += median_of(k[c]);
            top[c] = sum;
        }
        rows.emplace_back(double(i) + bin / 2.0 + 1, top[0], top[1], top[2], top[3]);
    }
    if (std::get<3>(rows.back()) <= 0) return;
    const std::string per = bin == 1 ? "" : ", median of each kind per " + std::to_string(bin) + " steps";
    draw("tokens", "Each decode step's time by kind of operator (" + std::to_string(steps.size()) + " steps" + per + ")",
         [&](Gnuplot& gp) {
        gp << "set xlabel 'decode step'\nset ylabel 'time per decode step (ms)'\nset yrange [0:*]\nset key above horizontal\n"
           << "set xrange [1:" << steps.size() << "]\n"
              "plot '-' using 1:4:5 with filledcurves fs solid 0.6 lc rgb '#d5d8dc' title 'outside operators', "
              "'-' using 1:3:4 with filledcurves fs solid 0.8 lc rgb '#7dcea0' title 'other operators', "
              "'-' using 1:2:3 with filledcurves fs solid 0.8 lc rgb '#c0392b' title 'attention (KQ, softmax, KQV or flash)', "
              "'-' using 1:(0):2 with filledcurves fs solid 0.8 lc rgb '#2874a6' title 'weight MatMuls'\n";
        for (int k = 0; k < 4; ++k) gp.send1d(rows);
    });
}

template <class Draw>
void draw_expert_figures(store::Database& db, Draw& draw) {
    const auto steps = stats_table(db, "expert-step").to_json();
    if (steps.empty()) return;
    std::map<std::pair<int, int>, double> per_layer;  // (expert, layer) → decode steps that used it
    std::vector<std::pair<int, int>> layer0;          // (step, expert)
    int n_steps = 0;
    for (const auto& r : steps) {
        const int step = r["step"].get<int>(), layer = r["layer"].get<int>(), e = r["expert"].get<int>();
        per_layer[{e, layer}] += 1;
        if (layer == 0) layer0.emplace_back(step, e);
        n_steps = std::max(n_steps, step);
    }
    draw("experts", "Decode steps that used each expert, per layer (" + std::to_string(n_steps) + " steps)", [&](Gnuplot& gp) {
        gp << "set xlabel 'expert'\nset ylabel 'layer'\nset cblabel 'decode steps'\nunset grid\n"
              "set palette defined (0 'white', 1 '#c0392b')\nset cbrange [0:*]\n"
              "plot '-' using 1:2:3:4:5 with boxxyerror fs solid noborder lc palette notitle\n";
        std::vector<std::tuple<int, int, double, double, double>> boxes;
        for (const auto& [el, v] : per_layer) boxes.emplace_back(el.first, el.second, 0.5, 0.5, v);
        gp.send1d(boxes);
    });
    draw("experts-steps", "Layer 0: the experts each decode step used", [&](Gnuplot& gp) {
        gp << "set xlabel 'decode step'\nset ylabel 'expert (layer 0)'\nunset grid\nunset key\n"
              "plot '-' using 1:2:(0.5):(0.45) with boxxyerror fs solid noborder lc rgb '#2874a6'\n";
        gp.send1d(layer0);
    });
    const auto calls = stats_table(db, "expert-call").to_json();
    std::vector<std::tuple<double, double>> warm_reuse, cold_reuse, warm_faults, cold_faults;
    for (const auto& r : calls) {
        if (r["phase"] != "decode" || r["node"] != "ffn_moe_up") continue;
        const bool cold = num(r["first_uses"]) > 0;
        const double ms = num(r["time_us"]) / 1e3;
        if (r["mean_reuse_distance"].is_number()) (cold ? cold_reuse : warm_reuse).emplace_back(num(r["mean_reuse_distance"]), ms);
        if (r["major_faults"].is_number()) (cold ? cold_faults : warm_faults).emplace_back(num(r["major_faults"]), ms);
    }
    auto scatter = [&](const std::string& id, const std::string& title, const std::string& xlabel, const auto& warm,
                       const auto& cold) {
        if (warm.empty() && cold.empty()) return;
        draw(id, title, [&](Gnuplot& gp) {
            gp << "set xlabel " << gnuplot_quote(xlabel) << "\nset ylabel 'ffn_moe_up time per call (ms)'\nset logscale y\n";
            std::string plot = "plot ";
            if (!warm.empty())
                plot += "'-' using 1:2 with points pt 7 ps 0.5 lc rgb '#2874a6' title " +
                        gnuplot_quote("steady state (every expert used before)");
            if (!cold.empty())
                plot += std::string(warm.empty() ? "" : ", ") + "'-' using 1:2 with points pt 6 ps 0.8 lc rgb '#c0392b' title " +
                        gnuplot_quote("cold (an expert's first use)");
            gp << plot << "\n";
            if (!warm.empty()) gp.send1d(warm);
            if (!cold.empty()) gp.send1d(cold);
        });
    };
    scatter("experts-reuse", "ffn_moe_up time vs its experts' mean reuse distance (every layer, decode)",
            "mean reuse distance of the call's experts (llama_decode calls)", warm_reuse, cold_reuse);
    scatter("experts-faults", "ffn_moe_up time vs its major page faults (every layer, decode)",
            "major faults in the call's ffn_moe_up (all threads)", warm_faults, cold_faults);
}

}  // namespace

Figure draw_timeline(store::Database& db, const fs::path& dir, const std::string& id, int call, const std::string& caption) {
    TraceGraphs trace(db);
    if (call < 0) call = trace.default_call();
    const auto nodes = trace.nodes(call);
    const DecodeCall& c = trace.calls().at(size_t(call));
    // Bars per class: x centre, thread row, half width, half height (boxxyerror), in ms from the call's start.
    enum Class { WeightMatMul, Attention, Other, Wait };
    const char* kNames[] = {"weight MatMul", "attention (KQ, KQV, flash)", "other operators", "barrier wait"};
    const char* kColours[] = {"#2874a6", "#c0392b", "#7dcea0", "#d5d8dc"};
    std::vector<std::tuple<double, double, double, double>> bars[4];
    int threads = 0;
    for (const auto& n : nodes)
        for (const auto& t : n.threads) {
            threads = std::max(threads, t.ith + 1);
            const Class k = n.attention ? Attention : n.matmul ? WeightMatMul : Other;
            const double a = (t.start_ns - c.start_ns) / 1e6, b = (t.compute_end_ns - c.start_ns) / 1e6,
                         e = (t.end_ns - c.start_ns) / 1e6;
            if (b > a) bars[k].emplace_back((a + b) / 2, t.ith, (b - a) / 2, 0.35);
            if (e > b) bars[Wait].emplace_back((b + e) / 2, t.ith, (e - b) / 2, 0.2);
        }
    // Paper Fig. 7: a GPU-API backend's track above the CPU threads. What the trace holds of
    // it is the host side (gpu_events): each node's dispatch into a command buffer, coloured
    // as the CPU's operators; the submits; and the waits for the device (fence waits and
    // synchronizes), during which the device computes what was submitted.
    std::vector<std::tuple<double, double, double, double>> gpu[4], submits, device_waits;
    {
        store::Statement st(trace.db().handle(),
                            ("SELECT e.kind, e.start_ns, e.end_ns, coalesce(n.matmul, 0), coalesce(n.attention, 0) FROM gpu_events e "
                             "LEFT JOIN node_names n ON n.graph_seq = e.graph_seq AND n.tensor = e.tensor WHERE e.start_ns >= " +
                             std::to_string(c.start_ns) + " AND e.start_ns < " + std::to_string(c.end_ns))
                                .c_str());
        while (st.step()) {
            const std::string kind = st.column_text(0);
            const double a = (st.column_int(1) - c.start_ns) / 1e6, e = (st.column_int(2) - c.start_ns) / 1e6;
            if (e <= a) continue;
            const auto bar = std::make_tuple((a + e) / 2, double(threads), (e - a) / 2, 0.35);
            if (kind == "dispatch")
                gpu[st.column_int(4) ? Attention : st.column_int(3) ? WeightMatMul : Other].push_back(bar);
            else if (kind == "submit")
                submits.push_back(bar);
            else
                device_waits.push_back(std::make_tuple((a + e) / 2, double(threads), (e - a) / 2, 0.2));
        }
    }
    const bool vulkan = !submits.empty() || !device_waits.empty() || !gpu[WeightMatMul].empty() || !gpu[Other].empty();
    if (threads == 0 && !vulkan)
        throw Error("llama_decode call " + std::to_string(call) + " has no operator records (record with --level op or full)");
    Plotter p(dir);
    return p.draw(id, "One decode step (llama_decode call " + std::to_string(call) + ", " + std::to_string(nodes.size()) +
                          " CPU operators" + (trace.inside_hog_window(call) ? ", inside the hog's window" : "") +
                          (vulkan ? ") per CPU thread and the Vulkan backend's host side" : ") per thread"),
                  [&](Gnuplot& gp) {
        gp << "set xlabel 'time since the call began (ms)'\nset ylabel '" << (vulkan ? "track" : "thread (ith)")
           << "'\nset yrange [-0.6:" << threads + (vulkan ? 1 : 0) - 0.4 << "]\nset xrange [0:"
           << (c.end_ns - c.start_ns) / 1e6 << "]\nset key above horizontal\nunset grid\n";
        if (vulkan) {
            gp << "set ytics (";
            for (int t = 0; t < threads; ++t) gp << "'CPU thread " << t << "' " << t << ", ";
            gp << "'Vulkan (host)' " << threads << ")\n";
        } else {
            gp << "set ytics 1\n";
        }
        Plotter::caption(gp, caption);
        std::string cmd = "plot ";
        auto add = [&](const std::string& colour, const std::string& title) {
            cmd += std::string(cmd == "plot " ? "" : ", ") + "'-' using 1:2:3:4 with boxxyerror fs solid 1.0 noborder lc rgb '" +
                   colour + "' title " + gnuplot_quote(title);
        };
        for (int k : {Wait, Other, WeightMatMul, Attention})
            if (!bars[k].empty() || (k != Wait && !gpu[k].empty())) add(kColours[k], kNames[k]);
        if (!submits.empty()) add("#6c3483", "Vulkan submit");
        if (!device_waits.empty()) add("#f5b041", "waiting for the Vulkan device (fence, synchronize)");
        gp << cmd << "\n";
        for (int k : {Wait, Other, WeightMatMul, Attention}) {
            auto all = bars[k];
            if (k != Wait) all.insert(all.end(), gpu[k].begin(), gpu[k].end());
            if (!all.empty()) gp.send1d(all);
        }
        if (!submits.empty()) gp.send1d(submits);
        if (!device_waits.empty()) gp.send1d(device_waits);
    });
}

const std::vector<std::string> kFigureKinds = {"timeline", "op_types", "tokens", "threads", "roofline", "experts", "latency"};

void check_figure_kinds(const std::vector<std::string>& kinds) {
    for (const auto& k : kinds)
        if (std::find(kFigureKinds.begin(), kFigureKinds.end(), k) == kFigureKinds.end()) {
            std::string all;
            for (const auto& x : kFigureKinds) all += (all.empty() ? "" : ", ") + x;
            throw Error("no figure kind '" + k + "' (kinds: " + all + ")");
        }
}

std::vector<Figure> draw_figures(store::Database& db, const fs::path& dir, const MachineBench* machine,
                                 const std::vector<std::string>& kinds, const std::string& prefix, const std::string& caption) {
    check_figure_kinds(kinds);
    auto wanted = [&](const char* k) { return kinds.empty() || std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
    Plotter plotter(dir);
    std::vector<Figure> figs;
    // Every figure with the caption under it, named PREFIX + kind.
    auto draw = [&](const std::string& kind, const std::string& title, auto body) {
        figs.push_back(plotter.draw(prefix + kind, title, [&](Gnuplot& gp) {
            Plotter::caption(gp, caption);
            body(gp);
        }));
    };

    // One decode step as a timeline (paper Fig. 5).
    if (wanted("timeline")) try {
        figs.push_back(draw_timeline(db, dir, prefix + "timeline", -1, caption));
    } catch (const Error&) {
        // no decode call with operator records: the other figures say what there is
    }

    // Time by op type.
    auto by_type = wanted("op_types") ? stats_table(db, "op-type").to_json() : nlohmann::json::array();
    if (!by_type.empty()) {
        std::vector<std::tuple<int, double, std::string>> rows;
        for (size_t i = 0; i < by_type.size(); ++i) rows.emplace_back(int(i), num(by_type[i]["total_ms"]), gnuplot_label(by_type[i]["op"]));
        draw("op_types", "Operator time by op type", [&](Gnuplot& gp) {
            gp << "set style fill solid 0.8\nset boxwidth 0.7\nset ylabel 'total time (ms)'\nset xtics rotate by -40\n"
                  "unset key\nplot '-' using 1:2:xtic(3) with boxes lc rgb '#c0392b'\n";
            gp.send1d(rows);
        });
    }

    // Paper Fig. 9: per decode step, its time stacked by kind of operator.
    if (wanted("tokens")) draw_steps_figure(db, draw);

    // Compute vs wait per op type and thread (paper Fig. 6), as shares of each thread's time
    // in the op type (relative stacks: a small op reads as well as MatMul). Where barriers
    // were traced the wait splits into waiting for the other threads and the barrier's own
    // exit and probes (what a thread alone reads as wait).
    auto by_thread = wanted("threads") ? stats_table(db, "thread").to_json() : nlohmann::json::array();
    if (!by_thread.empty()) {
        const bool split = by_thread[0]["others_wait_ms"].is_number();
        std::vector<std::tuple<int, double, double, double, std::string>> rows;
        for (size_t i = 0; i < by_thread.size(); ++i) {
            const double c = num(by_thread[i]["compute_ms"]), w = num(by_thread[i]["wait_ms"]);
            const double o = split ? std::min(num(by_thread[i]["others_wait_ms"]), w) : w;
            const double all = c + w > 0 ? c + w : 1;
            rows.emplace_back(int(i), 100 * c / all, 100 * o / all, 100 * (w - o) / all,
                              gnuplot_label(by_thread[i]["op"].get<std::string>() + "_t" + std::to_string(by_thread[i]["ith"].get<int>())));
        }
        draw("threads", "Compute and wait per thread by op type (share of the thread's time in the op type)", [&](Gnuplot& gp) {
            gp << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8\n"
                  "set boxwidth 0.7\nset yrange [0:100]\nset ylabel 'share of the thread time (%)'\n"
                  "set xtics rotate by -60 font ',7'\nset key outside top center horizontal\n"
                  "set bmargin 10\n"  // the rotated op_thread labels (FLASH_ATTN_EXT_t1) above the caption
                  "plot '-' using 2:xtic(5) title 'compute' lc rgb '#2874a6', '-' using 3 title "
               << gnuplot_quote(split ? "waiting for the other threads" : "wait") << " lc rgb '#f5b041'"
               << (split ? ", '-' using 4 title 'barrier exit and probes' lc rgb '#aab7b8'" : "") << "\n";
            gp.send1d(rows);
            gp.send1d(rows);
            if (split) gp.send1d(rows);
        });
    }

    // Roofline: the machine's roof and each operator (name, op) at its intensity.
    if (machine && wanted("roofline")) {
        Table rl;
        try {
            rl = roofline_table(db, *machine);  // read by column name below
        } catch (const Error&) {
        }
        if (!rl.rows.empty()) {
            // The roof of each kind of arithmetic the operators use, and the operators of
            // that kind at their intensity.
            const auto& roof = machine->roofs.back();
            std::map<std::string, std::vector<std::tuple<double, double, std::string>>> pts;
            for (const auto& r : rl.to_json())
                if (num(r["flops_per_byte"]) > 0 && num(r["gflops"]) > 0)
                    pts[r["roof_kind"]].emplace_back(num(r["flops_per_byte"]), num(r["gflops"]),
                                                     gnuplot_label(r["name"].get<std::string>()));
            draw("roofline", "Roofline (" + std::to_string(roof.threads) + " threads)", [&](Gnuplot& gp) {
                gp << "set logscale xy\nset xlabel 'FLOPs per byte'\nset ylabel 'GFLOP/s (G ops/s)'\nset xrange [0.01:1000]\n";
                std::string plot = "plot ";
                int i = 0;
                for (const auto& [kind, v] : pts) {
                    const double peak = roof.peak_for(kind);
                    gp << "roof" << i << "(x) = (" << roof.triad_gbs << " * x < " << peak << ") ? " << roof.triad_gbs
                       << " * x : " << peak << "\n";
                    plot += std::string(i ? ", " : "") + "roof" + std::to_string(i) + "(x) with lines lw 2 dt " +
                            std::to_string(i + 1) + " lc " + std::to_string(i + 1) + " title " + gnuplot_quote(kind + " roof") +
                            ", '-' using 1:2 with points pt 7 ps 0.8 lc " + std::to_string(i + 1) + " title " +
                            gnuplot_quote(kind + " operators") + ", '-' using 1:2:3 with labels font ',7' offset 0,0.7 notitle";
                    ++i;
                }
                gp << plot << "\n";
                for (const auto& [kind, v] : pts) {
                    gp.send1d(v);
                    gp.send1d(v);
                }
            });
        }
    }

    // Paper Fig. 8: latency over the run with the scheduler's preemptions.
    if (wanted("latency")) draw_latency_figure(db, draw);

    // Paper Fig. 13, from a MoE run's expert records.
    if (wanted("experts")) draw_expert_figures(db, draw);
    for (const auto& f : figs)
        if (!fs::exists(f.png) || !fs::exists(f.svg)) throw Error("gnuplot did not write " + f.png.string());
    return figs;
}

}  // namespace profinfer
