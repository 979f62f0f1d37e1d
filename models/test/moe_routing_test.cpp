#include "profinfer/moe_routing.h"

#include <gtest/gtest.h>

#include <numeric>

#include "profinfer/error.h"

using namespace profinfer;

TEST(MoeRouting, ParsesWhatTheHelpSays) {
    EXPECT_EQ(MoeRouting::parse("random").kind, MoeRouting::Kind::Random);
    EXPECT_EQ(MoeRouting::parse("uniform").s, 0.0);
    EXPECT_EQ(MoeRouting::parse("zipf:1.5").s, 1.5);
    EXPECT_EQ(MoeRouting::parse("zipf:1.5").str(), "zipf:1.5");
    for (const char* bad : {"zipf:", "zipf:-1", "zipf:x", "zipf:1x", "zipf", "Zipf:1", "zipf:nan"})
        EXPECT_THROW(MoeRouting::parse(bad), Error) << bad;
}

TEST(MoeRouting, InclusionProbabilitiesSumToTheExpertsUsedAndCapAtOne) {
    // Uniform: k / E each.
    for (double p : inclusion_probabilities(60, 4, 0)) EXPECT_NEAR(p, 4.0 / 60, 1e-12);
    // Zipf 2 over 8 experts, top-2: rank 1 would get 2 x 0.65 > 1, so it is capped at 1 and
    // the other ranks share the remaining 1 in proportion to r^-2.
    auto pi = inclusion_probabilities(8, 2, 2);
    EXPECT_DOUBLE_EQ(pi[0], 1.0);
    double rest = 0;
    for (int r = 2; r <= 8; ++r) rest += 1.0 / (r * r);
    EXPECT_NEAR(pi[1], 0.25 / rest, 1e-12);
    EXPECT_NEAR(std::accumulate(pi.begin(), pi.end(), 0.0), 2.0, 1e-12);
    for (size_t r = 1; r < pi.size(); ++r) EXPECT_LT(pi[r], pi[r - 1]);
    EXPECT_THROW(inclusion_probabilities(4, 5, 1), Error);
}

TEST(MoeRouting, ExpectedReuseDistancesCountEveryPair) {
    // One expert used every step: steps - 1 pairs, all at distance 1.
    auto h = expected_reuse_distances({1.0}, 10, 4);
    EXPECT_DOUBLE_EQ(h[0], 9);
    EXPECT_DOUBLE_EQ(h[1] + h[2] + h[3], 0);
    // p = 1/2 over 3 steps: pairs (1,2), (2,3) at distance 1 with p^2 each, (1,3) at
    // distance 2 with p^2 (1 - p).
    h = expected_reuse_distances({0.5}, 3, 4);
    EXPECT_DOUBLE_EQ(h[0], 0.5);
    EXPECT_DOUBLE_EQ(h[1], 0.125);
}
