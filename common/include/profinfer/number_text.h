#pragma once
// Numbers in text a person or a file wrote (options, meta values): the number at the
// start of TEXT and how many characters it took — nothing (and 0) when there is none or it
// is out of range — never an exception. Callers decide whether text may follow it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace profinfer {

std::optional<double> leading_number(const std::string& text, size_t* used = nullptr);
std::optional<int64_t> leading_integer(const std::string& text, size_t* used = nullptr);

// V as printf's FORMAT prints one double ("%.3g"), "–" when V is not finite: the tables'
// cells.
std::string format_double(double v, const char* format = "%.3g");
// A median with its interval as every table prints it: "42.1 [40.3, 43.0]" (3 significant
// digits), the median alone without a finite interval, "–" without a median.
std::string format_with_interval(double median, double lo, double hi);

}  // namespace profinfer
