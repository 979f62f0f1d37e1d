#include "profinfer/statistics.h"

#include <algorithm>
#include <cmath>

namespace profinfer {

double quantile_of(std::vector<double> v, double q) {
    if (v.empty() || !(q >= 0 && q <= 1)) return NAN;
    std::sort(v.begin(), v.end());
    const double at = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(at)), hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (at - double(lo)) * (v[hi] - v[lo]);
}

}  // namespace profinfer
