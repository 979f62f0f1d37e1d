#include "profinfer/number_text.h"

#include <cmath>
#include <cstdio>

#include <cerrno>
#include <cstdlib>

namespace profinfer {

namespace {
template <typename T, typename Parse>
std::optional<T> leading(const std::string& text, size_t* used, Parse parse) {
    if (used) *used = 0;
    char* end = nullptr;
    errno = 0;
    const T v = parse(text.c_str(), &end);
    const size_t n = size_t(end - text.c_str());
    if (n == 0 || errno == ERANGE) return std::nullopt;
    if (used) *used = n;
    return v;
}
}  // namespace

std::optional<double> leading_number(const std::string& text, size_t* used) {
    return leading<double>(text, used, [](const char* s, char** e) { return std::strtod(s, e); });
}

std::optional<int64_t> leading_integer(const std::string& text, size_t* used) {
    return leading<int64_t>(text, used, [](const char* s, char** e) { return int64_t(std::strtoll(s, e, 10)); });
}

std::string format_double(double v, const char* format) {
    if (!std::isfinite(v)) return "–";
    char b[64];
    std::snprintf(b, sizeof b, format, v);
    return b;
}

std::string format_with_interval(double median, double lo, double hi) {
    if (!std::isfinite(median)) return "–";
    return format_double(median) +
           (std::isfinite(lo) && std::isfinite(hi) ? " [" + format_double(lo) + ", " + format_double(hi) + "]" : "");
}

}  // namespace profinfer
