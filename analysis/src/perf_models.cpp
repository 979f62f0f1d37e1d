#include "profinfer/perf_models.h"

#include "profinfer/model_card.h"
#include "profinfer/error.h"
#include "profinfer/regression.h"

namespace fs = std::filesystem;

namespace profinfer {

std::vector<perf::MatMulShape> card_matmuls(const ModelCard& c) {
    if (c.experts > 0) throw Error(c.name + ": an MoE model; the decode model covers dense models only");
    const int64_t H = c.hidden, Q = int64_t(c.heads) * c.head_dim, KV = int64_t(c.kv_heads) * c.head_dim, F = c.ffn;
    const int L = int(c.layers);
    return {{"Qcur", Q, H, L},        {"Kcur", KV, H, L},     {"Vcur", KV, H, L},  {"attn_out", H, Q, L},
            {"ffn_gate", F, H, L},    {"ffn_up", F, H, L},    {"ffn_out", H, F, L}, {"result_output", int64_t(c.vocab), H, 1}};
}

LinearFit fit_matmul_line(const std::vector<double>& mnkh, const std::vector<double>& us) {
    const auto n = Eigen::Index(us.size());
    Eigen::MatrixXd X(n, 2);
    Eigen::VectorXd y(n), w(n);
    for (Eigen::Index i = 0; i < n; ++i)
        X(i, 0) = 1, X(i, 1) = mnkh[size_t(i)], y[i] = us[size_t(i)], w[i] = 1 / (us[size_t(i)] * us[size_t(i)]);
    return least_squares(X, y, {"intercept_us", "us_per_mnkh"}, w);
}

}  // namespace profinfer
