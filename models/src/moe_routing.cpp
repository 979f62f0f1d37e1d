#include "profinfer/moe_routing.h"

#include <cmath>
#include <cstdio>

#include "profinfer/error.h"

namespace profinfer {

MoeRouting MoeRouting::parse(const std::string& text) {
    MoeRouting r;
    if (text == "random") return r.kind = Kind::Random, r;
    if (text == "uniform") return r.s = 0, r;
    if (text.rfind("zipf:", 0) == 0) {
        const std::string v = text.substr(5);
        char* end = nullptr;
        r.s = std::strtod(v.c_str(), &end);
        if (!v.empty() && end && *end == 0 && std::isfinite(r.s) && r.s >= 0 && r.s <= 10) return r;
    }
    throw Error("MoE routing '" + text + "': expected random, uniform or zipf:S with 0 <= S <= 10 (e.g. zipf:1)");
}

std::string MoeRouting::str() const {
    if (kind == Kind::Random) return "random";
    char b[32];
    std::snprintf(b, sizeof b, "zipf:%g", s);
    return b;
}

std::vector<double> inclusion_probabilities(uint32_t experts, uint32_t used, double s) {
    if (experts == 0 || used == 0 || used > experts) throw Error("inclusion_probabilities: need 1 <= used <= experts");
    std::vector<double> pi(experts, 0.0);
    std::vector<bool> capped(experts, false);
    double left = used;  // what the uncapped ranks share
    for (bool again = true; again;) {
        again = false;
        double sum = 0;
        for (uint32_t r = 0; r < experts; ++r)
            if (!capped[r]) sum += std::pow(r + 1.0, -s);
        for (uint32_t r = 0; r < experts; ++r)
            if (!capped[r]) pi[r] = left * std::pow(r + 1.0, -s) / sum;
        for (uint32_t r = 0; r < experts; ++r)
            if (!capped[r] && pi[r] > 1) capped[r] = true, pi[r] = 1, left -= 1, again = true;
    }
    return pi;
}

std::vector<double> expected_reuse_distances(const std::vector<double>& pi, int steps, int max_d) {
    std::vector<double> h(size_t(std::max(max_d, 1)), 0.0);
    for (double p : pi)
        for (int d = 1; d < steps; ++d) h[size_t(std::min(d, max_d) - 1)] += (steps - d) * p * p * std::pow(1 - p, d - 1);
    return h;
}

}  // namespace profinfer
