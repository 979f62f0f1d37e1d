#pragma once
// Least squares for the performance models (Eigen): coefficients with standard errors and
// 95 % confidence intervals, R², residuals; and Pearson's correlation with its interval.
// The figures (Fig. 10, 13) and `profinfer fit` use these, nothing else.
#include <Eigen/Dense>
#include <string>
#include <vector>

namespace profinfer {

struct LinearFit {
    std::vector<std::string> terms;   // a name per coefficient (column of X)
    Eigen::VectorXd coef, std_err;    // per term
    Eigen::VectorXd ci_lo, ci_hi;     // 95 % confidence interval per term (Student t)
    Eigen::VectorXd residuals;        // y − Xβ, per point
    double r2 = 0;                    // 1 − SS_res / SS_tot (weighted when weights are given)
    double rmse = 0;                  // root mean square residual (unweighted)
    size_t n = 0;

    double predict(const Eigen::VectorXd& x) const { return x.dot(coef); }
};

// β minimising Σ wᵢ (yᵢ − xᵢβ)² (wᵢ = 1 without weights; weights 1/yᵢ² minimise relative
// error). Throws profinfer::Error when there are fewer points than terms or X is rank-deficient.
LinearFit least_squares(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<std::string> terms,
                        const Eigen::VectorXd& weights = Eigen::VectorXd());

// The same, with every coefficient ≥ 0 (exact: the best of the least-squares fits on every
// subset of the terms whose coefficients all come out ≥ 0; the others are 0). For the few
// terms of a physical model (times that only add), P ≤ 12. Throws when no subset fits.
LinearFit nonnegative_least_squares(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<std::string> terms,
                                    const Eigen::VectorXd& weights = Eigen::VectorXd());

// The 0.975 quantile of Student's t with DOF degrees of freedom (Cornish–Fisher expansion;
// within 0.1 % for DOF ≥ 3, exact in the limit).
double t_quantile_975(double dof);

struct Correlation {
    double r = 0, lo = 0, hi = 0;  // Pearson's r and its 95 % interval (Fisher z)
    size_t n = 0;
};
Correlation pearson(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace profinfer
