#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "profinfer/regression.h"

namespace profinfer::fit {

// A Vulkan MatMul model from the vulkan-offload study: per weight kind, the decode time a
// token gains when that weight's MatMuls run on the Vulkan device (llama.cpp -ot), plus
// their CPU time by the CPU model — the MatMul on the device with its activations' copies.
void fit_offload(FitContext& c) {
    auto& out = c.out;
    auto& md = c.md;
    const fs::path& results_dir = c.results_dir;
    const fs::path f = results_dir / "vulkan-offload" / "points.csv";
    const ModelCard::Scale scale = study_scale(results_dir / "vulkan-offload");
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
        const auto shapes = card_matmuls(ModelCard::load(model, scale));
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
               << format_double(1000 / r.ms) << " | " << format_double(added) << " | " << format_double(vk) << " | " << format_double(*c) << " | " << format_double(vk / *c) << " |\n";
        }
        if (us.size() < 3) continue;
        nlohmann::json e{{"backend", "vulkan"}, {"type", type}, {"threads", threads}, {"batch", perf::batch_class(1)}, {"use", "linear"},
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

}  // namespace profinfer::fit
