#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "profinfer/error.h"
#include "profinfer/experiment_index.h"
#include "profinfer/ggml_types.h"
#include "profinfer/statistics.h"

namespace profinfer::fit {

Table read_table(const fs::path& f) {
    if (!fs::exists(f)) throw Error("cannot read " + f.string() + ": run the study that writes it first (make reproduce)");
    return Table::read_csv_file(f);
}

std::string text(const nlohmann::json& v) {
    return v.is_string() ? v.get<std::string>() : v.is_number_integer() ? std::to_string(v.get<int64_t>()) : v.dump();
}

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

ErrStats err_stats(const std::vector<double>& abs_pct) {
    ErrStats e;
    e.points = abs_pct.size();
    if (abs_pct.empty()) return e;
    e.within_10pct = double(std::count_if(abs_pct.begin(), abs_pct.end(), [](double v) { return v <= 10.0; })) / double(abs_pct.size());
    e.median_abs_pct = median_of(abs_pct);
    e.p90_abs_pct = quantile_of(abs_pct, 0.9);
    return e;
}

nlohmann::json err_json(const ErrStats& e) {
    return {{"points", e.points}, {"within_10pct", e.within_10pct}, {"median_abs_err_pct", e.median_abs_pct},
            {"p90_abs_err_pct", e.p90_abs_pct}};
}

std::map<std::string, std::string> study_facts(const fs::path& study) {
    if (!fs::exists(study / "index.db")) return {};
    return store::ExperimentIndex(study / "index.db", store::ExperimentIndex::Mode::Read).facts();
}

ModelCard::Scale study_scale(const fs::path& study) {
    const auto facts = study_facts(study);
    const auto s = facts.find("scale");
    return s != facts.end() ? ModelCard::parse_scale(s->second) : ModelCard::Scale::Full;
}

// The llama.cpp commit the sweep ran, from llama-bench's own output in the index.
std::string llama_commit(const fs::path& index) {
    if (!fs::exists(index)) return "unknown";
    try {
        const auto out = store::ExperimentIndex(index, store::ExperimentIndex::Mode::Read).first_bench_output();
        if (!out) return "unknown";
        const auto b = nlohmann::json::parse(*out);
        if (b.is_array() && !b.empty()) return b[0].value("build_commit", std::string("unknown"));
    } catch (const std::exception&) {
    }
    return "unknown";
}


MatMulGroups read_matmul_groups(const fs::path& matmuls_csv) {
    const Table mm = read_table(matmuls_csv);
    MatMulGroups groups;
    for (const auto& r : mm.rows) {
        const int64_t n = r[mm.column("n")].get<int64_t>();
        if (n == 1 && r[mm.column("phase")] == "prefill") continue;  // decode shapes again, on a call or two
        const std::string type = text(r[mm.column("type")]), backend = text(r[mm.column("backend")]);
        const int threads = int(r[mm.column("threads")].get<int64_t>());
        Point p{text(r[mm.column("model")]), r[mm.column("m")].get<int64_t>(), n, r[mm.column("k")].get<int64_t>(),
                r[mm.column("h")].get<int64_t>(), r[mm.column("median_us")].get<double>()};
        groups[{backend, type, threads, perf::batch_class(n)}].push_back(p);
    }
    return groups;
}

}  // namespace profinfer::fit
