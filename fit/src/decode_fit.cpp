#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "profinfer/regression.h"

namespace profinfer::fit {

namespace {

// A dense model's measured decode time per token, with what the card says of it.
struct Measured {
    std::string model;
    int layers = 0;
    double ms = 0, weight_mb = 0;
    std::vector<perf::MatMulShape> shapes;
};
using Runs = std::map<std::tuple<std::string, std::string, int>, std::vector<Measured>>;  // backend, type, threads

Runs read_runs(const Table& speeds, ModelCard::Scale scale) {
    Runs runs;
    for (const auto& r : speeds.rows) {
        const std::string model = text(r[speeds.column("model")]), type = text(r[speeds.column("type")]);
        const int threads = std::stoi(text(r[speeds.column("threads")]));
        const auto& tps = r[speeds.column("decode_tps")];
        if (!tps.is_number()) continue;
        ModelCard card;
        try {
            card = ModelCard::load(model, scale);
        } catch (const Error&) {
            continue;  // no card: cannot be predicted from hyperparameters
        }
        if (card.experts > 0) continue;
        Measured m{model, int(card.layers), 1000.0 / tps.get<double>(), 0, card_matmuls(card)};
        for (const auto& s : m.shapes) m.weight_mb += double(s.m) * double(s.k) * bytes_per_elem(type) * s.per_token / 1e6;
        runs[{text(r[speeds.column("backend")]), type, threads}].push_back(m);
    }
    return runs;
}

LinearFit line(const std::vector<std::pair<double, double>>& xy) {
    Eigen::MatrixXd X(Eigen::Index(xy.size()), 2);
    Eigen::VectorXd y(Eigen::Index(xy.size()));
    for (size_t i = 0; i < xy.size(); ++i) X(Eigen::Index(i), 0) = 1, X(Eigen::Index(i), 1) = xy[i].first, y[Eigen::Index(i)] = xy[i].second;
    return least_squares(X, y, {"intercept", "slope"});
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? NAN : s / double(v.size());
}

// A group's models, each predicted by lines fitted on the others (leave-one-model-out):
// its rows in the table and the Markdown, its errors.
struct HeldOut {
    std::vector<double> sum_err, direct_err;
    nlohmann::json per_model = nlohmann::json::array();
};
template <typename MatmulMs>
HeldOut leave_one_out(FitContext& c, const std::tuple<std::string, std::string, int>& key, const std::vector<Measured>& ms,
                      const std::vector<Point>& group, const nlohmann::json& entry, MatmulMs matmul_ms, Table& decode_tab) {
    auto& md = c.md;
    const auto& [backend, type, threads] = key;
    HeldOut h;
    auto& sum_err = h.sum_err;
    auto& direct_err = h.direct_err;
    auto& per_model = h.per_model;
    for (const auto& held : ms) {
        std::vector<const Point*> train;
        for (const auto& p : group)
            if (p.model != held.model) train.push_back(&p);
        nlohmann::json fold = entry;
        try {
            fold["linear"] = linear_json(fit_points(train));
            std::vector<std::pair<double, double>> rest, direct;
            for (const auto& o : ms)
                if (o.model != held.model) {
                    rest.push_back({double(o.layers), o.ms - matmul_ms(fold, o)});
                    direct.push_back({o.weight_mb, o.ms});
                }
            const LinearFit r = line(rest), d = line(direct);
            const double sum_ms = matmul_ms(fold, held) + r.coef[0] + r.coef[1] * held.layers;
            const double direct_ms = d.coef[0] + d.coef[1] * held.weight_mb;
            const double se = 100 * std::abs(sum_ms - held.ms) / held.ms, de = 100 * std::abs(direct_ms - held.ms) / held.ms;
            sum_err.push_back(se), direct_err.push_back(de);
            decode_tab.rows.push_back({backend, type, threads, held.model, 1000 / held.ms, 1000 / sum_ms, se, 1000 / direct_ms, de});
            per_model.push_back({{"model", held.model}, {"measured_tps", 1000 / held.ms}, {"predicted_tps", 1000 / sum_ms},
                                 {"abs_err_pct", se}, {"direct_predicted_tps", 1000 / direct_ms}, {"direct_abs_err_pct", de}});
            md << "| " << type << " | " << threads << " | " << held.model << " | " << format_double(1000 / held.ms) << " | " << format_double(1000 / sum_ms) << " | "
               << format_double(se, "%.1f") << " | " << format_double(1000 / direct_ms) << " | " << format_double(de, "%.1f") << " |\n";
        } catch (const Error&) {
            continue;
        }
    }
    return h;
}

}  // namespace

Table fit_decode(FitContext& c, const MatMulGroups& groups) {
    auto& out = c.out;
    auto& md = c.md;
    const fs::path& results_dir = c.results_dir;
    const fs::path study = results_dir / "matmul-dims";
    const perf::Models full(out);

    // Decode time per token from hyperparameters: the card's weight MatMuls by the MatMul
    // model plus the rest (attention, norms, activations, graph overhead) as a line in the
    // number of layers — against a direct line in the weight bytes a token streams.
    const Table speeds = read_table(study / "points.csv");  // every parameter of every point
    const ModelCard::Scale scale = study_scale(study);       // the shapes the points ran
    const Runs runs = read_runs(speeds, scale);
    out["decode"] = nlohmann::json::array();
    md << "\n### Decode time per token from hyperparameters (leave-one-model-out)\n\n"
       << "sum: the card's weight MatMuls by the MatMul model fitted without the model, plus the rest as a + b·layers "
          "fitted on the other models; direct: time = a + b·(weight MB a token streams) on the other models. "
          "Measured: median decode call of the matmul-dims point (recorded at --level op). Cards at the sweep's scale ("
       << (scale == ModelCard::Scale::Tiny ? "tiny: the shapes of the synthesised models, not of the real ones" : "full")
       << ").\n\n"
       << "| type | threads | model | measured tok/s | sum: predicted tok/s | error % | direct: predicted tok/s | error % |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    bool not_testable = false;  // a group whose models do not differ: said in its row
    Table decode_tab{{"backend", "type", "threads", "model", "measured_tps", "sum_tps", "sum_err_pct", "direct_tps", "direct_err_pct"}, {}};
    for (const auto& [key, ms] : runs) {
        const auto& [backend, type, threads] = key;
        if (ms.size() < 4) continue;  // three to fit a line on, one to check it
        // Lines in layers and in weight bytes need models that differ in them (the cards'
        // tiny variants do not: one shape for all).
        std::set<int> layers;
        std::set<double> weight_mb;
        for (const auto& m : ms) layers.insert(m.layers), weight_mb.insert(m.weight_mb);
        if (layers.size() < 2 || weight_mb.size() < 2) {
            not_testable = true;
            md << "| " << type << " | " << threads << " | " << ms.size()
               << " models | not testable here: they have the same number of layers and weight bytes"
               << (scale == ModelCard::Scale::Tiny ? " (the cards' tiny variants)" : "") << " | | | | |\n";
            continue;
        }
        const GroupKey gk{backend, type, threads, perf::batch_class(1)};
        if (!groups.count(gk)) continue;
        const nlohmann::json* entry = full.matmul_entry(backend, type, threads, 1);
        if (!entry) continue;
        const std::string use = entry->value("use", "linear");
        // The rest of a token's time, given a MatMul model (fit) and the models to fit it on.
        auto matmul_ms = [&](const nlohmann::json& e, const Measured& m) {
            double us = 0;
            for (const auto& s : m.shapes) us += perf::Models::evaluate(e, use, s.m, 1, s.k, 1) * s.per_token;
            return us / 1e3;
        };
        const HeldOut h = leave_one_out(c, key, ms, groups.at(gk), *entry, matmul_ms, decode_tab);
        const auto& sum_err = h.sum_err;
        const auto& direct_err = h.direct_err;
        const auto& per_model = h.per_model;
        // Exported: the rest fitted on every model with the full MatMul model.
        std::vector<std::pair<double, double>> rest;
        for (const auto& o : ms) rest.push_back({double(o.layers), o.ms - matmul_ms(*entry, o)});
        const LinearFit r = line(rest);
        out["decode"].push_back({{"backend", backend},
                                 {"type", type},
                                 {"threads", threads},
                                 {"method", "sum of the card's weight MatMuls (matmul model, batch n=1) + other_ms"},
                                 {"other_ms", {{"intercept", r.coef[0]}, {"per_layer", r.coef[1]}, {"r2", r.r2}}},
                                 {"heldout", {{"method", "leave-one-model-out"},
                                              {"mape_pct", mean(sum_err)},
                                              {"direct_mape_pct", mean(direct_err)},
                                              {"per_model", per_model}}}});
        md << "| " << type << " | " << threads << " | **mean** | | | **" << format_double(mean(sum_err), "%.1f") << "** | | **" << format_double(mean(direct_err), "%.1f")
           << "** |\n";
    }

    if (out["decode"].empty() && !not_testable)
        md << "| – | – | no decode model: it needs four dense models with a card at one thread count (three to fit, one "
              "to check) | | | | | |\n";
    return decode_tab;
}

}  // namespace profinfer::fit
