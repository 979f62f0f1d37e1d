#include "profinfer/perf_models.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model_card.h"
#include "profinfer/error.h"
#include "profinfer/ggml_types.h"
#include "profinfer/machine_bench.h"
#include "profinfer/output_file.h"
#include "profinfer/plotter.h"
#include "profinfer/regression.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"

namespace fs = std::filesystem;

namespace profinfer {

std::vector<perf::MatMulShape> card_matmuls(const ModelCard& c) {
    if (c.experts > 0) throw Error(c.name + ": an MoE model; the decode model covers dense models only");
    const int64_t H = c.hidden, Q = int64_t(c.heads) * c.head_dim, KV = int64_t(c.kv_heads) * c.head_dim, F = c.ffn;
    const int L = int(c.layers);
    return {{"Qcur", Q, H, L},        {"Kcur", KV, H, L},     {"Vcur", KV, H, L},  {"attn_out", H, Q, L},
            {"ffn_gate", F, H, L},    {"ffn_up", F, H, L},    {"ffn_out", H, F, L}, {"result_output", int64_t(c.vocab), H, 1}};
}

LinearFit fit_matmul_line(const std::vector<double>& mnkh, const std::vector<double>& us) {
    const auto n = Eigen::Index(us.size());
    Eigen::MatrixXd X(n, 2);
    Eigen::VectorXd y(n), w(n);
    for (Eigen::Index i = 0; i < n; ++i)
        X(i, 0) = 1, X(i, 1) = mnkh[size_t(i)], y[i] = us[size_t(i)], w[i] = 1 / (us[size_t(i)] * us[size_t(i)]);
    return least_squares(X, y, {"intercept_us", "us_per_mnkh"}, w);
}

namespace {

Table read_table(const fs::path& f) {
    std::ifstream in(f);
    if (!in) throw Error("cannot read " + f.string() + ": run the study that writes it first (make reproduce)");
    return Table::from_csv(std::string(std::istreambuf_iterator<char>(in), {}));
}

std::string text(const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.is_number_integer() ? std::to_string(v.get<int64_t>()) : v.dump();
}

struct Point {
    std::string model;
    int64_t m = 0, n = 0, k = 0, h = 0;
    double us = 0;
};

// backend, type, threads, batch class
using GroupKey = std::tuple<std::string, std::string, int, std::string>;

double bytes_per_elem(const std::string& type) {
    const GgmlType* t = ggml_type(type);
    if (!t) throw Error("unknown ggml type '" + type + "'");
    return double(t->block_bytes) / double(t->block_elems);
}

std::string compute_kind_of(const std::string& type) {
    if (type == "f32" || type == "f16" || type == "bf16") return type;
    return "int8";  // quantised weights: int8 dot products on quantised activations
}

LinearFit fit_points(const std::vector<const Point*>& pts) {
    std::vector<double> mnkh, us;
    for (const Point* p : pts) mnkh.push_back(double(p->m) * double(p->n) * double(p->k) * double(p->h)), us.push_back(p->us);
    return fit_matmul_line(mnkh, us);
}

nlohmann::json linear_json(const LinearFit& f) {
    return {{"intercept_us", f.coef[0]},
            {"us_per_mnkh", f.coef[1]},
            {"intercept_us_ci95", {f.ci_lo[0], f.ci_hi[0]}},
            {"us_per_mnkh_ci95", {f.ci_lo[1], f.ci_hi[1]}},
            {"r2", f.r2},
            {"points", f.n}};
}

struct ErrStats {
    size_t points = 0;
    double within_10pct = 0, median_abs_pct = 0, p90_abs_pct = 0;
};

ErrStats err_stats(std::vector<double> abs_pct) {
    ErrStats e;
    e.points = abs_pct.size();
    if (abs_pct.empty()) return e;
    std::sort(abs_pct.begin(), abs_pct.end());
    e.within_10pct = double(std::count_if(abs_pct.begin(), abs_pct.end(), [](double v) { return v <= 10.0; })) / double(abs_pct.size());
    e.median_abs_pct = abs_pct[abs_pct.size() / 2];
    e.p90_abs_pct = abs_pct[std::min(abs_pct.size() - 1, size_t(0.9 * double(abs_pct.size())))];
    return e;
}

nlohmann::json err_json(const ErrStats& e) {
    return {{"points", e.points}, {"within_10pct", e.within_10pct}, {"median_abs_err_pct", e.median_abs_pct},
            {"p90_abs_err_pct", e.p90_abs_pct}};
}

// The llama.cpp commit the sweep ran, from llama-bench's own output in the index.
std::string llama_commit(const fs::path& index) {
    if (!fs::exists(index)) return "unknown";
    sqlite3* h = nullptr;
    std::string commit = "unknown";
    if (sqlite3_open_v2(index.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        try {
            store::Statement st(h, "SELECT bench FROM points WHERE status = 'done' AND bench != '' LIMIT 1");
            if (st.step()) {
                const auto b = nlohmann::json::parse(st.column_text(0));
                if (b.is_array() && !b.empty()) commit = b[0].value("build_commit", commit);
            }
        } catch (const std::exception&) {
        }
    }
    sqlite3_close(h);
    return commit;
}

std::string fmt(double v, const char* f = "%.3g") {
    if (!std::isfinite(v)) return "–";
    char b[48];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

// A Vulkan MatMul model from the vulkan-offload study: per weight kind, the decode time a
// token gains when that weight's MatMuls run on the Vulkan device (llama.cpp -ot), plus
// their CPU time by the CPU model — the MatMul on the device with its activations' copies.
void fit_offload(const fs::path& results_dir, nlohmann::json& out, std::ostringstream& md) {
    const fs::path f = results_dir / "vulkan-offload" / "points.csv";
    if (!fs::exists(f)) return;
    const Table t = read_table(f);
    static const std::map<std::string, std::string> kShapeOf = {{"attn_q", "Qcur"},      {"attn_k", "Kcur"},
                                                                {"attn_v", "Vcur"},      {"attn_output", "attn_out"},
                                                                {"ffn_gate", "ffn_gate"}, {"ffn_up", "ffn_up"},
                                                                {"ffn_down", "ffn_out"}};
    struct Row {
        std::string weight;
        double ms = 0;
    };
    std::map<std::tuple<std::string, std::string, int>, std::pair<double, std::vector<Row>>> runs;  // model, type, threads
    for (const auto& r : t.rows) {
        const auto& tps = r[t.column("decode_tps")];
        if (!tps.is_number()) continue;
        auto& run = runs[{text(r[t.column("model")]), text(r[t.column("type")]), int(std::stoi(text(r[t.column("threads")])))}];
        const std::string ot = text(r[t.column("ot")]);
        if (ot == "none") {
            run.first = 1000 / tps.get<double>();
            continue;
        }
        // blk\.[0-9]+\.WEIGHT\.weight=Vulkan0 → WEIGHT
        const auto a = ot.find("]+\\."), b = ot.find("\\.weight=");
        if (a == std::string::npos || b == std::string::npos || b <= a + 4) continue;
        run.second.push_back({ot.substr(a + 4, b - a - 4), 1000 / tps.get<double>()});
    }
    const perf::Models cpu(out);
    md << "\n### Vulkan MatMul model (vulkan-offload study)\n\n"
       << "Per weight kind: the decode time a token gains with that weight on the Vulkan device (-ot, op offload off), "
          "plus the CPU model's time for the MatMuls it moved, per MatMul.\n\n"
       << "| model | threads | weight | m × k | decode tok/s | added ms/token | Vulkan µs per MatMul | CPU µs (model) | Vulkan / CPU |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& [key, run] : runs) {
        const auto& [model, type, threads] = key;
        if (run.first <= 0 || run.second.empty()) continue;
        const auto shapes = card_matmuls(ModelCard::load(model, ModelCard::Scale::Full));
        std::vector<double> mnkh, us;
        std::vector<std::string> names;
        for (const auto& r : run.second) {
            auto it = kShapeOf.find(r.weight);
            if (it == kShapeOf.end()) continue;
            auto s = std::find_if(shapes.begin(), shapes.end(), [&](const auto& x) { return x.name == it->second; });
            if (s == shapes.end()) continue;
            auto c = cpu.matmul_us("cpu", type, threads, s->m, 1, s->k);
            if (!c) continue;
            const double added = r.ms - run.first;
            const double vk = (added * 1e3 + *c * s->per_token) / s->per_token;
            mnkh.push_back(double(s->m) * double(s->k)), us.push_back(vk), names.push_back(r.weight);
            md << "| " << model << " | " << threads << " | " << r.weight << " | " << s->m << " × " << s->k << " | "
               << fmt(1000 / r.ms) << " | " << fmt(added) << " | " << fmt(vk) << " | " << fmt(*c) << " | " << fmt(vk / *c) << " |\n";
        }
        if (us.size() < 3) continue;
        nlohmann::json e{{"backend", "vulkan"}, {"type", type}, {"threads", threads}, {"batch", "n=1"}, {"use", "linear"},
                         {"models", {model}},
                         {"measured_as", "decode time a token gains with one weight kind on the Vulkan device (llama.cpp "
                                         "-ot, op offload off) plus the CPU model's time for its MatMuls: the device "
                                         "MatMul with its activations' copies (vulkan-offload/points.csv)"}};
        try {
            e["linear"] = linear_json(fit_matmul_line(mnkh, us));
        } catch (const Error&) {
            continue;  // one distinct shape
        }
        const auto [lo, hi] = std::minmax_element(mnkh.begin(), mnkh.end());
        e["valid"] = {{"mnkh", {*lo, *hi}}, {"n", {1, 1}}};
        // Held out: each kind predicted from the others' line.
        std::vector<double> err;
        for (size_t i = 0; i < us.size(); ++i) {
            std::vector<double> x, y;
            for (size_t j = 0; j < us.size(); ++j)
                if (mnkh[j] != mnkh[i]) x.push_back(mnkh[j]), y.push_back(us[j]);
            try {
                const LinearFit f = fit_matmul_line(x, y);
                err.push_back(100 * std::abs(f.coef[0] + f.coef[1] * mnkh[i] - us[i]) / us[i]);
            } catch (const Error&) {
            }
        }
        e["heldout"] = {{"method", "leave-one-shape-out"}, {"linear", err_json(err_stats(err))}};
        out["matmul"].push_back(e);
    }
}

}  // namespace

FitResult fit_models(const fs::path& results_dir, const fs::path& out_dir) {
    const fs::path study = results_dir / "matmul-dims";
    const Table mm = read_table(study / "matmuls.csv");
    std::map<GroupKey, std::vector<Point>> groups;
    for (const auto& r : mm.rows) {
        const int64_t n = r[mm.column("n")].get<int64_t>();
        if (n == 1 && r[mm.column("phase")] == "prefill") continue;  // decode shapes again, on a call or two
        const std::string type = text(r[mm.column("type")]), backend = text(r[mm.column("backend")]);
        const int threads = int(r[mm.column("threads")].get<int64_t>());
        Point p{text(r[mm.column("model")]), r[mm.column("m")].get<int64_t>(), n, r[mm.column("k")].get<int64_t>(),
                r[mm.column("h")].get<int64_t>(), r[mm.column("median_us")].get<double>()};
        groups[{backend, type, threads, n == 1 ? "n=1" : "n>1"}].push_back(p);
    }
    std::optional<MachineBench> machine;
    if (fs::exists(results_dir / "machine.json")) machine = MachineBench::load(results_dir / "machine.json");

    nlohmann::json out;
    out["schema"] = perf::kSchema;
    out["version"] = perf::kSchemaVersion;
    {
        const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        char b[32];
        std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        out["created_utc"] = b;
    }
    out["board"] = results_dir.filename().string();
    out["llama_cpp_commit"] = llama_commit(study / "index.db");
    out["source"] = "matmul-dims/matmuls.csv (median time per weight-MatMul shape), matmul-dims/points.csv (decode speed)";
    out["units"] = {{"time", "microseconds per call (matmul), milliseconds per token (decode)"},
                    {"mnkh", "M*N*K*H: multiply-adds of the MatMul"},
                    {"m", "output features"}, {"n", "tokens in the batch"}, {"k", "input features"}, {"h", "remaining dims"}};
    if (machine) out["machine"] = {{"cpu", machine->cpu}};
    out["matmul"] = nlohmann::json::array();

    std::ostringstream md;
    md << "### Weight-MatMul time (leave-one-model-out)\n\n"
       << "Each model's shapes predicted by a fit on the other models' (linear: time = a + b·M·N·K·H, for relative "
          "error) and by the roofline on this machine's measured roofs (max(2·MNKH / peak, bytes / triad bandwidth)). "
          "`use` is the one models.json applies.\n\n"
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
           << all.size() << " | " << (le.points ? fmt(100 * le.within_10pct, "%.0f %%") : "–") << " | "
           << (le.points ? fmt(le.median_abs_pct, "%.1f") : "–") << " | "
           << (re.points ? fmt(100 * re.within_10pct, "%.0f %%") : "–") << " | " << (re.points ? fmt(re.median_abs_pct, "%.1f") : "–")
           << " | " << e["use"].get<std::string>() << " |\n";
        out["matmul"].push_back(e);
    }
    if (out["matmul"].empty()) throw Error(study.string() + "/matmuls.csv: no group with three shapes or more to fit");
    fit_offload(results_dir, out, md);
    const perf::Models full(out);

    // Decode time per token from hyperparameters: the card's weight MatMuls by the MatMul
    // model plus the rest (attention, norms, activations, graph overhead) as a line in the
    // number of layers — against a direct line in the weight bytes a token streams.
    const Table speeds = read_table(study / "points.csv");  // every parameter of every point
    struct Measured {
        std::string model;
        int layers = 0;
        double ms = 0, weight_mb = 0;
        std::vector<perf::MatMulShape> shapes;
    };
    std::map<std::tuple<std::string, std::string, int>, std::vector<Measured>> runs;  // backend, type, threads
    for (const auto& r : speeds.rows) {
        const std::string model = text(r[speeds.column("model")]), type = text(r[speeds.column("type")]);
        const int threads = std::stoi(text(r[speeds.column("threads")]));
        const auto& tps = r[speeds.column("decode_tps")];
        if (!tps.is_number()) continue;
        ModelCard card;
        try {
            card = ModelCard::load(model, ModelCard::Scale::Full);
        } catch (const Error&) {
            continue;  // no card: cannot be predicted from hyperparameters
        }
        if (card.experts > 0) continue;
        Measured m{model, int(card.layers), 1000.0 / tps.get<double>(), 0, card_matmuls(card)};
        for (const auto& s : m.shapes) m.weight_mb += double(s.m) * double(s.k) * bytes_per_elem(type) * s.per_token / 1e6;
        runs[{text(r[speeds.column("backend")]), type, threads}].push_back(m);
    }
    out["decode"] = nlohmann::json::array();
    md << "\n### Decode time per token from hyperparameters (leave-one-model-out)\n\n"
       << "sum: the card's weight MatMuls by the MatMul model fitted without the model, plus the rest as a + b·layers "
          "fitted on the other models; direct: time = a + b·(weight MB a token streams) on the other models. "
          "Measured: median decode call of the matmul-dims point (recorded at --level op).\n\n"
       << "| type | threads | model | measured tok/s | sum: predicted tok/s | error % | direct: predicted tok/s | error % |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    Table decode_tab{{"backend", "type", "threads", "model", "measured_tps", "sum_tps", "sum_err_pct", "direct_tps", "direct_err_pct"}, {}};
    for (const auto& [key, ms] : runs) {
        const auto& [backend, type, threads] = key;
        if (ms.size() < 4) continue;  // three to fit a line on, one to check it
        const GroupKey gk{backend, type, threads, "n=1"};
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
        auto line = [](const std::vector<std::pair<double, double>>& xy) {
            Eigen::MatrixXd X(Eigen::Index(xy.size()), 2);
            Eigen::VectorXd y(Eigen::Index(xy.size()));
            for (size_t i = 0; i < xy.size(); ++i) X(Eigen::Index(i), 0) = 1, X(Eigen::Index(i), 1) = xy[i].first, y[Eigen::Index(i)] = xy[i].second;
            return least_squares(X, y, {"intercept", "slope"});
        };
        std::vector<double> sum_err, direct_err;
        nlohmann::json per_model = nlohmann::json::array();
        for (const auto& held : ms) {
            std::vector<const Point*> train;
            for (const auto& p : groups.at(gk))
                if (p.model != held.model) train.push_back(&p);
            nlohmann::json fold = *entry;
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
                md << "| " << type << " | " << threads << " | " << held.model << " | " << fmt(1000 / held.ms) << " | " << fmt(1000 / sum_ms) << " | "
                   << fmt(se, "%.1f") << " | " << fmt(1000 / direct_ms) << " | " << fmt(de, "%.1f") << " |\n";
            } catch (const Error&) {
                continue;
            }
        }
        // Exported: the rest fitted on every model with the full MatMul model.
        std::vector<std::pair<double, double>> rest;
        for (const auto& o : ms) rest.push_back({double(o.layers), o.ms - matmul_ms(*entry, o)});
        const LinearFit r = line(rest);
        auto mean = [](const std::vector<double>& v) {
            double s = 0;
            for (double x : v) s += x;
            return v.empty() ? NAN : s / double(v.size());
        };
        out["decode"].push_back({{"backend", backend},
                                 {"type", type},
                                 {"threads", threads},
                                 {"method", "sum of the card's weight MatMuls (matmul model, batch n=1) + other_ms"},
                                 {"other_ms", {{"intercept", r.coef[0]}, {"per_layer", r.coef[1]}, {"r2", r.r2}}},
                                 {"heldout", {{"method", "leave-one-model-out"},
                                              {"mape_pct", mean(sum_err)},
                                              {"direct_mape_pct", mean(direct_err)},
                                              {"per_model", per_model}}}});
        md << "| " << type << " | " << threads << " | **mean** | | | **" << fmt(mean(sum_err), "%.1f") << "** | | **" << fmt(mean(direct_err), "%.1f")
           << "** |\n";
    }

    if (out["decode"].empty())
        md << "| – | – | no decode model: it needs four dense models with a card at one thread count (three to fit, one "
              "to check) | | | | | |\n";
    // Context: what each token of KV cache adds to a decode step (the across-tokens study),
    // per query-head dimension and layer so that it carries over to another card.
    out["attention"] = nlohmann::json::array();
    if (fs::exists(results_dir / "across-tokens" / "points.csv")) {
        const Table at = read_table(results_dir / "across-tokens" / "points.csv");
        std::map<std::tuple<std::string, std::string, std::string, int, std::string>, std::vector<std::pair<double, double>>> by;
        for (const auto& r : at.rows)
            if (r[at.column("decode_tps")].is_number())
                by[{text(r[at.column("model")]), text(r[at.column("backend")]), text(r[at.column("type")]),
                    std::stoi(text(r[at.column("threads")])), text(r[at.column("fa")])}]
                    .push_back({std::stod(text(r[at.column("ctx")])), 1000 / r[at.column("decode_tps")].get<double>()});
        md << "\n### Context (across-tokens study)\n\n"
           << "Decode ms per token = a + b·ctx per flash-attention setting; b per layer and query-head dimension "
              "(layers × heads × head_dim) is what `predict --ctx` adds for another card. One model: not checked across models.\n\n"
           << "| model | fa | ctx points | ms/token at 0 | ms per 1k ctx | R² | µs per ctx per 1k head-dims·layers |\n|---|---|---|---|---|---|---|\n";
        for (const auto& [key, xy] : by) {
            const auto& [model, backend, type, threads, fa] = key;
            if (xy.size() < 3) continue;
            ModelCard card;
            try {
                card = ModelCard::load(model, ModelCard::Scale::Full);
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
            md << "| " << model << " | " << fa << " | " << xy.size() << " | " << fmt(f.coef[0]) << " | " << fmt(f.coef[1] * 1e3)
               << " | " << fmt(f.r2, "%.3f") << " | " << fmt(f.coef[1] / dims * 1e6, "%.4g") << " |\n";
        }
    }

    // Paper Fig. 13: expert reuse distance against the MoE operator's time (ffn_moe_up, every
    // layer, decode calls), per point of the moe-experts study (with and without a memory
    // limit), and the major page faults the operator took against its time.
    md << "\n### MoE: expert reuse distance and major faults vs operator time (Fig. 13)\n\n";
    out["moe"] = nlohmann::json::array();
    const fs::path moe = results_dir / "moe-experts";
    if (fs::exists(moe / "points.csv")) {
        md << "ffn_moe_up, every layer, steady-state decode calls (every expert of the call used before: the cold "
              "calls, in which some expert ran for the first time, are counted apart); Pearson r with its 95 % interval "
              "(Fisher z).\n\n"
           << "| point | type | memory limit | pairs | cold calls apart | r (reuse distance, time) | major faults on MoE "
              "MatMuls | r (major faults, time) |\n"
           << "|---|---|---|---|---|---|---|---|\n";
        const Table pts = read_table(moe / "points.csv");
        for (const auto& p : pts.rows) {
            const std::string id = text(p[pts.column("id")]);
            const fs::path f = moe / "points" / (id + "-stat-expert-call.csv");
            if (!fs::exists(f)) continue;
            const Table t = read_table(f);
            std::vector<double> dist, time_us, fault_t, faults;
            double all_faults = 0;
            int cold = 0;
            bool have_faults = std::find(t.columns.begin(), t.columns.end(), "major_faults") != t.columns.end();
            for (const auto& r : t.rows) {
                const bool decode_up = r[t.column("node")] == "ffn_moe_up" && r[t.column("phase")] == "decode";
                const bool up = decode_up && r[t.column("first_uses")].is_number() && r[t.column("first_uses")].get<double>() == 0;
                cold += decode_up && !up;
                if (have_faults && r[t.column("major_faults")].is_number()) {
                    const double mf = r[t.column("major_faults")].get<double>();
                    all_faults += mf;
                    if (up) faults.push_back(mf), fault_t.push_back(r[t.column("time_us")].get<double>());
                }
                if (up && r[t.column("mean_reuse_distance")].is_number())
                    dist.push_back(r[t.column("mean_reuse_distance")].get<double>()),
                        time_us.push_back(r[t.column("time_us")].get<double>());
            }
            nlohmann::json e{{"point", id}, {"type", text(p[pts.column("type")])}, {"memory_limit", text(p[pts.column("mem")])},
                             {"node", "ffn_moe_up"}, {"cold_calls", cold}};
            auto corr = [&](const std::vector<double>& x, const std::vector<double>& y, const char* key) -> std::string {
                try {
                    const Correlation c = pearson(x, y);
                    e[key] = {{"pairs", c.n}, {"pearson_r", c.r}, {"r_ci95", {c.lo, c.hi}}};
                    return fmt(c.r) + " [" + fmt(c.lo) + ", " + fmt(c.hi) + "]";
                } catch (const Error&) {
                    return "–";
                }
            };
            const std::string rd = corr(dist, time_us, "reuse_distance_vs_time");
            const std::string rf = have_faults ? corr(faults, fault_t, "major_faults_vs_time") : "–";
            if (have_faults) e["major_faults_moe_nodes"] = all_faults;
            out["moe"].push_back(e);
            md << "| " << id << " | " << e["type"].get<std::string>() << " | " << e["memory_limit"].get<std::string>() << " | "
               << dist.size() << " | " << cold << " | " << rd << " | " << (have_faults ? fmt(all_faults, "%.0f") : "–") << " | " << rf << " |\n";
        }
    } else {
        md << "No moe-experts study in " << results_dir.string() << ".\n";
    }
    FitResult res;
    fs::create_directories(out_dir);
    OutputFile::write(out_dir / "matmul-heldout.csv", heldout.to_csv());
    OutputFile::write(out_dir / "decode-heldout.csv", decode_tab.to_csv());
    res.written = {out_dir / "matmul-heldout.csv", out_dir / "decode-heldout.csv"};
    // Predicted against measured, held-out MatMuls: one figure per thread count.
    Plotter plot(out_dir);
    std::set<int64_t> thread_counts;
    for (const auto& r : heldout.rows) thread_counts.insert(r[2].get<int64_t>());
    for (int64_t th : thread_counts) {
        std::map<std::string, std::vector<std::pair<double, double>>> s;
        double lo = INFINITY, hi = 0;
        for (const auto& r : heldout.rows) {
            if (r[2].get<int64_t>() != th) continue;
            const double meas = r[9].get<double>();
            lo = std::min(lo, meas), hi = std::max(hi, meas);
            s["linear, " + r[3].get<std::string>()].push_back({meas, r[10].get<double>()});
            if (r[11].is_number()) s["roofline, " + r[3].get<std::string>()].push_back({meas, r[11].get<double>()});
        }
        auto f = plot.draw("matmul-heldout-t" + std::to_string(th),
                           "Held-out weight MatMuls, predicted vs measured (" + std::to_string(th) + " threads)", [&](Gnuplot& gp) {
                               gp << "set logscale xy\nset xlabel 'measured (us)'\nset ylabel 'predicted (us)'\nset format x '1e%L'\n"
                                     "set format y '1e%L'\n";
                               std::string cmd = "plot ";
                               int i = 0;
                               for (const auto& [name, pts] : s)
                                   cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with points pt 7 ps 0.7 title " + gnuplot_quote(name);
                               cmd += ", '-' using 1:2 with lines lc rgb 'black' title 'exact', '-' using 1:2 with lines dt 2 lc rgb "
                                      "'gray' title '+/-10 %', '-' using 1:2 with lines dt 2 lc rgb 'gray' notitle";
                               gp << cmd << "\n";
                               for (const auto& [name, pts] : s) gp.send1d(pts);
                               for (double f : {1.0, 1.1, 0.9}) gp.send1d(std::vector<std::pair<double, double>>{{lo, lo * f}, {hi, hi * f}});
                           });
        res.written.push_back(f.png), res.written.push_back(f.svg);
    }
    if (!decode_tab.rows.empty()) {
        auto f = plot.draw("decode-heldout", "Decode speed, measured vs predicted for held-out models", [&](Gnuplot& gp) {
            gp << "set xlabel 'measured (tokens/s)'\nset ylabel 'predicted (tokens/s)'\nset logscale xy\n";
            std::map<std::string, std::vector<std::tuple<double, double, std::string>>> s;
            double lo = INFINITY, hi = 0;
            for (const auto& r : decode_tab.rows) {
                const double meas = r[4].get<double>();
                lo = std::min(lo, meas), hi = std::max(hi, meas);
                const std::string group = r[1].get<std::string>() + ", " + std::to_string(r[2].get<int64_t>()) + " threads";
                s["sum of operators, " + group].push_back({meas, r[5].get<double>(), r[3].get<std::string>()});
                s["direct, " + group].push_back({meas, r[7].get<double>(), ""});
            }
            std::string cmd = "plot ";
            int i = 0;
            for (const auto& [name, pts] : s)  // the model names beside the sum-of-operators points
                cmd += std::string(i++ ? ", " : "") + "'-' using 1:2 with points pt 7 title " + gnuplot_quote(name) +
                       (std::get<2>(pts.front()).empty() ? "" : ", '-' using 1:2:3 with labels offset 0.5,0.5 left font ',7' notitle");
            cmd += ", '-' using 1:2 with lines lc rgb 'black' title 'exact'";
            gp << cmd << "\n";
            for (const auto& [name, pts] : s) {
                std::vector<std::pair<double, double>> xy;
                for (const auto& [x, y, l] : pts) xy.push_back({x, y});
                gp.send1d(xy);
                if (!std::get<2>(pts.front()).empty()) gp.send1d(pts);
            }
            gp.send1d(std::vector<std::pair<double, double>>{{lo * 0.9, lo * 0.9}, {hi * 1.1, hi * 1.1}});
        });
        res.written.push_back(f.png), res.written.push_back(f.svg);
    }
    res.models = out;
    res.summary_md = md.str();
    return res;
}

}  // namespace profinfer
