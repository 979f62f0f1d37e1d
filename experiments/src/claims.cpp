#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "profinfer/output_file.h"
#include "profinfer/study_text.h"
#include "profinfer/table.h"
#include "study_parts.h"

namespace fs = std::filesystem;

namespace profinfer {

// The parameters naming a point's group for a comparison: those the selectors do not fix
// and that differ between the points.
std::string group_name(const std::map<std::string, std::string>& params, const std::vector<PointSamples>& points,
                       const std::map<std::string, std::string>& fixed_a, const std::map<std::string, std::string>& fixed_b) {
    std::string g;
    for (const auto& [k, v] : params) {
        if (fixed_a.count(k) || fixed_b.count(k)) continue;
        bool varies = false;
        for (const auto& q : points) varies |= q.params.at(k) != v;
        if (varies) g += (g.empty() ? "" : ", ") + k + "=" + v;
    }
    return g;
}

Testbed Testbed::here() {
    Testbed t;
    t.cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CPU_CYCLES;
    a.disabled = 1;
    a.exclude_kernel = 1;
    const int fd = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
    t.pmu = fd >= 0;
    if (fd >= 0) close(fd);
    return t;
}

namespace {

// What a within-noise verdict lacks: about how many rounds at this spread would decide it
// (against value, or value ± margin; against factor for a ratio).
std::string rounds_wanted(const Claim& c, const Interval& e) {
    std::vector<double> bounds;
    if (c.value) bounds = c.margin ? std::vector<double>{*c.value - *c.margin, *c.value + *c.margin} : std::vector<double>{*c.value};
    else bounds = c.margin ? std::vector<double>{c.factor * (1 - *c.margin), c.factor * (1 + *c.margin)} : std::vector<double>{c.factor};
    const size_t n = rounds_to_decide(e, bounds);
    return n ? "about " + std::to_string(n) + " rounds at this spread would decide it" : "";
}

// A trend claim (over = PARAM): per group of a's points (the parameters other than PARAM that
// vary), per round measured at every value of PARAM, the least-squares slope of the metric
// against PARAM; its median over the rounds and interval, held against value.
void evaluate_trend(const Claim& c, const std::vector<PointSamples>& points, std::vector<ClaimResult>& out) {
    std::map<std::string, std::vector<const PointSamples*>> groups;
    for (const auto& p : points)
        if (p.matches(c.a) && p.params.count(c.over)) groups[group_name(p.params, points, c.a, {{c.over, ""}})].push_back(&p);
    if (groups.empty()) {
        out.push_back({&c, "", Interval{}, Verdict::NotTestable, "no recorded point matches a with " + c.over});
        return;
    }
    for (const auto& [group, pts] : groups) {
        ClaimResult r{&c, group, Interval{}, Verdict::NotTestable, ""};
        std::map<int, std::vector<std::pair<double, double>>> by_round;  // round → (x, metric)
        std::set<double> xs;
        try {
            for (const auto* p : pts) {
                const double x = std::stod(p->params.at(c.over));
                xs.insert(x);
                for (const auto& [round, y] : p->of(c.metric)) by_round[round].push_back({x, y});
            }
        } catch (const std::exception&) {
            r.reason = c.over + " is not a number in every point";
            out.push_back(r);
            continue;
        }
        std::vector<double> slopes;
        for (const auto& [round, v] : by_round) {
            if (v.size() != pts.size()) continue;  // a round missing a point: no slope over the whole sweep
            double mx = 0, my = 0;
            for (const auto& [x, y] : v) mx += x, my += y;
            mx /= double(v.size()), my /= double(v.size());
            double sxy = 0, sxx = 0;
            for (const auto& [x, y] : v) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
            if (sxx > 0) slopes.push_back(sxy / sxx);
        }
        if (xs.size() < 2) {
            r.reason = "a trend needs two values of " + c.over + " or more";
        } else {
            r.estimate = median_interval(slopes);
            r.verdict = c.margin ? judge_within(r.estimate, *c.value - *c.margin, *c.value + *c.margin)
                                 : judge(r.estimate, *c.value, c.expect_greater);
            if (r.verdict == Verdict::WithinNoise) r.reason = rounds_wanted(c, r.estimate);
            if (r.verdict == Verdict::NotTestable)
                r.reason = "n = " + rounds_text(r.estimate.n) + " rounds with every value of " + c.over +
                           ": too few for an interval (at least " + std::to_string(kMinRoundsForInterval) + ")";
        }
        out.push_back(r);
    }
}

}  // namespace

std::vector<ClaimResult> evaluate_claims(const ExperimentSpec& spec, const std::vector<PointSamples>& all_points,
                                         const Testbed& here, const DerivedSamples& derived) {
    std::vector<ClaimResult> out;
    static const std::vector<PointSamples> kNone;
    for (const auto& c : spec.claims) {
        const auto d = derived.find(c.on);
        const std::vector<PointSamples>& points = c.on.empty() ? all_points : d == derived.end() ? kNone : d->second;
        std::string untestable = c.not_testable;
        if (untestable.empty() && c.requires_cpus > here.cpus)
            untestable = "needs " + std::to_string(c.requires_cpus) + " CPUs or more; this machine has " +
                         std::to_string(here.cpus);
        if (untestable.empty() && c.requires_pmu && !here.pmu)
            untestable = "needs hardware performance counters; this machine has no PMU";
        if (!untestable.empty()) {
            out.push_back({&c, "", Interval{}, Verdict::NotTestable, untestable});
            continue;
        }
        if (!c.over.empty()) {
            evaluate_trend(c, points, out);
            continue;
        }
        // Each side's points, grouped by the parameters neither side fixes.
        std::map<std::string, const PointSamples*> as, bs;
        for (const auto& p : points) {
            if (p.matches(c.a)) as[group_name(p.params, points, c.a, c.b)] = &p;
            if ((!c.value || c.difference) && p.matches(c.b)) bs[group_name(p.params, points, c.a, c.b)] = &p;
        }
        if (as.empty()) {
            out.push_back({&c, "", Interval{}, Verdict::NotTestable,
                           std::string(c.on == "fits" ? "no fitted line" : c.on == "shares" ? "no pair of op and op-sampled points"
                                       : c.on == "baseline" ? "no recorded point with a baseline in its group" : "no recorded point") +
                               " matches a"});
            continue;
        }
        for (const auto& [group, a] : as) {
            ClaimResult r{&c, group, Interval{}, Verdict::NotTestable, ""};
            const ByRound& av = a->of(c.metric);
            if (c.difference) {
                const auto b = bs.find(group);
                const ByRound* bv = b == bs.end() ? nullptr : &b->second->of(c.metric_b.empty() ? c.metric : c.metric_b);
                if (!bv)
                    r.reason = "no recorded point matches b" + (group.empty() ? "" : " for " + group);
                else if (av.empty() || bv->empty())
                    r.reason = std::string(av.empty() ? "a" : "b") + " was not measured";
                else
                    r.estimate = difference_interval(av, *bv, c.factor),
                    r.verdict = c.margin ? judge_within(r.estimate, *c.value - *c.margin, *c.value + *c.margin)
                                         : judge(r.estimate, *c.value, c.expect_greater);
            } else if (c.value) {
                std::vector<double> v;
                for (const auto& [round, x] : av) v.push_back(x);
                r.estimate = median_interval(v);
                r.verdict = c.margin ? judge_within(r.estimate, *c.value - *c.margin, *c.value + *c.margin)
                                     : judge(r.estimate, *c.value, c.expect_greater);
            } else if (auto b = bs.find(group); b == bs.end()) {
                r.reason = "no recorded point matches b" + (group.empty() ? "" : " for " + group);
            } else {
                const std::string& metric_b = c.metric_b.empty() ? c.metric : c.metric_b;
                const ByRound& bv = b->second->of(metric_b);
                // A ratio to b means something only where b is above 0 (a speed always is; a
                // slowdown inside its noise crosses 0 and makes the ratio swing through ±∞).
                const auto not_positive = std::count_if(bv.begin(), bv.end(), [](const auto& x) { return !(x.second > 0); });
                if (av.empty() || bv.empty()) {
                    // Name the side that has no value: a point measured on one side only
                    // (a hog that starts before the first decode call has no "before").
                    r.reason = (av.empty() ? c.metric + " was not measured in a" : "") +
                               (av.empty() && bv.empty() ? "; " : "") +
                               (bv.empty() ? metric_b + " was not measured in b" : "");
                } else if (not_positive > 0) {
                    r.reason = "b is not above 0 in " + std::to_string(not_positive) + " of its " + rounds_text(bv.size()) +
                               ": a ratio to it says nothing";
                } else {
                    r.estimate = ratio_interval(av, bv);
                    r.verdict = c.margin ? judge_within(r.estimate, c.factor * (1 - *c.margin), c.factor * (1 + *c.margin))
                                         : judge(r.estimate, c.factor, c.expect_greater);
                }
            }
            if (r.verdict == Verdict::WithinNoise) r.reason = rounds_wanted(c, r.estimate);
            if (r.verdict == Verdict::NotTestable && r.reason.empty())
                r.reason = r.estimate.n == 0 ? c.metric + " was not measured in a"
                                             : "n = " + rounds_text(r.estimate.n) + ": too few for an interval (at least " +
                                                   std::to_string(kMinRoundsForInterval) + ")";
            out.push_back(r);
        }
    }
    return out;
}

void write_verdicts(const Study& s, const std::vector<ClaimResult>& verdicts, std::vector<fs::path>& written) {
    Table v;
    v.columns = {"claim", "metric", "expect", "a", "b", "group", "estimate", "lo", "hi", "n", "verdict", "reason"};
    auto sel = [](const std::map<std::string, std::string>& selector) {
        std::string o;
        for (const auto& [k, x] : selector) o += (o.empty() ? "" : ", ") + k + "=" + x;
        return o;
    };
    for (const auto& r : verdicts) {
        const Claim& c = *r.claim;
        v.rows.push_back({c.says, c.compared(), c.expectation(), sel(c.a),
                          c.value ? nlohmann::json(*c.value) : nlohmann::json(sel(c.b)), r.group,
                          number_or_null(r.estimate.median), number_or_null(r.estimate.lo),
                          number_or_null(r.estimate.hi), int64_t(r.estimate.n), to_string(r.verdict), r.reason});
    }
    OutputFile::write(s.out_dir / "verdicts.csv", v.to_csv());
    written.push_back(s.out_dir / "verdicts.csv");
}

}  // namespace profinfer
