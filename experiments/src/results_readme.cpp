// results/<board>/README.md, generated whole from the tables beside it: every number in it
// is a cell of a committed table (a study's verdicts.csv or table.csv, machine.json), so
// the README can never say more than, or other than, its data.


#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "profinfer/board.h"
#include "profinfer/error.h"
#include "profinfer/study_text.h"
#include "profinfer/results_readme.h"
#include "profinfer/number_text.h"
#include "profinfer/output_file.h"
#include "profinfer/stats.h"
#include "profinfer/experiment_index.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

std::string text_of(const nlohmann::json& v) {
    if (v.is_null()) return "";
    return v.is_string() ? v.get<std::string>() : v.dump();
}

// The study's own description, from its index (name, title, paper, level, quick, rounds).
std::map<std::string, std::string> study_facts(const fs::path& index) {
    return store::ExperimentIndex(index, store::ExperimentIndex::Mode::Read).facts();
}

// A table cell as the tables print it (3 significant digits), "–" when empty.
std::string num(const nlohmann::json& v) {
    if (!v.is_number()) return "–";
    return format_double(v.get<double>());
}

}  // namespace

namespace {

// What the board's profile says its results are, whether this is a quick run, and the
// machine they were measured on (machine.json).
void write_where(std::ostream& md, const fs::path& dir, const std::string& board, bool quick) {
    // What the board's profile says its results are (an emulated board: not its speed).
    if (board != "host") try {
            const BoardProfile p = board_profile(board);
            if (!p.note.empty()) md << "**" << p.note << "**\n\n";
            if (p.scale == "tiny") md << "Models: the cards' tiny variants (the board profile's `[reproduce] scale`).\n\n";
        } catch (const Error&) {
        }
    // A quick run is kept apart (results/<board>/quick/) beside the full run's evidence, or is
    // itself what a board commits (the emulated board: its full sweeps take days there).
    if (quick && dir.filename() == "quick")
        md << "**A quick run** (`make reproduce`, QUICK=1): the quick sweeps in 2 interleaved rounds — too few for "
              "intervals, so no claim is decided here. The evidence is the full run's, committed in results/"
           << board << "/ (`make reproduce QUICK=0`).\n\n";
    else if (quick)
        md << "**A quick run, and all there is for this board** (QUICK=1): the quick sweeps in 2 interleaved rounds — "
              "too few for intervals, so no claim is decided here; what they show is that every study runs and "
              "records on this board. The full sweeps are `make reproduce QUICK=0` on it.\n\n";
    if (const fs::path m = dir / "machine.json"; fs::exists(m)) {
        std::ifstream in(m);
        const auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_discarded()) {
            md << "Machine: " << j.value("cpu", std::string("?")) << " (`" << j.value("host", std::string("?"))
               << "`); roofs measured by `profinfer bench-machine` in this run (`machine.json`):";
            for (const auto& r : j.value("roofs", nlohmann::json::array()))
                md << " triad " << num(r.value("triad_gbs", nlohmann::json())) << " GB/s and f32 "
                   << num(r.value("peak_gflops_f32", nlohmann::json())) << " GFLOP/s at " << r.value("threads", 0)
                   << (r.value("threads", 0) == 1 ? " thread;" : " threads;");
            md << " isa: " << j.value("isa", std::string("?")) << ".\n\n";
            if (const std::string r = j.value("reclaim", std::string()); !r.empty())
                md << "This machine's kernel reclaims memory on its own: " << r
                   << ". Mmapped model pages it takes away between runs are read back from disk, so runs of one "
                      "configuration vary for it (docs/recording.md).\n\n";
        }
    }
}

// How long the run took (reproduce.json, written by Makefile.reproduce at its end), and the
// studies recorded outside it.
void write_run(std::ostream& md, const fs::path& dir, const std::vector<fs::path>& studies) {
    if (const fs::path rj = dir / "reproduce.json"; fs::exists(rj)) {
        std::ifstream in(rj);
        const auto j = nlohmann::json::parse(in, nullptr, false);
        if (!j.is_discarded() && j.value("started", int64_t(0)) > 0 && j.value("finished", int64_t(0)) > 0)
            md << "Run: `make reproduce QUICK=" << j.value("quick", 1) << "` at commit `" << j.value("commit", std::string("?"))
               << "`, "
               << format_double(double(j.value("finished", int64_t(0)) - j.value("started", int64_t(0))) / 60)
               << " minutes from the machine's roofs to the last study and the models (building profinfer and llama.cpp "
                  "before it not counted; `reproduce.json`)"
               << (j.value("summarised", std::string()).empty()
                       ? std::string()
                       : "; its tables and figures made again from the same traces at commit `" +
                             j.value("summarised", std::string()) + "` (`profinfer experiment run` on the finished study)")
               << ".\n\n";
        // A study recorded (again) outside that run: said, with when.
        std::string outside;
        for (const auto& s : j.is_object() ? studies : std::vector<fs::path>{}) {
            double first = 0, last = 0;
            try {
                for (const auto& r : store::ExperimentIndex(s / "index.db", store::ExperimentIndex::Mode::Read).done_runs()) {
                    first = first == 0 ? r.started_at : std::min(first, r.started_at);
                    last = std::max(last, r.ended_at);
                }
            } catch (const Error&) {
                continue;  // an index without its runs: when it was recorded is not known
            }
            if (first == 0 || (first >= double(j.value("started", int64_t(0))) && last <= double(j.value("finished", int64_t(0)))))
                continue;
            char day[32];
            const time_t t = time_t(first);
            std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&t));
            // How long it took is the study's own README's (its runs' time): one owner for that number.
            outside += std::string(outside.empty() ? "" : ", ") + "[" + s.filename().string() + "](" + s.filename().string() +
                       "/) (" + day + ")";
        }
        if (!outside.empty())
            md << "Recorded on this board in part or in whole outside that run — by an earlier `make reproduce` that it resumed "
                  "(done points are not recorded again), or by `profinfer experiment run` on the study's spec alone (first "
                  "run's day; how long each took: its own README): " << outside << ".\n\n";
    }
}

void write_verdicts_table(std::ostream& md, const std::vector<fs::path>& studies) {
    md << "## Verdicts\n\n| study | paper | claim | where | estimate [95 % interval] | n | verdict |\n"
          "|---|---|---|---|---|---|---|\n";
    for (const auto& s : studies) {
        auto facts = study_facts(s / "index.db");
        const Table v = Table::read_csv_file(s / "verdicts.csv");
        const std::string name = s.filename().string();
        if (v.rows.empty())
            md << "| [" << name << "](" << name << "/) | " << facts["paper"] << " | (no claim stated as a comparison) | | | | |\n";
        for (const auto& r : v.rows) {
            const std::string reason = text_of(r[v.column("reason")]);
            const std::string est =
                r[v.column("estimate")].is_number()
                    ? format_with_interval(r[v.column("estimate")].get<double>(),
                                           r[v.column("lo")].is_number() ? r[v.column("lo")].get<double>() : NAN,
                                           r[v.column("hi")].is_number() ? r[v.column("hi")].get<double>() : NAN)
                    : "–";
            const std::string what = text_of(r[v.column("metric")]) + " " + text_of(r[v.column("expect")]) +
                                     (text_of(r[v.column("a")]).empty() ? "" : "; a: " + text_of(r[v.column("a")])) +
                                     (text_of(r[v.column("b")]).empty()
                                          ? ""
                                          : (r[v.column("b")].is_number() ? "; value: " : "; b: ") + text_of(r[v.column("b")]));
            md << "| [" << name << "](" << name << "/) | " << facts["paper"] << " | " << text_of(r[v.column("claim")])
               << " (" << what << ") | " << (text_of(r[v.column("group")]).empty() ? "–" : text_of(r[v.column("group")]))
               << " | " << est << " | " << text_of(r[v.column("n")]) << " | **" << text_of(r[v.column("verdict")]) << "**"
               << (reason.empty() ? "" : ": " + reason) << " |\n";
        }
    }
}

void write_studies_table(std::ostream& md, const std::vector<fs::path>& studies) {
    md << "\n## Studies\n\nRun-to-run spread: the coefficient of variation of decode speed over the rounds, lowest "
          "and highest over the study's points (`decode_tps_cv_pct` in its table.csv).\n\n";
    Table out{{"study", "title", "paper", "level", "points", "rounds", "decode CV (%)"}, {}};
    for (const auto& s : studies) {
        auto facts = study_facts(s / "index.db");
        const std::string name = s.filename().string();
        const Table t = Table::read_csv_file(s / "table.csv");
        double lo = INFINITY, hi = -INFINITY;
        size_t n_lo = SIZE_MAX, n_hi = 0;
        for (const auto& r : t.rows) {
            if (const auto& cv = r[t.column("decode_tps_cv_pct")]; cv.is_number())
                lo = std::min(lo, cv.get<double>()), hi = std::max(hi, cv.get<double>());
            const size_t n = size_t(r[t.column("n")].get<int64_t>());
            n_lo = std::min(n_lo, n), n_hi = std::max(n_hi, n);
        }
        out.rows.push_back({"[" + name + "](" + name + "/table.md)", facts["title"], facts["paper"], facts["level"],
                            std::to_string(t.rows.size()),
                            t.rows.empty()  ? std::string("–")
                            : n_lo == n_hi ? std::to_string(n_hi)
                                           : std::to_string(n_lo) + "–" + std::to_string(n_hi),
                            std::isfinite(lo) ? format_double(lo) + "–" + format_double(hi) : "–"});
    }
    md << out.to_markdown();
}

// Which machine recorded each study (its index's "machine" fact, with the uprobe trap measured
// as its run began): one line where they agree, else each machine with its studies — a reader
// must not take numbers of two machines for one.
void write_machines(std::ostream& md, const std::vector<fs::path>& studies) {
    std::map<std::string, std::vector<std::string>> by_machine;  // machine → studies (with their trap)
    for (const auto& s : studies) {
        auto f = study_facts(s / "index.db");
        const std::string m = f["machine"].empty() ? "not named by its index (recorded before 2026-12-06)" : f["machine"];
        by_machine[m].push_back("[" + s.filename().string() + "](" + s.filename().string() + "/)" +
                                (f["trap_us"].empty() ? "" : " (trap " + f["trap_us"] + " µs)") +
                                (f["machine_note"].empty() ? "" : " (earlier rounds: machine not named)"));
    }
    if (by_machine.size() == 1) {
        md << "Every study recorded on: " << by_machine.begin()->first << ".\n\n";
        return;
    }
    md << "**The studies here come from " << by_machine.size()
       << " machines or records that do not say which** (each study's index names the machine its rounds ran on; a "
          "study is never resumed on another):\n\n";
    for (const auto& [m, names] : by_machine) {
        md << "- " << m << ": ";
        for (size_t i = 0; i < names.size(); ++i) md << (i ? ", " : "") << names[i];
        md << "\n";
    }
    md << "\n";
}

}  // namespace

fs::path write_results_readme(const fs::path& dir) {
    std::vector<fs::path> studies;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory() && fs::exists(e.path() / "index.db") && fs::exists(e.path() / "verdicts.csv"))
            studies.push_back(e.path());
    std::sort(studies.begin(), studies.end());
    if (studies.empty()) throw Error(dir.string() + " holds no summarised study (STUDY/index.db and STUDY/verdicts.csv)");
    std::string board = dir.filename().string();
    bool quick = false;
    for (const auto& s : studies) {
        auto f = study_facts(s / "index.db");
        if (f.count("board")) board = f["board"];
        quick |= f["quick"] == "1";
    }
    std::ostringstream md;
    // A folder named otherwise than its studies' board keeps what another machine of that
    // name recorded (one machine per results folder): its title says so.
    const std::string folder = (quick ? dir.parent_path() : dir).filename().string();
    md << "# " << (quick ? "Quick results" : "Results") << " on `" << board << "`"
       << (folder == board || folder.empty() ? " — the paper's findings on this machine"
                                             : ", kept in `results/" + folder + "/` — recorded on the machine named below, not this board's own run")
       << "\n\n";
    md << "<!-- Generated by `profinfer experiment readme` from the tables beside it; edit the specs "
          "(experiments/specs/*.toml), not this file. -->\n\n";
    write_where(md, dir, board, quick);
    write_machines(md, studies);
    write_run(md, dir, studies);
    md << "Every study records each point of its sweep once per round, in interleaved rounds (each round visits "
          "every point, in an order of its own), and gives per point the median over the rounds with a 95 % "
          "bootstrap interval. Each claim of the paper is a comparison of two points measured in the same rounds (the median of each "
          "round's own ratio, so that what drifts between rounds cancels); it is **reproduced** or "
          "**not reproduced** only when its interval excludes no effect, **within noise** when it does not (with, "
          "in the studies summarised since 2026-12-08, about how many rounds at the measured spread would decide it; an "
          "equivalence, `≈ ± m`, the paper's \"unaffected\": reproduced only when the whole interval lies within the "
          "margin), and "
          "**not testable here** with the reason. docs/experiments.md explains the method and each study.\n\n";


    write_verdicts_table(md, studies);
    write_studies_table(md, studies);
    md << "\nAlso here, each with its own tables: ";
    std::vector<std::string> more;
    for (const auto& [path, what] : std::vector<std::pair<std::string, std::string>>{
             {"overhead/vs-baseline.md", "the cost of tracing, each level against the untraced run (Table 5)"},
             {"overhead-where/vs-baseline.md", "where that cost goes, and the peers against their own untraced runs (Table 7)"},
             {"overhead-where/fidelity.md", "operator times against the eval callback's"},
             {"models/models.md", "the performance models and the plan (Fig. 10, 13; `profinfer fit`, `plan`)"},
             {"llama3.2-1b-q4_0/report.html", "one full-level profile with its DAGs, statistics and roofline"}})
        if (fs::exists(dir / path)) more.push_back("[" + what + "](" + path + ")");
    for (size_t i = 0; i < more.size(); ++i) md << (i ? "; " : "") << more[i];
    md << (more.empty() ? "nothing else.\n" : ".\n");
    const fs::path out = dir / "README.md";
    OutputFile::write(out, md.str());
    return out;
}

}  // namespace profinfer
