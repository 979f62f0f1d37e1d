#include "profinfer/report.h"

#include <boost/archive/iterators/base64_from_binary.hpp>
#include <boost/archive/iterators/transform_width.hpp>

#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <sstream>

#include "profinfer/dag.h"
#include "profinfer/error.h"
#include "profinfer/text_file.h"
#include "profinfer/figures.h"
#include "profinfer/output_file.h"
#include "profinfer/text_escape.h"
#include "profinfer/roofline.h"
#include "profinfer/run_summary.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// Boost's base64 iterators over 6-bit groups, padded with '=' to a multiple of 4.
std::string base64(const std::string& in) {
    using namespace boost::archive::iterators;
    using It = base64_from_binary<transform_width<std::string::const_iterator, 6, 8>>;
    std::string out(It(in.begin()), It(in.end()));
    out.append((3 - in.size() % 3) % 3, '=');
    return out;
}

std::string html_table(const Table& t, size_t max_rows) {
    std::ostringstream o;
    o << "<table><tr>";
    for (const auto& c : t.columns) o << "<th>" << html_escape(c) << "</th>";
    o << "</tr>\n";
    for (size_t i = 0; i < t.rows.size() && i < max_rows; ++i) {
        o << "<tr>";
        for (const auto& v : t.rows[i]) {
            std::string s;
            if (v.is_number_float()) {
                char b[32];
                std::snprintf(b, sizeof b, "%.3f", v.get<double>());
                s = b;
            } else {
                s = v.is_string() ? v.get<std::string>() : json_text(v);
            }
            o << "<td>" << html_escape(s) << "</td>";
        }
        o << "</tr>\n";
    }
    o << "</table>\n";
    return o.str();
}

// Graphviz's SVG for DOT, inline.
std::string inline_svg(const std::string& dot) {
    std::string svg = render_svg(dot);
    return svg.substr(svg.find("<svg"));
}

// One run's section; its database opened once for all of it. The run's health and operator
// sampling note also go to stderr, as every command says them.
std::string run_section(const fs::path& path, const MachineBench* machine, const fs::path& work) {
    std::ostringstream o;
    // The run summary on a connection of its own, beside the sections below: its passes over
    // every thread part and node (12 of the 50 s a 10-minute full-level trace of the 1B takes
    // here) run on the other CPU.
    auto summary_of = std::async(std::launch::async, [path] {
        store::Database own(path, store::Database::Mode::ReadOnly);
        return RunSummary::load(own);
    });
    store::Database db(path, store::Database::Mode::ReadOnly);
    db.keep_node_times();  // the sections below scan it whole five times
    o << "<section><h2>" << html_escape(path.filename().string()) << "</h2>\n";
    {
        const auto health = store::run_health(db);
        if (std::string w = store::health_warning(path, health); !w.empty()) std::cerr << w << "\n";
        if (std::string note = operator_sampling_note(db); !note.empty()) std::cerr << note << "\n";
        std::string warning = store::health_warning(path.filename(), health);
        if (!warning.empty()) o << "<p class=\"warn\"><strong>" << html_escape(warning) << "</strong></p>\n";
    }
    const bool op_records = db.scalar("SELECT EXISTS (SELECT 1 FROM thread_parts)");
    const int64_t cpu_samples = op_records ? 0 : db.scalar("SELECT count(*) FROM cpu_samples");
    // What follows the summary, written while it is computed; the summary goes first.
    std::ostringstream r;
    auto with_summary = [&] { return o.str() + "<pre>" + html_escape(summary_of.get().to_text()) + "</pre>\n" + r.str(); };
    if (!op_records && cpu_samples > 0) {  // --level op-sampled: shares, not times
        r << "<h3>Operators, estimated from " << cpu_samples
          << " CPU-clock samples (--level op-sampled: shares with 95 % intervals; no per-node times, no DAG)</h3>\n"
          << html_table(stats_table(db, "op-type"), 20) << "</section>\n";
        return with_summary();
    }
    if (!op_records) {
        r << "<p>No operator records (recorded at --level " << html_escape(db.meta()[store::MetaKey::Level]) << ").</p></section>\n";
        return with_summary();
    }
    r << "<h3>Top operators</h3>\n" << html_table(stats_table(db, "op"), 15);
    TraceGraphs trace(db);
    Dag dag = Dag::build(trace, trace.default_call());
    try {
        int max_layer = -1;
        for (const auto& n : dag.nodes) max_layer = std::max(max_layer, n.layer);
        Dag block = dag.filtered(max_layer / 2, "attn");
        r << "<h3>DAG: attention block of layer " << max_layer / 2 << ", call " << dag.call
          << " (colour: time)</h3>\n<div class=\"dag\">" << inline_svg(block.to_dot(Dag::Colour::Time))
          << "</div>\n";
    } catch (const Error& e) {
        r << "<p>No DAG: " << html_escape(e.what()) << "</p>\n";
    }
    for (const auto& f : draw_figures(db, work / "figures", machine))
        r << "<h3>" << html_escape(f.title) << "</h3>\n<img alt=\"" << html_escape(f.title) << "\" src=\"data:image/png;base64,"
          << base64(read_text(f.png)) << "\">\n";
    if (machine) {
        r << "<h3>Roofline (" << html_escape(machine->cpu) << ")</h3>\n";
        r << "<p>Roofs: ";
        for (const auto& roof : machine->roofs) {
            r << roof.threads << " threads: " << roof.triad_gbs << " GB/s";
            for (const auto& [kind, g] : roof.peak_gops) r << ", " << html_escape(kind) << " " << g << " G ops/s";
            if (roof.peak_gops.empty()) r << ", f32 " << roof.peak_gflops << " GFLOP/s";
            r << "; ";
        }
        r << "(" << html_escape(machine->isa) << ")";
        r << "</p>\n" << html_table(roofline_table(db, *machine), 40);
    } else {
        r << "<p>No roofline: no machine benchmark (run <code>profinfer bench-machine</code>).</p>\n";
    }
    r << "</section>\n";
    return with_summary();
}

}  // namespace

std::vector<fs::path> report_inputs(const fs::path& input) {
    std::vector<fs::path> dbs;
    if (fs::is_directory(input)) {
        for (const auto& e : fs::recursive_directory_iterator(input))
            if (e.path().extension() == ".db") dbs.push_back(e.path());
        std::sort(dbs.begin(), dbs.end());
        if (dbs.empty()) throw Error("no .db files under " + input.string());
    } else {
        dbs.push_back(input);
    }
    return dbs;
}

void write_report(const fs::path& input, const fs::path& out, const fs::path& machine_file) {
    std::vector<fs::path> dbs = report_inputs(input);
    std::unique_ptr<MachineBench> machine;
    if (fs::exists(machine_file)) machine = std::make_unique<MachineBench>(MachineBench::load(machine_file));
    PrivateTempDir work("profinfer-report");
    std::ostringstream body;
    // One unreadable database in a folder is named and left out; the rest are reported.
    size_t skipped = 0;
    for (const auto& db : dbs) {
        try {
            body << run_section(db, machine.get(), work.path());
        } catch (const std::exception& e) {
            if (dbs.size() == 1) throw Error(db.string() + ": " + e.what());
            ++skipped;
            std::cerr << "profinfer: warning: " << db.string() << " left out of the report: " << e.what() << "\n";
            body << "<h2>" << html_escape(db.string()) << "</h2>\n<p>Left out: " << html_escape(e.what()) << "</p>\n";
        }
    }
    if (skipped == dbs.size()) throw Error("no database under " + input.string() + " could be read");
    OutputFile file(out, dbs);
    file.stream() << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>profinfer report</title>\n<style>\n"
         "body{font-family:'DejaVu Sans',sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
         "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}"
         "pre{background:#f6f6f6;padding:1em}img{max-width:100%}.dag svg{max-width:100%;height:auto}\n"
         "</style></head><body>\n<h1>profinfer report</h1>\n"
      << body.str() << "</body></html>\n";
    file.commit();
}

}  // namespace profinfer
