#pragma once
// Figures drawn with gnuplot through gnuplot-iostream, PNG and SVG side by side: the one
// drawing helper of the recording figures and the experiment figures.
#include <filesystem>
#include <gnuplot-iostream.h>
#include <string>
#include <vector>

#include "profinfer/error.h"
#include "profinfer/figures.h"
#include "profinfer/subprocess.h"
#include "profinfer/text_escape.h"

namespace profinfer {

// Renders SCRIPT (gnuplot commands after the terminal/output lines) with DATA blocks
// as PNG and SVG.
class Plotter {
public:
    explicit Plotter(std::filesystem::path dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }

    // SIZE: the canvas in pixels (taller for a figure of several panels).
    template <class Body>
    Figure draw(const std::string& id, const std::string& title, Body body, std::pair<int, int> size = {900, 500}) {
        Figure f{id, title, dir_ / (id + ".png"), dir_ / (id + ".svg")};
        const std::string wh = std::to_string(size.first) + "," + std::to_string(size.second);
        for (auto [term, out] : {std::pair{"pngcairo size " + wh + " font 'DejaVu Sans,10'", f.png},
                                 std::pair{"svg size " + wh + " dynamic font 'DejaVu Sans,10'", f.svg}}) {
            PipedProcess gnuplot({"gnuplot"});
            {
                Gnuplot gp(gnuplot.release_input());  // closing it ends gnuplot's script
                gp << "set terminal " << term << "\n";
                gp << "set output " << gnuplot_quote(out.string()) << "\n";
                gp << "set termoption noenhanced\nset title " << gnuplot_quote(title) << "\nset grid\nset key outside right top\n";
                body(gp);
                gp << "unset output\n";
            }
            if (int st = gnuplot.wait(); st != 0)
                throw Error("gnuplot failed to draw " + out.string() + " (exit status " + std::to_string(st) + ")");
        }
        return f;
    }

    // The caption under a figure (machine, model, level, n): bottom margin and the labels,
    // broken at its "; " into lines that fit the figure (a long machine name cut it off).
    static void caption(Gnuplot& gp, const std::string& text, size_t width = 140) {
        if (text.empty()) return;
        const auto lines = caption_lines(text, width);
        gp << "set bmargin " << 5 + lines.size() << "\n";
        caption_labels(gp, lines, 0.03, 0.035);
    }

    // The caption's lines: broken at its "; " so that none is longer than width characters
    // (unless one part alone is).
    static std::vector<std::string> caption_lines(const std::string& text, size_t width = 140) {
        std::vector<std::string> lines{""};
        for (size_t at = 0; at < text.size();) {
            size_t end = text.find("; ", at);
            const std::string part = text.substr(at, end == std::string::npos ? std::string::npos : end + 2 - at);
            if (!lines.back().empty() && lines.back().size() + part.size() > width) lines.emplace_back();
            lines.back() += part;
            at = end == std::string::npos ? text.size() : end + 2;
        }
        return lines;
    }

    // The lines as labels 99, 98, … at screen coordinates, the last at `bottom`, each `step`
    // above the next (fractions of the figure's height).
    static void caption_labels(Gnuplot& gp, const std::vector<std::string>& lines, double bottom, double step) {
        for (size_t i = 0; i < lines.size(); ++i)
            gp << "set label " << 99 - i << " " << gnuplot_quote(lines[i]) << " at screen 0.02, screen "
               << bottom + step * double(lines.size() - 1 - i) << " left font ',8'\n";
    }

private:
    std::filesystem::path dir_;
};


}  // namespace profinfer
