#pragma once
// The figures of a recording, drawn with gnuplot (PNG and SVG side by side):
// time by op type, TPOT across calls with the KQ/KQV share (paper Fig. 9), compute vs
// wait per thread by op type (Fig. 6), the roofline, and the expert-activation heat map
// (Fig. 13) when the run has expert records.
#include <filesystem>
#include <string>
#include <vector>

#include "profinfer/machine_bench.h"

#include "profinfer/store.h"

namespace profinfer {

struct Figure {
    std::string id, title;
    std::filesystem::path png, svg;
};

// Paper Fig. 5: one llama_decode call of DB (CALL; -1: the middle decode call) as a
// timeline — a row per thread, a bar per operator from its start to the end of its compute on
// that thread, weight MatMuls, attention and other operators in their own colours, the barrier
// wait after each in grey. ID names the files in DIR; CAPTION is printed under the plot.
Figure draw_timeline(store::Database& db, const std::filesystem::path& dir, const std::string& id,
                     int call = -1, const std::string& caption = "");

// The figures of a recording, by kind: timeline (Fig. 5), op_types, tokens (Fig. 9),
// threads (Fig. 6), roofline, experts (Fig. 13).
extern const std::vector<std::string> kFigureKinds;
// Throws, naming the kinds there are, unless every one of KINDS is among them.
void check_figure_kinds(const std::vector<std::string>& kinds);

// Writes the figures of DB into DIR, named PREFIX + kind: every kind DB has data for, or only
// KINDS; MACHINE may be null (no roofline then). CAPTION, when given, is printed under each.
std::vector<Figure> draw_figures(store::Database& db, const std::filesystem::path& dir,
                                 const MachineBench* machine, const std::vector<std::string>& kinds = {},
                                 const std::string& prefix = "", const std::string& caption = "");

}  // namespace profinfer
