// --level op-sampled against the exact operator level on the same workload: per op type, the
// share of operator time each gives (exact: node time, stat --by op-type; sampled: the share
// of the samples an operator names, with its Wilson interval per run), for points that differ
// only in their tracer (op, op-sampled), paired by round.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "profinfer/intervals.h"
#include "profinfer/number_text.h"
#include "profinfer/output_file.h"
#include "profinfer/stats.h"
#include "profinfer/study_summary.h"
#include "profinfer/study_text.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// exact: a point recorded at --level op; sampled: at --level op-sampled.
std::string share_method(const ExperimentSpec& spec, const std::string& tracer) {
    const std::string level = tracer == "level" ? spec.level : tracer;
    return level == "op" ? "exact" : level == "op-sampled" ? "sampled" : "";
}

struct OpShares {
    ByRound exact, sampled;  // share of operator time (%) by round
    int64_t samples = 0;     // the samples naming the op, every round
};

}  // namespace

SampledShares summarise_sampled_shares(const ExperimentSpec& spec, const std::vector<StudyPoint>& points,
                                       const fs::path& out_dir, const std::string& caption) {
    // Points that differ only in their tracer: each method's trace per round.
    std::map<std::map<std::string, std::string>, std::map<int, std::map<std::string, fs::path>>> pairs;
    for (const auto& p : points) {
        const std::string m = share_method(spec, p.params.at("tracer"));
        if (m.empty() || p.db.empty()) continue;
        auto key = p.params;
        key.erase("tracer");
        pairs[key][p.round][m] = p.db;
    }
    SampledShares out;
    Table t{{"model", "type", "threads", "op", "exact_share_pct", "exact_ci95_lo", "exact_ci95_hi", "sampled_share_pct",
             "sampled_ci95_lo", "sampled_ci95_hi", "gap_pts", "gap_ci95_lo", "gap_ci95_hi", "samples", "rounds"}};
    std::ostringstream md;
    md << "# Operator time shares: sampled (--level op-sampled) against exact (--level op)\n\n"
       << caption << ".\n\n"
       << "Per op type, the exact level's share of operator time (node time, `stat --by op-type`) and the share "
          "of the samples that an operator names (`op_share_pct` of an op-sampled trace: samples in barrier "
          "wait, the graph loop or the kernel named by none), each the median over rounds with its 95 % "
          "interval; gap: sampled − exact, per round (the two runs of a round recorded one after the other), "
          "its median and interval; samples: every round's samples naming the op. The five op types with the "
          "largest exact share of each model; the claim reads each round's largest |gap| among them "
          "(sampled_share_max_gap_pts).\n\n"
       << "| model | type | threads | op | exact % | sampled % | gap (points) | samples | rounds |\n"
       << "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& [key, rounds] : pairs) {
        std::map<std::string, OpShares> ops;
        std::vector<int> both;
        for (const auto& [round, by] : rounds) {
            if (!by.count("exact") || !by.count("sampled")) continue;
            both.push_back(round);
            store::Database exact(by.at("exact"), store::Database::Mode::ReadOnly);
            store::Database sampled(by.at("sampled"), store::Database::Mode::ReadOnly);
            for (const auto& r : stats_table(exact, "op-type").to_json())
                if (r["share_pct"].is_number()) ops[r["op"]].exact[round] = r["share_pct"].get<double>();
            for (const auto& r : stats_table(sampled, "op-type").to_json()) {
                const std::string op = r["op"];
                if (op.empty() || op.front() == '[' || !r["op_share_pct"].is_number()) continue;
                ops[op].sampled[round] = r["op_share_pct"].get<double>();
                ops[op].samples += r["samples"].get<int64_t>();
            }
        }
        if (both.empty()) continue;
        // An op the samples never named has a sampled share of 0 in that round, and one never
        // timed exactly (named by samples only) an exact share of 0.
        for (auto& [op, s] : ops)
            for (int round : both) s.exact.emplace(round, 0.0), s.sampled.emplace(round, 0.0);
        auto values = [](const ByRound& b) {
            std::vector<double> v;
            for (const auto& [round, x] : b) v.push_back(x);
            return v;
        };
        std::vector<std::pair<double, std::string>> by_exact;
        for (const auto& [op, s] : ops) by_exact.emplace_back(median_interval(values(s.exact)).median, op);
        std::sort(by_exact.begin(), by_exact.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        by_exact.resize(std::min<size_t>(5, by_exact.size()));
        PointSamples gaps{key, {}};
        for (const auto& [share, op] : by_exact) {
            const OpShares& s = ops.at(op);
            std::vector<double> gap;
            for (int round : both) {
                const double g = s.sampled.at(round) - s.exact.at(round);
                gap.push_back(g);
                auto& worst = gaps.metrics["sampled_share_max_gap_pts"][round];
                worst = std::max(worst, std::fabs(g));
            }
            const Interval e = median_interval(values(s.exact)), sm = median_interval(values(s.sampled)),
                           g = median_interval(gap);
            t.rows.push_back({key.at("model"), key.at("type"), key.at("threads"), op, e.median, number_or_null(e.lo),
                              number_or_null(e.hi), sm.median, number_or_null(sm.lo), number_or_null(sm.hi), g.median,
                              number_or_null(g.lo), number_or_null(g.hi), s.samples, int64_t(both.size())});
            md << "| " << key.at("model") << " | " << key.at("type") << " | " << key.at("threads") << " | " << op << " | "
               << format_with_interval(e.median, e.lo, e.hi) << " | " << format_with_interval(sm.median, sm.lo, sm.hi)
               << " | " << format_with_interval(g.median, g.lo, g.hi) << " | " << s.samples << " | " << both.size()
               << " |\n";
        }
        out.gaps.push_back(std::move(gaps));
    }
    if (t.rows.empty()) return out;
    const std::string name = spec.name + "-sampled-shares";
    OutputFile::write(out_dir / (name + ".csv"), t.to_csv());
    OutputFile::write(out_dir / (name + ".md"), md.str());
    out.files = {out_dir / (name + ".csv"), out_dir / (name + ".md")};
    return out;
}

}  // namespace profinfer
