#pragma once
// The figures of a recording, drawn with gnuplot (PNG and SVG side by side):
// time by op type, TPOT across calls with the KQ/KQV share (paper Fig. 9), compute vs
// wait per thread by op type (Fig. 6), the roofline, and the expert-activation heat map
// (Fig. 13) when the run has expert records.
#include <filesystem>
#include <string>
#include <vector>

#include "profinfer/machine_bench.h"

namespace profinfer {

struct Figure {
    std::string id, title;
    std::filesystem::path png, svg;
};

// Writes the figures of DB into DIR; MACHINE may be null (no roofline then).
std::vector<Figure> draw_figures(const std::filesystem::path& db, const std::filesystem::path& dir,
                                 const MachineBench* machine);

}  // namespace profinfer
