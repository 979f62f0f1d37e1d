#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "profinfer/error.h"

namespace profinfer {

perf::Models::DecodeRoofs decode_roofs_of(const MachineRoof& r, const std::string& type) {
    auto k = r.kernels.find(type);
    if (k == r.kernels.end()) return {r.triad_gbs, r.peak_for(fit::compute_kind_of(type)), 0, 0, 0};
    return {r.triad_gbs,           r.peak_for(fit::compute_kind_of(type)), k->second.stream_gbs,       k->second.stream_gbs_lo,
            k->second.stream_gbs_hi, k->second.stream_mid_gbs,         k->second.stream_small_gbs};
}

namespace fit {

// Decode speed in the machine's terms, so that it travels. Where bench-machine timed llama.cpp's own
// decode MatMul kernel for the weight type (ggml_kernel_roof) at every thread count, time per token =
//   a · (weight bytes a token streams) / (the rate the kernel streams them at)  +  c · layers + d;
// else, in the synthetic roofs: time per token =
//   a · (weight bytes a token streams) / triad  +  b · (its MatMul operations) / peak
//   + c · layers + d,
// the bytes and operations from the card (what belongs to the model), the triad bandwidth and
// the peak of the weight type's arithmetic at the thread count from machine.json (what belongs
// to the machine: bench-machine measures it on any machine in a minute). a and b are how far
// llama.cpp's kernels stay from the roofs, c and d the per-layer and per-token work besides.
// Fitted by nonnegative least squares for relative error over every model and thread count of
// the decode-speed study (warm, untraced): the thread counts are what tells bandwidth from
// arithmetic apart (bytes and operations grow together across the models of one type; triad
// and peak do not grow together with threads). Checked leaving one model out and leaving one
// thread count out; the interval a prediction carries is from the held-out models' errors.

namespace {

const std::vector<std::string> kRoofTerms = {"stream", "ops", "per_layer_ms", "per_token_ms"};
const std::vector<std::string> kKernelTerms = {"kernel_stream", "per_layer_ms", "per_token_ms"};

struct Speed {
    std::string model;
    int threads = 0;
    double ms = 0;              // measured decode time per token (median over the rounds)
    double weight_mb = 0;       // the weight MB a token streams
    std::vector<double> terms;  // Models::decode_terms on the fitting machine
};

LinearFit fit_on(const std::vector<const Speed*>& pts, const std::vector<std::string>& names) {
    Eigen::MatrixXd X(Eigen::Index(pts.size()), Eigen::Index(names.size()));
    Eigen::VectorXd y(Eigen::Index(pts.size())), w(Eigen::Index(pts.size()));
    for (size_t i = 0; i < pts.size(); ++i) {
        for (size_t j = 0; j < names.size(); ++j) X(Eigen::Index(i), Eigen::Index(j)) = pts[i]->terms[j];
        y[Eigen::Index(i)] = pts[i]->ms, w[Eigen::Index(i)] = 1 / (pts[i]->ms * pts[i]->ms);
    }
    return nonnegative_least_squares(X, y, names, w);
}

// Whether PTS tell every term apart (the design's rank): in the synthetic roofs, the models of
// one weight type at one thread count do not — their bytes and operations stand in one ratio.
bool identifiable(const std::vector<const Speed*>& pts, size_t n_terms) {
    Eigen::MatrixXd X(Eigen::Index(pts.size()), Eigen::Index(n_terms));
    for (size_t i = 0; i < pts.size(); ++i)
        for (size_t j = 0; j < n_terms; ++j) X(Eigen::Index(i), Eigen::Index(j)) = pts[i]->terms[j] / pts[i]->ms;
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(X);
    qr.setThreshold(1e-9);
    return qr.rank() == Eigen::Index(n_terms);
}

double predict(const LinearFit& f, const Speed& s) {
    double ms = 0;
    for (size_t j = 0; j < s.terms.size(); ++j) ms += f.coef[Eigen::Index(j)] * s.terms[j];
    return ms;
}

double mean_of(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? NAN : s / double(v.size());
}

}  // namespace


Table fit_decode_roofs(FitContext& c) {
    auto& md = c.md;
    auto& out = c.out;
    const fs::path study = c.results_dir / "decode-speed";
    Table tab{{"backend", "type", "check", "threads", "model", "measured_tps", "predicted_tps", "lo_tps", "hi_tps", "err_pct"}, {}};
    out["decode_roofs"] = nlohmann::json::array();
    md << "\n### Decode speed in the machine's terms (leave-one-model-out, leave-one-thread-count-out)\n\n";
    if (!fs::exists(study / "points.csv")) {
        md << "Not fitted: " << c.results_dir.string()
           << " has no decode-speed study (experiments/specs/decode-speed.toml: warm, untraced decode speeds).\n";
        return tab;
    }
    // The roofs of the machine that ran the points: the study's own machine.json where it has
    // one (bench-machine run beside it), else the results directory's.
    std::optional<MachineBench> own;
    if (fs::exists(study / "machine.json")) own = MachineBench::load(study / "machine.json");
    if (!own && !c.machine) {
        md << "Not fitted: no machine.json beside the studies (profinfer bench-machine): the model is in the machine's roofs.\n";
        return tab;
    }
    MachineBench machine = own ? *own : *c.machine;
    const Table speeds = read_table(study / "points.csv");
    // The kernel's rate measured in the study's own rounds (program kernel-roof), beside the
    // decode runs it explains, replaces bench-machine's single reading: a shared machine's
    // memory bandwidth drifts between a bench-machine run and a study (here 14.6-19.4 GB/s at 1
    // thread within an hour).
    int kernel_rows = 0;
    const auto has = [&](const char* col) { return std::find(speeds.columns.begin(), speeds.columns.end(), col) != speeds.columns.end(); };
    if (has("program") && has("kernel_stream_gbs"))
        for (const auto& r : speeds.rows) {
            const auto& v = r[speeds.column("kernel_stream_gbs")];
            if (text(r[speeds.column("program")]) != "kernel-roof" || !v.is_number()) continue;
            const int th = std::stoi(text(r[speeds.column("threads")]));
            for (auto& roof : machine.roofs)
                if (roof.threads == th) {
                    auto num = [&](const char* col) { const auto& x = r[speeds.column(col)]; return x.is_number() ? x.get<double>() : 0.0; };
                    KernelRoof& k = roof.kernels[text(r[speeds.column("type")])];
                    k.stream_gbs = v.get<double>(), k.stream_gbs_lo = num("kernel_stream_gbs_lo"), k.stream_gbs_hi = num("kernel_stream_gbs_hi");
                    if (has("kernel_cache_gops")) k.cache_gops = num("kernel_cache_gops");
                    if (has("kernel_stream_mid_gbs")) k.stream_mid_gbs = num("kernel_stream_mid_gbs");
                    if (has("kernel_stream_small_gbs")) k.stream_small_gbs = num("kernel_stream_small_gbs");
                    ++kernel_rows;
                }
        }
    if (kernel_rows > 0) machine.kernels = "the decode-speed study's own rounds (program kernel-roof, ggml_kernel_roof)";
    const ModelCard::Scale scale = study_scale(study);
    std::map<std::pair<std::string, std::string>, std::vector<Speed>> groups;  // backend, type
    std::map<std::pair<std::string, std::string>, std::vector<ModelCard>> cards;
    for (const auto& r : speeds.rows) {
        const auto& tps = r[speeds.column("bench_tg_tps")];  // llama-bench's own tg speed (untraced)
        if (!tps.is_number() || !(tps.get<double>() > 0)) continue;
        const std::string model = text(r[speeds.column("model")]), type = text(r[speeds.column("type")]);
        ModelCard card;
        try {
            card = ModelCard::load(model, scale);
        } catch (const Error&) {
            continue;  // no card: not predictable from hyperparameters
        }
        if (card.experts > 0) continue;
        const int threads = std::stoi(text(r[speeds.column("threads")]));
        const MachineRoof& roof = machine.at(threads);
        if (roof.threads != threads) continue;  // the machine was not measured at this count
        const std::pair<std::string, std::string> key{text(r[speeds.column("backend")]), type};
        groups[key].push_back({model, threads, 1000 / tps.get<double>(),
                               perf::Models::decode_weight_bytes(card_matmuls(card), bytes_per_elem(type)) / 1e6, {}});
        cards[key].push_back(card);
    }
    md << "With llama.cpp's own decode MatMul kernel timed for the type at every thread count (bench-machine's kernel roofs, "
          "ggml_kernel_roof): time per token = a · (weight bytes a token streams) / (the kernel's streaming rate) + c · layers + d. "
          "Otherwise, in the synthetic roofs: time per token = a · (weight bytes a token streams) / triad + b · (MatMul operations) / "
          "peak + c · layers + d. Bytes and operations from the card, the roofs at the thread count from "
       << (own ? "decode-speed/machine.json" : "machine.json") << " (" << machine.cpu << ")"
       << (kernel_rows > 0 ? ", the kernel's streaming rate from the study's own rounds (program kernel-roof: median over them)" : "")
       << "; nonnegative least squares for relative error on the decode-speed study "
          "(warm, untraced, median over its rounds). Held out: each model (fitted on the others at every thread count), "
          "each thread count (fitted on the others' points: it checks the machine terms carry the thread count). "
          "Interval: × exp(±t·s), s the held-out models' log errors.\n\n"
       << "| type | terms | coefficients | points | held out | threads | mean error % | max error % | "
          "inside interval |\n|---|---|---|---|---|---|---|---|---|\n";
    for (auto& [key, pts] : groups) {
        const auto& [backend, type] = key;
        bool kernel = true;  // every point's thread count has the kernel roof for the type
        for (const auto& p : pts) kernel = kernel && decode_roofs_of(machine.at(p.threads), type).kernel_stream_gbs > 0;
        const std::vector<std::string>& names = kernel ? kKernelTerms : kRoofTerms;
        for (size_t i = 0; i < pts.size(); ++i) {
            const ModelCard& card = cards[key][i];
            pts[i].terms = *perf::Models::decode_terms(card_matmuls(card), int(card.layers), bytes_per_elem(type), names,
                                                       decode_roofs_of(machine.at(pts[i].threads), type));
        }
        std::string coefs, terms;
        auto f_text = [&](const LinearFit& f) {
            coefs.clear(), terms.clear();
            for (size_t j = 0; j < names.size(); ++j) {
                coefs += (j ? ", " : "") + format_double(f.coef[Eigen::Index(j)]);
                terms += (j ? ", " : "") + names[j];
            }
        };
        std::set<std::string> models;
        std::set<int> threads;
        for (const auto& p : pts) models.insert(p.model), threads.insert(p.threads);
        if (models.size() < 4) {
            md << "| " << type << " | not fitted: " << models.size()
               << " models (four or more: three to fit, one to check) | | | | | | | |\n";
            continue;
        }
        std::vector<const Speed*> all;
        for (const auto& p : pts) all.push_back(&p);
        const LinearFit f = fit_on(all, names);
        f_text(f);
        // Leave one model out: its every thread count predicted by a fit on the other models.
        std::vector<double> log_err;
        std::vector<std::tuple<const Speed*, double>> lomo;
        for (const auto& m : models) {
            std::vector<const Speed*> train;
            for (const auto& p : pts)
                if (p.model != m) train.push_back(&p);
            const LinearFit g = fit_on(train, names);
            for (const auto& p : pts)
                if (p.model == m) {
                    const double ms = predict(g, p);
                    lomo.push_back({&p, ms});
                    if (ms > 0) log_err.push_back(std::log(ms / p.ms));
                }
        }
        double ss = 0;
        for (double e : log_err) ss += e * e;
        size_t active = 0;
        for (Eigen::Index j = 0; j < f.coef.size(); ++j) active += f.coef[j] > 0;
        const double dof = std::max(1.0, double(pts.size()) - double(active));
        const double s = log_err.empty() ? NAN : std::sqrt(ss / double(log_err.size()));
        const double half = t_quantile_975(dof) * s;
        auto rows_of = [&](const std::string& check, const std::vector<std::tuple<const Speed*, double>>& preds) {
            std::map<int, std::vector<double>> errs;
            std::map<int, int> inside;
            for (const auto& [p, ms] : preds) {
                const double err = 100 * std::abs(ms - p->ms) / p->ms;
                errs[p->threads].push_back(err);
                const double lo = ms * std::exp(-half), hi = ms * std::exp(half);
                inside[p->threads] += p->ms >= lo && p->ms <= hi;
                tab.rows.push_back({backend, type, check, p->threads, p->model, 1000 / p->ms, ms > 0 ? nlohmann::json(1000 / ms) : nlohmann::json(nullptr),
                                    ms > 0 ? nlohmann::json(1000 / hi) : nlohmann::json(nullptr),
                                    ms > 0 ? nlohmann::json(1000 / lo) : nlohmann::json(nullptr), err});
            }
            nlohmann::json j = nlohmann::json::object();
            for (const auto& [th, e] : errs) {
                md << "| " << type << " | " << terms << " | " << coefs << " | " << pts.size() << " | " << check
                   << " | " << th << " | " << format_double(mean_of(e), "%.1f") << " | "
                   << format_double(*std::max_element(e.begin(), e.end()), "%.1f") << " | " << inside[th] << " of " << e.size()
                   << " |\n";
                j[std::to_string(th)] = {{"mean_abs_err_pct", mean_of(e)},
                                         {"max_abs_err_pct", *std::max_element(e.begin(), e.end())},
                                         {"inside_interval", inside[th]},
                                         {"n", e.size()}};
            }
            return j;
        };
        const nlohmann::json lomo_j = rows_of("each model", lomo);
        // Leave one thread count out: the machine terms must carry what threads change.
        nlohmann::json lotc_j = nlohmann::json::object();
        if (threads.size() > 1) {
            std::vector<std::tuple<const Speed*, double>> lotc;
            for (int th : threads) {
                std::vector<const Speed*> train;
                for (const auto& p : pts)
                    if (p.threads != th) train.push_back(&p);
                if (!identifiable(train, names.size())) {
                    const std::string why = "the other thread counts' points cannot tell the weight stream from the arithmetic "
                                            "(one weight type at one thread count: bytes and operations grow in one ratio)";
                    md << "| " << type << " | | | | each thread count | " << th << " | not testable: " << why << " | | |\n";
                    lotc_j[std::to_string(th)] = {{"not_testable", why}};
                    continue;
                }
                const LinearFit g = fit_on(train, names);
                for (const auto& p : pts)
                    if (p.threads == th) lotc.push_back({&p, predict(g, p)});
            }
            if (!lotc.empty()) lotc_j.update(rows_of("each thread count", lotc));
        }
        nlohmann::json roofs = nlohmann::json::array();
        for (int th : threads) {
            roofs.push_back(nlohmann::json{{"threads", th}});
            roofs.back().update(decode_roofs_of(machine.at(th), type).to_json(kernel));
        }
        double lo_mb = INFINITY, hi_mb = 0;
        for (const auto& p : pts) lo_mb = std::min(lo_mb, p.weight_mb), hi_mb = std::max(hi_mb, p.weight_mb);
        out["decode_roofs"].push_back(
            {{"backend", backend},
             {"type", type},
             {"method", kernel ? "ms per token = coef · [weight bytes / (llama.cpp's decode MatMul kernel's streaming GB/s · 1e6), layers, 1]; "
                                 "nonnegative least squares for relative error (decode-speed study)"
                               : "ms per token = coef · [weight bytes / (triad GB/s · 1e6), MatMul ops / (peak Gops/s · 1e6), layers, 1]; "
                                 "nonnegative least squares for relative error (decode-speed study)"},
             {"terms", names},
             {"coef", std::vector<double>(f.coef.data(), f.coef.data() + f.coef.size())},
             {"weight_bytes_per_elem", bytes_per_elem(type)},
             {"compute_kind", compute_kind_of(type)},
             {"log_half_width", half},
             {"heldout_log_sd", s},
             {"dof", dof},
             {"fitted_on", {{"cpu", machine.cpu}, {"isa", machine.isa}, {"kernels", machine.kernels}, {"roofs", roofs}}},
             {"range", {{"weight_mb", {lo_mb, hi_mb}}, {"threads", std::vector<int>(threads.begin(), threads.end())}}},
             {"heldout", {{"each_model", lomo_j}, {"each_thread_count", lotc_j}}}});
    }
    if (out["decode_roofs"].empty() && groups.empty())
        md << "Not fitted: the decode-speed study has no dense model with a card.\n";
    return tab;
}

}  // namespace fit
}  // namespace profinfer
