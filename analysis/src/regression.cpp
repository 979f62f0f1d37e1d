#include "profinfer/regression.h"

#include <cmath>
#include <optional>

#include "profinfer/error.h"

namespace profinfer {

double t_quantile_975(double v) {
    if (v <= 0) return NAN;
    const double z = 1.959963984540054;
    const double z2 = z * z, z3 = z2 * z, z5 = z3 * z2, z7 = z5 * z2, z9 = z7 * z2;
    // Abramowitz & Stegun 26.7.5.
    return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) +
           (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v) +
           (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * v * v * v * v);
}

LinearFit least_squares(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<std::string> terms,
                        const Eigen::VectorXd& weights) {
    const auto n = X.rows(), p = X.cols();
    if (y.size() != n || (weights.size() && weights.size() != n) || Eigen::Index(terms.size()) != p)
        throw Error("least_squares: X, y, weights and terms do not agree in size");
    if (n < p) throw Error("least squares: " + std::to_string(n) + " points for " + std::to_string(p) + " coefficients");
    const Eigen::VectorXd w = weights.size() ? weights : Eigen::VectorXd::Ones(n);
    const Eigen::VectorXd sw = w.cwiseSqrt();
    const Eigen::MatrixXd A = sw.asDiagonal() * X;
    const Eigen::VectorXd b = sw.asDiagonal() * y;
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(A);
    if (qr.rank() < p) throw Error("least squares: the inputs are linearly dependent (rank " + std::to_string(qr.rank()) +
                                   " of " + std::to_string(p) + ")");
    LinearFit f;
    f.terms = std::move(terms);
    f.n = size_t(n);
    f.coef = qr.solve(b);
    f.residuals = y - X * f.coef;
    const Eigen::VectorXd wr = sw.asDiagonal() * f.residuals;
    const double ss_res = wr.squaredNorm();
    const double ybar = (w.array() * y.array()).sum() / w.sum();
    const double ss_tot = (w.array() * (y.array() - ybar).square()).sum();
    f.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
    f.rmse = std::sqrt(f.residuals.squaredNorm() / double(n));
    const double dof = double(n - p);
    f.std_err = Eigen::VectorXd::Constant(p, NAN);
    f.ci_lo = f.ci_hi = f.coef;
    if (dof > 0) {
        const double s2 = ss_res / dof;
        const Eigen::MatrixXd cov = (A.transpose() * A).inverse() * s2;
        const double t = t_quantile_975(dof);
        for (Eigen::Index i = 0; i < p; ++i) {
            f.std_err[i] = std::sqrt(std::max(0.0, cov(i, i)));
            f.ci_lo[i] = f.coef[i] - t * f.std_err[i];
            f.ci_hi[i] = f.coef[i] + t * f.std_err[i];
        }
    }
    return f;
}

LinearFit nonnegative_least_squares(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, std::vector<std::string> terms,
                                    const Eigen::VectorXd& weights) {
    const auto n = X.rows(), p = X.cols();
    if (p > 12) throw Error("nonnegative least squares: " + std::to_string(p) + " terms, at most 12");
    if (Eigen::Index(terms.size()) != p) throw Error("nonnegative least squares: X and terms do not agree in size");
    const Eigen::VectorXd w = weights.size() ? weights : Eigen::VectorXd::Ones(n);
    std::optional<LinearFit> best;
    double best_ss = INFINITY;
    for (unsigned mask = 1; mask < (1u << p); ++mask) {
        std::vector<Eigen::Index> cols;
        for (Eigen::Index j = 0; j < p; ++j)
            if (mask & (1u << j)) cols.push_back(j);
        if (Eigen::Index(cols.size()) > n) continue;
        Eigen::MatrixXd Xs(n, Eigen::Index(cols.size()));
        std::vector<std::string> names;
        for (size_t c = 0; c < cols.size(); ++c) Xs.col(Eigen::Index(c)) = X.col(cols[c]), names.push_back(terms[size_t(cols[c])]);
        LinearFit f;
        try {
            f = least_squares(Xs, y, names, w);
        } catch (const Error&) {
            continue;  // this subset's terms are dependent
        }
        if ((f.coef.array() < 0).any()) continue;
        const double ss = (w.array() * f.residuals.array().square()).sum();
        if (ss >= best_ss) continue;
        // Back to every term: the ones left out at 0 (no interval: pinned by the constraint).
        LinearFit full;
        full.terms = terms;
        full.n = f.n, full.r2 = f.r2, full.rmse = f.rmse, full.residuals = f.residuals;
        full.coef = full.ci_lo = full.ci_hi = Eigen::VectorXd::Zero(p);
        full.std_err = Eigen::VectorXd::Constant(p, NAN);
        for (size_t c = 0; c < cols.size(); ++c) {
            const Eigen::Index j = cols[c], i = Eigen::Index(c);
            full.coef[j] = f.coef[i], full.std_err[j] = f.std_err[i], full.ci_lo[j] = f.ci_lo[i], full.ci_hi[j] = f.ci_hi[i];
        }
        best = std::move(full), best_ss = ss;
    }
    if (!best) throw Error("nonnegative least squares: no subset of the terms fits with coefficients >= 0");
    return *best;
}

Correlation pearson(const std::vector<double>& x, const std::vector<double>& y) {
    if (x.size() != y.size()) throw Error("pearson: x and y differ in length");
    Correlation c;
    c.n = x.size();
    if (c.n < 3) throw Error("pearson: needs 3 points or more, has " + std::to_string(c.n));
    const Eigen::Map<const Eigen::ArrayXd> a(x.data(), Eigen::Index(c.n)), b(y.data(), Eigen::Index(c.n));
    const Eigen::ArrayXd da = a - a.mean(), db = b - b.mean();
    const double den = std::sqrt(da.square().sum() * db.square().sum());
    if (den == 0) throw Error("pearson: one of the two variables is constant");
    c.r = (da * db).sum() / den;
    if (c.n > 3) {
        const double z = std::atanh(std::clamp(c.r, -0.999999999, 0.999999999)), half = 1.959963984540054 / std::sqrt(double(c.n) - 3);
        c.lo = std::tanh(z - half), c.hi = std::tanh(z + half);
    } else {
        c.lo = -1, c.hi = 1;
    }
    return c;
}

}  // namespace profinfer
