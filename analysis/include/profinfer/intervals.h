#pragma once
// Run-to-run evidence: the median of a metric over a study's rounds with a 95 % bootstrap
// interval, the ratio of two points' medians with its interval (paired by round when both
// were measured in the same rounds), and the verdict a comparison supports. The studies
// (experiment summaries, the overhead study) use these and nothing else, so that every
// interval in results/ means the same thing.
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "profinfer/statistics.h"

namespace profinfer {

// Fewer values than this give no interval: a bootstrap over 2–4 rounds can only return the
// extremes it was given, which would read as evidence.
inline constexpr size_t kMinRoundsForInterval = 5;

struct Interval {
    double median = NAN;         // the estimate (a median, or the median of per-round ratios)
    double lo = NAN, hi = NAN;   // 95 % percentile bootstrap interval; NaN when too few rounds
    size_t n = 0;                // values (rounds) it rests on
    bool has_interval() const { return std::isfinite(lo) && std::isfinite(hi); }
};

// The median of VALUES and its 95 % bootstrap interval (4000 resamples, a fixed seed: the
// same values always give the same interval).
Interval median_interval(const std::vector<double>& values);

// Values of one point per round (round number → value).
using ByRound = std::map<int, double>;

// A against B and its interval. Measured in the same rounds (every round of the side with
// fewer values is a round of the other): the median over those rounds of each round's own
// ratio A/B, bootstrapped over rounds — drift between rounds (a shared host's speed changes
// from one minute to the next) is in both sides of a round's ratio and cancels. Not in the
// same rounds: median(A) / median(B), each side resampled on its own. n: the rounds (pairs)
// or the smaller side.
Interval ratio_interval(const ByRound& a, const ByRound& b);

// A − FACTOR × B and its interval: per round when measured in the same rounds (as
// ratio_interval), else median(A) − FACTOR × median(B), each side resampled on its own.
Interval difference_interval(const ByRound& a, const ByRound& b, double factor = 1);

// What a comparison's interval says about an expected direction.
enum class Verdict { Reproduced, NotReproduced, WithinNoise, NotTestable };
std::string to_string(Verdict v);

// EXPECT_GREATER: the claim is "estimate > NO_EFFECT" (else "<"). Reproduced when the
// whole interval lies on the claimed side, not reproduced when it lies wholly on the other,
// within noise when it contains NO_EFFECT; not testable without an interval.
Verdict judge(const Interval& estimate, double no_effect, bool expect_greater);
// An equivalence ("unaffected", "does not grow"): reproduced when the whole interval lies
// within [lo, hi], not reproduced when it lies wholly outside, within noise otherwise (an
// interval too wide to tell).
Verdict judge_within(const Interval& estimate, double lo, double hi);

// Within noise: about how many rounds would decide it, were the median to stay and the
// interval to narrow as 1/√n — the rounds at which the half of it facing each bound it
// contains (of BOUNDS: the no-effect value, or an equivalence's two ends) falls under the
// median's distance to that bound. 0 when the interval decides already, has none, or its
// median sits on a bound.
size_t rounds_to_decide(const Interval& estimate, const std::vector<double>& bounds);

}  // namespace profinfer
