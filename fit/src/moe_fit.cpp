#include "fit_parts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/error.h"
#include "profinfer/regression.h"

namespace profinfer::fit {

void fit_moe(FitContext& c) {
    auto& out = c.out;
    auto& md = c.md;
    const fs::path& results_dir = c.results_dir;
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
                    return format_double(c.r) + " [" + format_double(c.lo) + ", " + format_double(c.hi) + "]";
                } catch (const Error&) {
                    return "–";
                }
            };
            const std::string rd = corr(dist, time_us, "reuse_distance_vs_time");
            const std::string rf = have_faults ? corr(faults, fault_t, "major_faults_vs_time") : "–";
            if (have_faults) e["major_faults_moe_nodes"] = all_faults;
            out["moe"].push_back(e);
            md << "| " << id << " | " << e["type"].get<std::string>() << " | " << e["memory_limit"].get<std::string>() << " | "
               << dist.size() << " | " << cold << " | " << rd << " | " << (have_faults ? format_double(all_faults, "%.0f") : "–") << " | " << rf << " |\n";
        }
    } else {
        md << "No moe-experts study in " << results_dir.string() << ".\n";
    }
}

}  // namespace profinfer::fit
