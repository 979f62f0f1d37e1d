#include <algorithm>
#include <optional>

#include "profinfer/dag.h"
#include "profinfer/error.h"
#include "profinfer/figures.h"
#include "profinfer/gzip_stream.h"
#include "profinfer/machine_bench.h"
#include "profinfer/output_file.h"
#include "profinfer/stats.h"
#include "profinfer/study_text.h"
#include "profinfer/timeline.h"
#include "study_parts.h"

namespace fs = std::filesystem;

namespace profinfer {

void write_point_outputs(const Study& s, std::vector<fs::path>& written) {
    // Named by the point's id, from its first recorded round.
    const ExperimentSpec& spec = s.spec;
    const fs::path& out_dir = s.out_dir;
    std::optional<MachineBench> machine;  // the roofs, for a roofline figure
    if (const fs::path m = out_dir.parent_path() / "machine.json"; !spec.figures.empty() && fs::exists(m))
        machine = MachineBench::load(m);
    for (const auto& r : s.points) {
        const fs::path base = out_dir / "points" / r.id;
        const fs::path path = r.dbs.front().second;  // empty for an untraced point
        if (path.empty() || (spec.dag.empty() && spec.stats.empty() && spec.figures.empty() && !spec.timeline)) continue;
        if (!fs::exists(path)) continue;  // not here (a clone): its outputs stay as they were made
        store::Database db(path, store::Database::Mode::ReadOnly);  // opened once for its outputs
        if (!spec.dag.empty()) {
            TraceGraphs trace(db);
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
            OutputFile::write(f, stats_table(db, by).to_csv());
            written.push_back(f);
        }
        if (!spec.figures.empty()) {
            // The recording's own figures (timeline: paper Fig. 5, threads: Fig. 6, tokens: Fig. 9,
            // experts: Fig. 13) from the point's first round, named points/<id>-<kind>.
            // The point's own parameters among those the study varies (ctx, fa, hog, …): each
            // figure says which point it is.
            std::string varied;
            for (const auto& [k, v] : r.params) {
                if (k == "model" || k == "type" || k == "threads") continue;
                const bool varies = std::any_of(s.points.begin(), s.points.end(), [&](const auto& q) {
                    const auto it = q.params.find(k);
                    return it != q.params.end() && it->second != v;
                });
                if (varies) varied += ", " + k + "=" + v;
            }
            const std::string caption = s.machine() + "; " + r.params.at("model") + " " +
                                        r.params.at("type") + ", " + r.params.at("threads") + " threads" + varied +
                                        "; --level " + spec.level + "; one run: round " + std::to_string(r.dbs.front().first) +
                                        " of " + std::to_string(r.dbs.size());
            for (const auto& f : draw_figures(db, out_dir / "points", machine ? &*machine : nullptr, spec.figures,
                                              r.id + "-", caption))
                written.push_back(f.png), written.push_back(f.svg);
        }
        if (spec.timeline) {
            const fs::path f = base.string() + "-trace.json.gz";
            OutputFile file(f);
            GzipStream gz(file.stream());
            write_timeline(db, gz);
            gz.finish();
            file.commit();
            written.push_back(f);
        }
    }
}

DerivedSamples write_across_points(const Study& s, std::vector<fs::path>& written) {
    const ExperimentSpec& spec = s.spec;
    const fs::path& out_dir = s.out_dir;
    // Every (point, round) recording, for the summaries across points below.
    std::vector<StudyPoint> pts;
    size_t rounds = 0;
    const bool across = spec.reads_traces_across_points();
    for (const auto& r : s.points) {
        for (const auto& [round, db] : r.dbs) {
            if (across && !db.empty() && !fs::exists(db))
                throw Error(spec.name + ": its summaries across points read every trace, and " + db.string() +
                            " is not here: summarise it where its traces are, or record it again here");
            pts.push_back({r.params, db, round});
        }
        rounds = std::max(rounds, r.dbs.size());
    }
    DerivedSamples derived;  // the fitted lines and the shares' gaps, for claims on them
    if (spec.matmuls) {
        auto m = summarise_matmuls(spec, pts, out_dir,
                                   s.machine() + "; " + std::to_string(s.points.size()) +
                                       " points (models x types x threads); --level " + spec.level +
                                       "; each shape's median per call, every round: " + rounds_text(rounds));
        written.insert(written.end(), m.files.begin(), m.files.end());
        derived["fits"] = std::move(m.fits);
    }
    if (std::find(spec.figures.begin(), spec.figures.end(), "threads") != spec.figures.end()) {
        const auto f = summarise_wait_methods(spec, pts, out_dir,
                                              s.machine() + "; " + s.points.front().params.at("model") + " " +
                                                  s.points.front().params.at("type") + "; --level full; one run of each: round 1");
        written.insert(written.end(), f.begin(), f.end());
    }
    if (spec.matmul_backends) {
        const auto f = summarise_matmul_backends(spec, pts, out_dir,
                                                 s.machine() + "; " + s.points.front().params.at("model") +
                                                     ", decode; CPU: --level " + spec.level + " trace, " +
                                                     s.points.front().params.at("threads") + " threads; Vulkan: lavapipe; n = " +
                                                     rounds_text(rounds) + " per side");
        written.insert(written.end(), f.begin(), f.end());
    }
    if (spec.sampled_shares) {
        auto sh = summarise_sampled_shares(spec, pts, out_dir,
                                           s.machine() + "; --level op and op-sampled, one run each per round: " +
                                               rounds_text(rounds));
        written.insert(written.end(), sh.files.begin(), sh.files.end());
        derived["shares"] = std::move(sh.gaps);
    }
    return derived;
}

std::vector<fs::path> summarise_experiment(const ExperimentSpec& spec, const fs::path& out_dir, bool quick,
                                           int calls_dropped) {
    const Study s(spec, out_dir, quick, calls_dropped);
    std::vector<fs::path> written;
    write_point_outputs(s, written);
    DerivedSamples derived = write_across_points(s, written);
    if (!spec.baseline.empty()) derived["baseline"] = against_baseline(spec, s.samples);
    write_points_tables(s, written);
    if (!spec.baseline.empty()) write_vs_baseline(s, written);
    if (spec.fidelity) write_fidelity(s, written);
    const auto verdicts = evaluate_claims(spec, s.samples, Testbed::here(), derived);
    write_verdicts(s, verdicts, written);
    write_table_md(s, verdicts, written);
    draw_study_figures(s, written);
    return written;
}

}  // namespace profinfer
