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
#include "profinfer/stats.h"
#include "profinfer/trace_graph.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

double num(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : 0.0; }

}  // namespace

Figure draw_timeline(const fs::path& db, const fs::path& dir, const std::string& id, int call, const std::string& caption) {
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
            const Class k = n.attention ? Attention : n.op == "MUL_MAT" || n.op == "MUL_MAT_ID" ? WeightMatMul : Other;
            const double a = (t.start_ns - c.start_ns) / 1e6, b = (t.compute_end_ns - c.start_ns) / 1e6,
                         e = (t.end_ns - c.start_ns) / 1e6;
            if (b > a) bars[k].emplace_back((a + b) / 2, t.ith, (b - a) / 2, 0.35);
            if (e > b) bars[Wait].emplace_back((b + e) / 2, t.ith, (e - b) / 2, 0.2);
        }
    if (threads == 0) throw Error("llama_decode call " + std::to_string(call) + " has no operator records (record with --level op or full)");
    Plotter p(dir);
    return p.draw(id, "One decode step (llama_decode call " + std::to_string(call) + ", " + std::to_string(nodes.size()) +
                          " operators) per thread", [&](Gnuplot& gp) {
        gp << "set xlabel 'time since the call began (ms)'\nset ylabel 'thread (ith)'\nset ytics 1\nset yrange [-0.6:"
           << threads - 0.4 << "]\nset xrange [0:" << (c.end_ns - c.start_ns) / 1e6 << "]\nset key above horizontal\nunset grid\n";
        Plotter::caption(gp, caption);
        std::string cmd = "plot ";
        bool first = true;
        for (int k : {Wait, Other, WeightMatMul, Attention}) {
            if (bars[k].empty()) continue;
            cmd += std::string(first ? "" : ", ") + "'-' using 1:2:3:4 with boxxyerror fs solid 1.0 noborder lc rgb '" +
                   kColours[k] + "' title " + gnuplot_quote(kNames[k]);
            first = false;
        }
        gp << cmd << "\n";
        for (int k : {Wait, Other, WeightMatMul, Attention})
            if (!bars[k].empty()) gp.send1d(bars[k]);
    });
}

const std::vector<std::string> kFigureKinds = {"timeline", "op_types", "tokens", "threads", "roofline", "experts"};

void check_figure_kinds(const std::vector<std::string>& kinds) {
    for (const auto& k : kinds)
        if (std::find(kFigureKinds.begin(), kFigureKinds.end(), k) == kFigureKinds.end()) {
            std::string all;
            for (const auto& x : kFigureKinds) all += (all.empty() ? "" : ", ") + x;
            throw Error("no figure kind '" + k + "' (kinds: " + all + ")");
        }
}

std::vector<Figure> draw_figures(const fs::path& db, const fs::path& dir, const MachineBench* machine,
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

    // Per call: duration, MatMul and attention parts (paper Fig. 9).
    auto by_call = wanted("tokens") ? stats_table(db, "token").to_json() : nlohmann::json::array();
    std::vector<std::tuple<int, double, double, double>> calls;
    for (const auto& r : by_call)
        if (r["phase"] == "decode") calls.emplace_back(r["call"].get<int>(), num(r["ms"]), num(r["mul_mat_ms"]), num(r["attention_ms"]));
    if (!calls.empty()) {
        draw("tokens", "Decode calls: time per call, MatMul and attention parts", [&](Gnuplot& gp) {
            gp << "set xlabel 'llama_decode call (decode step)'\nset ylabel 'time per call (ms)'\nset yrange [0:*]\n"
                  "plot '-' using 1:2 with lines lw 2 title 'TPOT', '-' using 1:3 with lines title 'MUL_MAT', "
                  "'-' using 1:4 with lines title 'attention (KQ + KQV or flash)'\n";
            gp.send1d(calls);
            gp.send1d(calls);
            gp.send1d(calls);
        });
    }

    // Compute vs wait per op type and thread (paper Fig. 6).
    auto by_thread = wanted("threads") ? stats_table(db, "thread").to_json() : nlohmann::json::array();
    if (!by_thread.empty()) {
        std::vector<std::tuple<int, double, double, std::string>> rows;
        for (size_t i = 0; i < by_thread.size(); ++i)
            rows.emplace_back(int(i), num(by_thread[i]["compute_ms"]), num(by_thread[i]["wait_ms"]),
                              gnuplot_label(by_thread[i]["op"].get<std::string>() + "_t" + std::to_string(by_thread[i]["ith"].get<int>())));
        draw("threads", "Compute and wait per thread by op type", [&](Gnuplot& gp) {
            gp << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8\n"
                  "set boxwidth 0.7\nset ylabel 'time over the run (ms)'\nset xtics rotate by -60 font ',7'\n"
                  "plot '-' using 2:xtic(4) title 'compute' lc rgb '#2874a6', '-' using 3 title 'wait' lc rgb '#f5b041'\n";
            gp.send1d(rows);
            gp.send1d(rows);
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

    // Expert activations: calls that used each expert, per layer (paper Fig. 13).
    auto experts = wanted("experts") ? stats_table(db, "expert").to_json() : nlohmann::json::array();
    if (!experts.empty()) {
        std::vector<std::tuple<int, int, double>> cells;
        for (const auto& r : experts)
            if (r["node"] == "ffn_moe_up") cells.emplace_back(r["expert"].get<int>(), r["layer"].get<int>(), num(r["activations"]));
        if (!cells.empty())
            draw("experts", "Expert activations per layer (ffn_moe_up)", [&](Gnuplot& gp) {
                gp << "set xlabel 'expert'\nset ylabel 'layer'\nset cblabel 'calls'\nset palette defined (0 'white', 1 '#c0392b')\n"
                      "plot '-' using 1:2:3:4:5 with boxxyerror fs solid lc palette notitle\n";
                std::vector<std::tuple<int, int, double, double, double>> boxes;
                for (auto [e, l, v] : cells) boxes.emplace_back(e, l, 0.5, 0.5, v);
                gp.send1d(boxes);
            });
    }
    for (const auto& f : figs)
        if (!fs::exists(f.png) || !fs::exists(f.svg)) throw Error("gnuplot did not write " + f.png.string());
    return figs;
}

}  // namespace profinfer
