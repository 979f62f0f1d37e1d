#include "profinfer/intervals.h"

#include <cmath>
#include <algorithm>
#include <cstdint>

#include "profinfer/stable_random.h"

namespace profinfer {

namespace {

constexpr int kResamples = 4000;

// The 2.5 % and 97.5 % points of sorted bootstrap estimates.
void percentile_bounds(std::vector<double>& estimates, Interval& out) {
    std::sort(estimates.begin(), estimates.end());
    const size_t k = estimates.size();
    out.lo = estimates[size_t(0.025 * double(k))];
    out.hi = estimates[std::min(k - 1, size_t(0.975 * double(k)))];
}

}  // namespace

Interval median_interval(const std::vector<double>& values) {
    Interval out;
    out.n = values.size();
    out.median = median_of(values);
    if (out.n < kMinRoundsForInterval) return out;
    StableRandom rng{1};
    std::vector<double> estimates, sample(values.size());
    estimates.reserve(kResamples);
    for (int i = 0; i < kResamples; ++i) {
        for (auto& s : sample) s = values[rng.below(values.size())];
        estimates.push_back(median_of(sample));
    }
    percentile_bounds(estimates, out);
    return out;
}

namespace {
// A against B by OP, paired by round where they were measured in the same rounds.
template <class Op>
Interval paired_interval(const ByRound& a, const ByRound& b, Op op) {
    Interval out;
    // Paired when every round of the side with fewer is a round of the other (a run that
    // failed leaves its round out of the pair, not the pairing out of the comparison).
    std::vector<double> each;
    for (const auto& [r, v] : a)
        if (auto it = b.find(r); it != b.end()) each.push_back(op(v, it->second));
    if (!each.empty() && each.size() == std::min(a.size(), b.size())) {
        // Each round's own comparison: what drifts between rounds is in both of its sides.
        return median_interval(each);
    }
    std::vector<double> va, vb;
    for (const auto& [r, v] : a) va.push_back(v);
    for (const auto& [r, v] : b) vb.push_back(v);
    out.n = std::min(va.size(), vb.size());
    out.median = op(median_of(va), median_of(vb));
    if (out.n < kMinRoundsForInterval) return out;
    StableRandom rng{1};
    std::vector<double> estimates, sa(va.size()), sb(vb.size());
    estimates.reserve(kResamples);
    for (int i = 0; i < kResamples; ++i) {
        for (auto& s : sa) s = va[rng.below(va.size())];
        for (auto& s : sb) s = vb[rng.below(vb.size())];
        estimates.push_back(op(median_of(sa), median_of(sb)));
    }
    percentile_bounds(estimates, out);
    return out;
}
}  // namespace

Interval ratio_interval(const ByRound& a, const ByRound& b) {
    return paired_interval(a, b, [](double x, double y) { return x / y; });
}

Interval difference_interval(const ByRound& a, const ByRound& b, double factor) {
    return paired_interval(a, b, [factor](double x, double y) { return x - factor * y; });
}

std::string to_string(Verdict v) {
    switch (v) {
        case Verdict::Reproduced: return "reproduced";
        case Verdict::NotReproduced: return "not reproduced";
        case Verdict::WithinNoise: return "within noise";
        case Verdict::NotTestable: return "not testable here";
    }
    return "?";
}

Verdict judge(const Interval& e, double no_effect, bool expect_greater) {
    if (!e.has_interval()) return Verdict::NotTestable;
    if (e.lo <= no_effect && no_effect <= e.hi) return Verdict::WithinNoise;
    const bool above = e.lo > no_effect;
    return above == expect_greater ? Verdict::Reproduced : Verdict::NotReproduced;
}

Verdict judge_within(const Interval& e, double lo, double hi) {
    if (!e.has_interval()) return Verdict::NotTestable;
    if (lo <= e.lo && e.hi <= hi) return Verdict::Reproduced;
    if (e.hi < lo || e.lo > hi) return Verdict::NotReproduced;
    return Verdict::WithinNoise;
}

size_t rounds_to_decide(const Interval& e, const std::vector<double>& bounds) {
    if (!e.has_interval() || e.n == 0) return 0;
    double need = 0;
    for (const double b : bounds) {
        if (b < e.lo || b > e.hi) continue;  // this bound is decided already
        const double distance = std::fabs(e.median - b);
        if (!(distance > 0)) return 0;       // a median on the bound: no number of rounds decides it
        const double side = b < e.median ? e.median - e.lo : e.hi - e.median;  // the half facing b
        need = std::max(need, double(e.n) * (side / distance) * (side / distance));
    }
    return size_t(std::ceil(need - 1e-9));  // 20 × (2 / 0.2)² is 2000, not 2000.0000001
}

}  // namespace profinfer
