#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "profinfer/number_text.h"
#include "profinfer/regression.h"

namespace profinfer::fit {

void fit_context(FitContext& c) {
    auto& out = c.out;
    auto& md = c.md;
    const fs::path& results_dir = c.results_dir;
    // Context: what each token of KV cache adds to a decode step (the across-tokens study),
    // per query-head dimension and layer so that it carries over to another card.
    out["attention"] = nlohmann::json::array();
    if (fs::exists(results_dir / "across-tokens" / "points.csv")) {
        const Table at = read_table(results_dir / "across-tokens" / "points.csv");
        const ModelCard::Scale scale = study_scale(results_dir / "across-tokens");
        std::map<std::tuple<std::string, std::string, std::string, int, std::string>, std::vector<std::pair<double, double>>> by;
        for (const auto& r : at.rows)
            if (r[at.column("decode_tps")].is_number())
                by[{text(r[at.column("model")]), text(r[at.column("backend")]), text(r[at.column("type")]),
                    std::stoi(text(r[at.column("threads")])), text(r[at.column("fa")])}]
                    .push_back({std::stod(text(r[at.column("ctx")])), 1000 / r[at.column("decode_tps")].get<double>()});
        md << "\n### Context (across-tokens study)\n\n"
           << "Decode ms per token = a + b·ctx per flash-attention setting; b per layer and query-head dimension "
              "(layers × heads × head_dim) is what `predict --ctx` adds for another card. One model: not checked across models.\n\n"
           << "| model | fa | ctx points | ms/token at 0 | ms per 1k ctx [95 % interval] | R² | µs per ctx per 1k head-dims·layers |\n|---|---|---|---|---|---|---|\n";
        for (const auto& [key, xy] : by) {
            const auto& [model, backend, type, threads, fa] = key;
            if (xy.size() < 3) continue;
            ModelCard card;
            try {
                card = ModelCard::load(model, scale);
            } catch (const Error&) {
                continue;
            }
            Eigen::MatrixXd X(Eigen::Index(xy.size()), 2);
            Eigen::VectorXd y(Eigen::Index(xy.size()));
            for (size_t i = 0; i < xy.size(); ++i) X(Eigen::Index(i), 0) = 1, X(Eigen::Index(i), 1) = xy[i].first, y[Eigen::Index(i)] = xy[i].second;
            const LinearFit f = least_squares(X, y, {"ms", "ms_per_ctx"});
            const double dims = double(card.layers) * card.heads * card.head_dim;
            double lo = INFINITY, hi = 0;
            for (const auto& [c, ms] : xy) lo = std::min(lo, c), hi = std::max(hi, c);
            out["attention"].push_back({{"backend", backend}, {"type", type}, {"threads", threads}, {"fa", fa},
                                        {"ms_per_ctx_per_head_dim_layer", f.coef[1] / dims},
                                        {"ms_per_ctx_ci95", {f.ci_lo[1], f.ci_hi[1]}}, {"r2", f.r2}, {"model", model},
                                        {"valid", {{"ctx", {lo, hi}}}}});
            md << "| " << model << " | " << fa << " | " << xy.size() << " | " << format_double(f.coef[0]) << " | " << format_with_interval(f.coef[1] * 1e3, f.ci_lo[1] * 1e3, f.ci_hi[1] * 1e3)
               << " | " << format_double(f.r2, "%.3f") << " | " << format_double(f.coef[1] / dims * 1e6, "%.4g") << " |\n";
        }
    }
}

}  // namespace profinfer::fit
