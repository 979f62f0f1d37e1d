#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/error.h"
#include "profinfer/regression.h"

namespace profinfer::fit {

// Weight-MatMul time per backend, type, thread count and batch class: the line in M·N·K·H
// beside the roofline on the measured roofs, each checked leave-one-model-out; the one
// that predicts more held-out shapes within ±10 % is the one models.json uses.
Table fit_matmul(FitContext& c, const MatMulGroups& groups) {
    auto& out = c.out;
    auto& md = c.md;
    const fs::path& results_dir = c.results_dir;
    const std::optional<MachineBench>& machine = c.machine;
    const fs::path study = results_dir / "matmul-dims";
    md << "### Weight-MatMul time (leave-one-model-out)\n\n"
       << "Each model's shapes predicted by a fit on the other models' (linear: time = a + b·M·N·K·H, for relative "
          "error) and by the roofline on this machine's measured roofs (max(2·MNKH / peak, bytes / triad bandwidth)). "
          "`use` is the one models.json applies."
       << (study_scale(study) == ModelCard::Scale::Tiny
               ? " The sweep ran the cards' tiny variants, which share their shapes: a held-out model's shapes are ones "
                 "the fit has seen, so this checks repeatability, not a prediction for another model."
               : "")
       << "\n\n"
       << "| backend | type | threads | batch | models | shapes | linear within ±10 % | linear median error % | roofline within ±10 % | roofline median error % | use |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    Table heldout{{"backend", "type", "threads", "batch", "model", "m", "n", "k", "h", "measured_us", "linear_us", "roofline_us"}, {}};
    for (const auto& [key, pts] : groups) {
        const auto& [backend, type, threads, batch] = key;
        std::vector<const Point*> all;
        std::set<std::string> models;
        int64_t lo[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX}, hi[4] = {0, 0, 0, 0};
        for (const auto& p : pts) {
            all.push_back(&p), models.insert(p.model);
            const int64_t d[4] = {p.m, p.n, p.k, p.h};
            for (int i = 0; i < 4; ++i) lo[i] = std::min(lo[i], d[i]), hi[i] = std::max(hi[i], d[i]);
        }
        if (all.size() < 3) continue;
        nlohmann::json e{{"backend", backend}, {"type", type}, {"threads", threads}, {"batch", batch}};
        try {
            e["linear"] = linear_json(fit_points(all));
        } catch (const Error&) {
            continue;  // one shape only
        }
        if (machine) {
            const auto& roof = machine->at(threads);
            e["roofline"] = {{"gops", roof.peak_for(compute_kind_of(type))}, {"gbs", roof.triad_gbs},
                             {"weight_bytes_per_elem", bytes_per_elem(type)}, {"compute_kind", compute_kind_of(type)},
                             {"roofs", "machine.json (profinfer bench-machine)"}};
        }
        e["valid"] = {{"m", {lo[0], hi[0]}}, {"n", {lo[1], hi[1]}}, {"k", {lo[2], hi[2]}}, {"h", {lo[3], hi[3]}}};
        e["models"] = std::vector<std::string>(models.begin(), models.end());
        // Held out, one model at a time.
        std::vector<double> lin_err, roof_err;
        if (models.size() >= 3)
            for (const auto& held : models) {
                std::vector<const Point*> train;
                for (const auto* p : all)
                    if (p->model != held) train.push_back(p);
                nlohmann::json fold = e;
                try {
                    fold["linear"] = linear_json(fit_points(train));
                } catch (const Error&) {
                    continue;
                }
                for (const auto* p : all) {
                    if (p->model != held) continue;
                    const double lin = perf::Models::evaluate(fold, "linear", p->m, p->n, p->k, p->h);
                    const double rf = machine ? perf::Models::evaluate(fold, "roofline", p->m, p->n, p->k, p->h) : NAN;
                    lin_err.push_back(100 * std::abs(lin - p->us) / p->us);
                    if (machine) roof_err.push_back(100 * std::abs(rf - p->us) / p->us);
                    heldout.rows.push_back({backend, type, threads, batch, held, p->m, p->n, p->k, p->h, p->us, lin,
                                            machine ? nlohmann::json(rf) : nlohmann::json(nullptr)});
                }
            }
        const ErrStats le = err_stats(lin_err), re = err_stats(roof_err);
        e["heldout"] = {{"method", "leave-one-model-out"}, {"linear", err_json(le)}};
        if (machine) e["heldout"]["roofline"] = err_json(re);
        e["use"] = machine && re.points && re.within_10pct > le.within_10pct ? "roofline" : "linear";
        md << "| " << backend << " | " << type << " | " << threads << " | " << batch << " | " << models.size() << " | "
           << all.size() << " | " << (le.points ? format_double(100 * le.within_10pct, "%.0f %%") : "–") << " | "
           << (le.points ? format_double(le.median_abs_pct, "%.1f") : "–") << " | "
           << (re.points ? format_double(100 * re.within_10pct, "%.0f %%") : "–") << " | " << (re.points ? format_double(re.median_abs_pct, "%.1f") : "–")
           << " | " << e["use"].get<std::string>() << " |\n";
        out["matmul"].push_back(e);
    }
    if (out["matmul"].empty()) throw Error(study.string() + "/matmuls.csv: no group with three shapes or more to fit");
    return heldout;
}

}  // namespace profinfer::fit
