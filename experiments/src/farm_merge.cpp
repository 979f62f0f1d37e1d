// `profinfer experiment merge FARM`: what `make farm` brought back (FARM/<board>/<study>/,
// one experiment index per board and study) in one database, FARM/farm.db, and per study
// the boards side by side: every metric of table.csv with a column per board
// (FARM/compare/<study>.csv), the decode speed as a Markdown table (.md) and as bars per
// point and board with their 95 % intervals where the rounds give one (.png, .svg).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/results_readme.h"
#include "profinfer/number_text.h"
#include "profinfer/experiment_index.h"
#include "profinfer/output_file.h"
#include "profinfer/plotter.h"
#include "profinfer/table.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

std::string cell_text(const nlohmann::json& v) {
    if (v.is_null()) return "";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    return format_double(v.get<double>());
}

// One study's table.csv per board, compared point by point (a point: its parameters).
std::vector<fs::path> compare_study(const fs::path& farm, const std::string& study, const std::vector<std::string>& boards) {
    std::map<std::string, Table> tables;  // board → its table
    for (const auto& b : boards)
        if (fs::exists(farm / b / study / "table.csv")) tables.emplace(b, Table::read_csv_file(farm / b / study / "table.csv"));
    if (tables.empty()) return {};
    const auto& cols = tables.begin()->second.columns;
    if (std::find(cols.begin(), cols.end(), "decode_tps") == cols.end()) return {};
    // table.csv: the parameters that vary, n, the spread, then each metric's median, _lo, _hi.
    const auto end = std::find(cols.begin(), cols.end(), std::find(cols.begin(), cols.end(), "n") != cols.end() ? "n" : "decode_tps");
    const std::vector<std::string> params(cols.begin(), end);
    std::vector<std::string> metrics;
    for (auto c = end; c != cols.end(); ++c)
        if (!(c->size() > 3 && (c->substr(c->size() - 3) == "_lo" || c->substr(c->size() - 3) == "_hi"))) metrics.push_back(*c);
    using Key = std::vector<std::string>;
    std::vector<Key> keys;
    std::map<std::string, std::map<Key, const std::vector<nlohmann::json>*>> by;
    for (const auto& [b, t] : tables)
        for (const auto& r : t.rows) {
            Key k;
            for (const auto& p : params) k.push_back(cell_text(r[t.column(p)]));
            if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
            by[b][k] = &r;
        }
    auto value = [&](const std::string& b, const Key& k, const std::string& col) -> nlohmann::json {
        const Table& t = tables.at(b);
        auto it = by[b].find(k);
        if (it == by[b].end() || std::find(t.columns.begin(), t.columns.end(), col) == t.columns.end()) return nullptr;
        return (*it->second)[t.column(col)];
    };
    auto number = [&](const std::string& b, const Key& k, const std::string& col) {
        const auto v = value(b, k, col);
        return v.is_number() ? v.get<double>() : NAN;
    };
    const fs::path dir = farm / "compare";
    fs::create_directories(dir);
    Table csv{params, {}};
    for (const auto& m : metrics)
        for (const auto& [b, t] : tables) csv.columns.push_back(m + "[" + b + "]");
    std::ostringstream md;
    md << "# " << study << ": boards side by side (decode_tps, tok/s)\n\n|";
    for (const auto& p : params) md << " " << p << " |";
    for (const auto& [b, t] : tables) md << " " << b << " |";
    md << "\n|" << std::string([&] {
        std::string s;
        for (size_t i = 0; i < params.size() + tables.size(); ++i) s += "---|";
        return s;
    }()) << "\n";
    for (const auto& k : keys) {
        std::vector<nlohmann::json> row(k.begin(), k.end());
        for (const auto& m : metrics)
            for (const auto& [b, t] : tables) row.push_back(value(b, k, m));
        csv.rows.push_back(row);
        md << "|";
        for (const auto& p : k) md << " " << p << " |";
        for (const auto& [b, t] : tables)
            md << " " << format_with_interval(number(b, k, "decode_tps"), number(b, k, "decode_tps_lo"), number(b, k, "decode_tps_hi"))
               << " |";
        md << "\n";
    }
    OutputFile::write(dir / (study + ".csv"), csv.to_csv());
    OutputFile::write(dir / (study + ".md"), md.str());
    // Decode speed per point, a bar per board; its 95 % interval as the error bar where the
    // rounds give one (a bar without one has none drawn).
    Plotter plot(dir);
    const auto f = plot.draw(study + "-decode_tps", study + ": boards side by side", [&](Gnuplot& gp) {
        gp << "set style data histograms\nset style histogram errorbars gap 1 lw 1\nset style fill solid 0.8 border -1\n"
              "set ylabel 'decode speed (tokens/s)'\nset yrange [0:*]\nset xtics rotate by -30\nset bars front\n";
        Plotter::caption(gp, "bars: median over the rounds; error bars: 95 % bootstrap interval (5 rounds or more)");
        std::string cmd = "plot ";
        int i = 0;
        for (const auto& [b, t] : tables) cmd += std::string(i++ ? ", " : "") + "'-' using 2:3:4:xtic(1) title " + gnuplot_quote(b);
        gp << cmd << "\n";
        for (const auto& [b, t] : tables) {
            std::vector<std::tuple<std::string, double, double, double>> rows;
            for (const auto& k : keys) {
                std::string label;
                for (const auto& p : k) label += (label.empty() ? "" : ",") + p;
                const double m = number(b, k, "decode_tps"), lo = number(b, k, "decode_tps_lo"), hi = number(b, k, "decode_tps_hi");
                rows.emplace_back(label, m, std::isfinite(lo) ? lo : m, std::isfinite(hi) ? hi : m);
            }
            gp.send1d(rows);
        }
    });
    return {dir / (study + ".csv"), dir / (study + ".md"), f.png, f.svg};
}

}  // namespace

FarmMerge merge_farm(const fs::path& farm) {
    if (!fs::is_directory(farm)) throw Error(farm.string() + " is not a directory (what make farm brought back)");
    std::vector<std::pair<std::string, std::string>> pairs;  // board, study
    for (const auto& b : fs::directory_iterator(farm)) {
        if (!b.is_directory() || b.path().filename() == "compare") continue;
        for (const auto& s : fs::directory_iterator(b.path()))
            if (fs::exists(s.path() / "index.db")) pairs.push_back({b.path().filename(), s.path().filename()});
    }
    std::sort(pairs.begin(), pairs.end());
    if (pairs.empty()) throw Error("no <board>/<study>/index.db under " + farm.string());
    FarmMerge out;
    // Built beside it and put in place whole: a bad index leaves the last farm.db as it was (it
    // left a half-built one), and a link is not replaced.
    const fs::path final = farm / "farm.db";
    if (fs::is_symlink(final)) throw Error(final.string() + " is a symbolic link: not replaced (remove it, or merge elsewhere)");
    const fs::path partial = farm / ("farm.db.partial-" + std::to_string(getpid()));
    auto remove_partial = [&] {
        for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(partial.string() + suffix);
    };
    try {
        store::FarmIndex merged(partial);
        for (const auto& [board, study] : pairs) {
            const fs::path file = farm / board / study / "index.db";
            try {
                store::ExperimentIndex index(file, store::ExperimentIndex::Mode::Read);
                merged.add(board, study, index);
            } catch (const Error& e) {
                const std::string what = e.what();
                throw Error(what.find(file.string()) == std::string::npos ? file.string() + ": " + what : what);
            }
        }
        out.runs = merged.runs();
        out.boards = merged.boards();
    } catch (...) {
        remove_partial();
        throw;
    }
    fs::rename(partial, final);
    remove_partial();
    out.written.push_back(final);
    std::set<std::string> boards, studies;
    for (const auto& [b, s] : pairs) boards.insert(b), studies.insert(s);
    for (const auto& s : studies)
        for (const auto& f : compare_study(farm, s, {boards.begin(), boards.end()})) out.written.push_back(f);
    return out;
}

}  // namespace profinfer
