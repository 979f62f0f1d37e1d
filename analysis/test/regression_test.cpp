// The least-squares and correlation the performance models rest on, against data with
// known answers.
#include <gtest/gtest.h>

#include <random>

#include "profinfer/error.h"
#include "profinfer/regression.h"

using namespace profinfer;

TEST(Regression, StudentQuantileMatchesTables) {
    // Two-sided 95 % critical values from any statistics table.
    EXPECT_NEAR(t_quantile_975(3), 3.1824, 0.01);
    EXPECT_NEAR(t_quantile_975(5), 2.5706, 0.002);
    EXPECT_NEAR(t_quantile_975(10), 2.2281, 0.001);
    EXPECT_NEAR(t_quantile_975(30), 2.0423, 0.0005);
    EXPECT_NEAR(t_quantile_975(1e6), 1.95996, 0.0001);
}

TEST(Regression, RecoversKnownCoefficientsAndTheirIntervalsCoverThem) {
    // y = 3 + 0.5 x + N(0, 1): over 200 seeded repetitions the 95 % intervals must cover the
    // true values about 95 % of the time, and the estimates land near them.
    std::mt19937 rng(7);
    std::normal_distribution<double> noise(0, 1);
    int cover_a = 0, cover_b = 0;
    const int reps = 200, n = 40;
    for (int r = 0; r < reps; ++r) {
        Eigen::MatrixXd X(n, 2);
        Eigen::VectorXd y(n);
        for (int i = 0; i < n; ++i) X(i, 0) = 1, X(i, 1) = i, y[i] = 3 + 0.5 * i + noise(rng);
        auto f = least_squares(X, y, {"a", "b"});
        cover_a += f.ci_lo[0] <= 3 && 3 <= f.ci_hi[0];
        cover_b += f.ci_lo[1] <= 0.5 && 0.5 <= f.ci_hi[1];
        EXPECT_NEAR(f.coef[1], 0.5, 0.05);
        EXPECT_GT(f.r2, 0.95);
        EXPECT_NEAR(f.rmse, 1.0, 0.4);
        EXPECT_NEAR(f.residuals.sum(), 0.0, 1e-6);  // with an intercept, residuals sum to zero
    }
    EXPECT_GE(cover_a, 180);  // 95 % of 200 = 190; binomial sd ≈ 3
    EXPECT_LE(cover_a, 199);
    EXPECT_GE(cover_b, 180);
    EXPECT_LE(cover_b, 199);
}

TEST(Regression, WeightsFollowRelativeError) {
    // Two regimes: an unweighted fit is pulled by the largest point; 1/y² weights fit the
    // small points' relative error instead.
    Eigen::MatrixXd X(4, 1);
    Eigen::VectorXd y(4);
    X << 1, 2, 4, 1000;
    y << 1, 2, 4, 2000;
    auto plain = least_squares(X, y, {"b"});
    auto rel = least_squares(X, y, {"b"}, y.array().square().inverse().matrix());
    EXPECT_NEAR(plain.coef[0], 2.0, 0.01);
    EXPECT_LT(rel.coef[0], 1.5);
}

TEST(Regression, RefusesTooFewPointsAndDependentInputs) {
    Eigen::MatrixXd X(2, 3);
    X.setOnes();
    EXPECT_THROW(least_squares(X, Eigen::VectorXd::Ones(2), {"a", "b", "c"}), Error);
    Eigen::MatrixXd D(5, 2);
    for (int i = 0; i < 5; ++i) D(i, 0) = i, D(i, 1) = 2 * i;
    EXPECT_THROW(least_squares(D, Eigen::VectorXd::Ones(5), {"a", "b"}), Error);
}

TEST(Regression, PearsonWithFisherInterval) {
    std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8}, y{2, 4, 6, 8, 10, 12, 14, 16}, z{1, -1, 1, -1, 1, -1, 1, -1};
    auto c = pearson(x, y);
    EXPECT_NEAR(c.r, 1.0, 1e-9);
    auto d = pearson(x, z);
    EXPECT_LT(std::abs(d.r), 0.3);
    EXPECT_LT(d.lo, 0);
    EXPECT_GT(d.hi, 0);  // no correlation: the interval holds zero
    EXPECT_THROW(pearson({1, 1, 1}, {1, 2, 3}), Error);
}

// Nonnegative least squares: where every coefficient of the plain fit is ≥ 0 it is that fit;
// where the plain fit goes negative, the term is pinned at 0 and the rest refitted — and no
// prediction on inputs ≥ 0 comes out negative.
TEST(Regression, NonnegativeFitPinsANegativeTermAtZero) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(0, 10), noise(-0.01, 0.01);
    Eigen::MatrixXd X(30, 3);
    Eigen::VectorXd y(30), y_neg(30);
    for (int i = 0; i < 30; ++i) {
        X(i, 0) = 1, X(i, 1) = u(rng), X(i, 2) = u(rng);
        y[i] = 2 + 3 * X(i, 1) + 0.5 * X(i, 2) + noise(rng);
        y_neg[i] = 20 + 3 * X(i, 1) - 0.5 * X(i, 2) + noise(rng);  // the third term subtracts
    }
    const LinearFit plain = least_squares(X, y, {"a", "b", "c"});
    const LinearFit nn = nonnegative_least_squares(X, y, {"a", "b", "c"});
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(nn.coef[j], plain.coef[j], 1e-9) << j;
    const LinearFit pinned = nonnegative_least_squares(X, y_neg, {"a", "b", "c"});
    EXPECT_LT(least_squares(X, y_neg, {"a", "b", "c"}).coef[2], 0);
    EXPECT_EQ(pinned.coef[2], 0);
    EXPECT_TRUE(std::isnan(pinned.std_err[2]));
    EXPECT_GT(pinned.coef[0], 0);
    EXPECT_NEAR(pinned.coef[1], 3, 0.5);
    EXPECT_EQ(pinned.terms, (std::vector<std::string>{"a", "b", "c"}));
    for (int i = 0; i < 30; ++i) EXPECT_GT(X.row(i).dot(pinned.coef), 0);
    // Nothing fits with every coefficient ≥ 0 when y < 0 throughout: an error, not a fit.
    EXPECT_THROW(nonnegative_least_squares(X, -y, {"a", "b", "c"}), Error);
}
