#pragma once
// The one median and the one quantile every caller uses (the studies, the fit, the
// analysis views' callers, the tracer's operator gates): linear interpolation between the
// two nearest order statistics (R's type 7), so the median of an even count is the mean of
// the middle two. NaN for no values.
#include <vector>

namespace profinfer {

double quantile_of(std::vector<double> v, double q);  // q in [0, 1]
inline double median_of(std::vector<double> v) { return quantile_of(std::move(v), 0.5); }

}  // namespace profinfer
