// The intervals every study's tables and verdicts rest on, against data with known answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "profinfer/intervals.h"

using namespace profinfer;

TEST(Intervals, MedianIntervalCoversTheTrueMedianAboutNinetyFivePercentOfTheTime) {
    // Normal(40, 2) samples of 9 rounds: the bootstrap interval of the median must cover 40
    // in most of 300 seeded repetitions (a percentile bootstrap of a median at n = 9 is a
    // little liberal: ≥ 85 %), and be no wider than the sample's range.
    std::mt19937 rng(7);
    std::normal_distribution<double> noise(40, 2);
    int covered = 0;
    for (int rep = 0; rep < 300; ++rep) {
        std::vector<double> v(9);
        for (auto& x : v) x = noise(rng);
        const Interval iv = median_interval(v);
        ASSERT_TRUE(iv.has_interval());
        EXPECT_EQ(iv.n, 9u);
        EXPECT_LE(iv.lo, iv.median);
        EXPECT_GE(iv.hi, iv.median);
        EXPECT_GE(iv.lo, *std::min_element(v.begin(), v.end()));
        EXPECT_LE(iv.hi, *std::max_element(v.begin(), v.end()));
        covered += iv.lo <= 40 && 40 <= iv.hi;
    }
    EXPECT_GE(covered, 255);
    EXPECT_LT(covered, 300);  // an interval that always covers says nothing
}

TEST(Intervals, TooFewRoundsGiveNoInterval) {
    const Interval iv = median_interval({41, 43, 40, 44});
    EXPECT_DOUBLE_EQ(iv.median, 42);
    EXPECT_FALSE(iv.has_interval());
    EXPECT_EQ(judge(iv, 1, true), Verdict::NotTestable);
    EXPECT_TRUE(median_interval({41, 43, 40, 44, 42}).has_interval());
}

TEST(Intervals, SameValuesSameInterval) {
    const std::vector<double> v{3, 1, 4, 1, 5, 9, 2, 6};
    const Interval a = median_interval(v), b = median_interval(v);
    EXPECT_EQ(a.lo, b.lo);
    EXPECT_EQ(a.hi, b.hi);
}

// Drift shared by both points within a round (a noisy neighbour) is cancelled by resampling
// the rounds together: a 5 % effect under ±30 % round-to-round drift is resolved paired,
// and not when the two points were not measured in the same rounds.
TEST(Intervals, RatioPairedByRoundCancelsSharedDrift) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> drift(0.7, 1.3);
    std::normal_distribution<double> jitter(1, 0.005);
    ByRound a, b, b_other_rounds;
    for (int r = 1; r <= 9; ++r) {
        const double d = drift(rng);
        a[r] = 40 * d * jitter(rng);
        b[r] = 42 * d * jitter(rng);
        b_other_rounds[r + 100] = b[r];
    }
    const Interval paired = ratio_interval(a, b);
    EXPECT_NEAR(paired.median, 40.0 / 42, 0.1);
    ASSERT_TRUE(paired.has_interval());
    EXPECT_LT(paired.hi, 1.0);
    EXPECT_EQ(judge(paired, 1.0, false), Verdict::Reproduced);
    EXPECT_EQ(judge(paired, 1.0, true), Verdict::NotReproduced);
    const Interval unpaired = ratio_interval(a, b_other_rounds);
    ASSERT_TRUE(unpaired.has_interval());
    EXPECT_GT(unpaired.hi - unpaired.lo, 3 * (paired.hi - paired.lo));
    EXPECT_EQ(judge(unpaired, 1.0, false), Verdict::WithinNoise);
}

// A machine whose speed drifts by more between rounds than the effect (a shared host: the
// same configuration 40-46 t/s from one minute to the next) and a little within a round: the
// paired estimate is the median of each round's own ratio, so that a round's drift cancels
// in it. The ratio of the two medians would take them from different rounds whenever the
// jitter reorders neighbouring rounds, and a 2 % effect would drown in the drift.
TEST(Intervals, PairedRatioIsTheMedianOfEachRoundsRatio) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> drift(0.85, 1.15);
    std::normal_distribution<double> jitter(1, 0.01);
    ByRound traced, untraced;
    for (int r = 1; r <= 20; ++r) {
        const double d = drift(rng);
        traced[r] = 0.98 * 42 * d * jitter(rng);
        untraced[r] = 42 * d * jitter(rng);
    }
    std::vector<double> each;
    for (const auto& [r, v] : traced) each.push_back(v / untraced.at(r));
    const Interval paired = ratio_interval(traced, untraced);
    EXPECT_DOUBLE_EQ(paired.median, median_of(each));
    ASSERT_TRUE(paired.has_interval());
    EXPECT_LT(paired.hi, 1.0);
    EXPECT_GT(paired.lo, 0.95);
    EXPECT_EQ(judge(paired, 1.0, false), Verdict::Reproduced);
}

// A − 1.2 × B per round where B crosses 0 from round to round (a slowdown of ~1 % inside its
// noise): the difference stays finite and, paired, carries none of the shared drift.
TEST(Intervals, PairedDifferenceIsTheMedianOfEachRoundsDifference) {
    std::mt19937 rng(7);
    std::normal_distribution<double> drift(0, 1.0), jitter(0, 0.05);
    ByRound op, floor;
    for (int r = 1; r <= 20; ++r) {
        const double d = drift(rng);  // both sides of a round moved by it
        floor[r] = 0.5 + d + jitter(rng);
        op[r] = 0.5 + 0.3 + d + jitter(rng);  // 0.3 points above the floor
    }
    ASSERT_TRUE(std::any_of(floor.begin(), floor.end(), [](const auto& x) { return x.second <= 0; }));
    std::vector<double> each;
    for (const auto& [r, v] : op) each.push_back(v - 1.2 * floor.at(r));
    const Interval paired = difference_interval(op, floor, 1.2);
    EXPECT_DOUBLE_EQ(paired.median, median_of(each));
    ASSERT_TRUE(paired.has_interval());
    const Interval plain = difference_interval(op, floor);
    EXPECT_GT(plain.lo, 0.2);  // drift cancelled: 0.3 ± a few hundredths
    EXPECT_LT(plain.hi, 0.4);
    EXPECT_EQ(judge(plain, 0, false), Verdict::NotReproduced) << "op is above the floor here";
    ByRound shifted;  // not the same rounds: medians, each side resampled on its own
    for (const auto& [r, v] : floor) shifted[r + 100] = v;
    const auto values = [](const ByRound& b) {
        std::vector<double> v;
        for (const auto& [r, x] : b) v.push_back(x);
        return v;
    };
    const Interval apart = difference_interval(op, shifted);
    EXPECT_NEAR(apart.median, median_of(values(op)) - median_of(values(floor)), 1e-12);
    EXPECT_GT(apart.hi - apart.lo, plain.hi - plain.lo) << "unpaired, the drift is back in the interval";
}

TEST(Intervals, JudgeNeedsTheWholeIntervalOnOneSide) {
    Interval e;
    e.median = 1.1, e.n = 5;
    e.lo = 1.02, e.hi = 1.2;
    EXPECT_EQ(judge(e, 1, true), Verdict::Reproduced);
    EXPECT_EQ(judge(e, 1, false), Verdict::NotReproduced);
    e.lo = 0.99;
    EXPECT_EQ(judge(e, 1, true), Verdict::WithinNoise);
    EXPECT_EQ(judge(e, 1, false), Verdict::WithinNoise);
    EXPECT_EQ(to_string(Verdict::WithinNoise), "within noise");
}

TEST(Intervals, RoundsToDecideScaleWithTheSquareOfTheIntervalOverTheDistance) {
    Interval e{0.5, -1.5, 2.5, 20};  // half-width 2, median 0.5 from 0
    // No effect at 0: 20 × (2 / 0.5)² = 320 rounds.
    EXPECT_EQ(rounds_to_decide(e, {0}), 320u);
    // An equivalence ±0.7 around 0: the nearer end (0.7) is 0.2 away → 20 × 10² = 2000.
    EXPECT_EQ(rounds_to_decide(e, {-0.7, 0.7}), 2000u);
    // The half facing the bound counts, not the mean half-width: 3.85 lies 2.29 below 6.14,
    // the bound 4 lies 2.14 below it → 20 × (2.29 / 2.14)² ≈ 22.9.
    EXPECT_EQ(rounds_to_decide(Interval{6.14, 3.85, 7.84, 20}, {4}), 23u);
    // An interval that decides already (crosses no bound), or a median on the bound: nothing to say.
    EXPECT_EQ(rounds_to_decide(Interval{3, 2.8, 3.2, 20}, {0}), 0u);
    EXPECT_EQ(rounds_to_decide(Interval{0, -1, 1, 20}, {0}), 0u);
    EXPECT_EQ(rounds_to_decide(Interval{}, {0}), 0u);
}
