// The models reader on its own: this file is compiled with nothing but the header,
// nlohmann/json and GoogleTest (tests/CMakeLists.txt), as a scheduler would include it.
#include <gtest/gtest.h>

#include "profinfer/perf_models_reader.hpp"

using namespace profinfer;

TEST(PerfModels, ReaderAnswersFromTheJsonAlone) {
    nlohmann::json j{{"schema", "profinfer.models"}, {"version", 1}};
    j["matmul"] = {{{"backend", "cpu"}, {"type", "q4_0"}, {"threads", 2}, {"batch", "n=1"}, {"use", "linear"},
                    {"linear", {{"intercept_us", 5.0}, {"us_per_mnkh", 0.05}}}},
                   {{"backend", "gpu"}, {"type", "q4_0"}, {"threads", 2}, {"batch", "n=1"}, {"use", "roofline"},
                    {"roofline", {{"gops", 1000.0}, {"gbs", 100.0}, {"weight_bytes_per_elem", 0.5625}}}}};
    j["decode"] = {{{"backend", "cpu"}, {"type", "q4_0"}, {"threads", 2}, {"other_ms", {{"intercept", 1.0}, {"per_layer", 0.5}}}}};
    const perf::Models m(j);
    EXPECT_DOUBLE_EQ(*m.matmul_us("cpu", "q4_0", 2, 1000, 1, 100), 5.0 + 0.05 * 1e5);
    EXPECT_FALSE(m.matmul_us("cpu", "q4_0", 2, 1000, 8, 100));  // no N > 1 model
    EXPECT_FALSE(m.matmul_us("cpu", "f16", 2, 1000, 1, 100));
    // Roofline: weight bytes / bandwidth dominates at N = 1.
    const double bytes = 1000.0 * 100 * 0.5625 + 4.0 * 100 + 4.0 * 1000;
    EXPECT_NEAR(*m.matmul_us("gpu", "q4_0", 2, 1000, 1, 100), bytes / 100e3, 1e-9);
    auto best = m.best_backend("q4_0", 2, 1000, 1, 100);
    ASSERT_TRUE(best);
    EXPECT_EQ(best->first, "gpu");
    EXPECT_EQ(m.best_backend("q4_0", 2, 1000, 1, 100, 1, {"cpu"})->first, "cpu");
    const std::vector<perf::MatMulShape> shapes{perf::MatMulShape{"a", 1000, 100, 3}, perf::MatMulShape{"b", 10, 10, 1}};
    EXPECT_NEAR(*m.decode_ms(shapes, 4, "cpu", "q4_0", 2), (3 * (5 + 0.05 * 1e5) + (5 + 0.05 * 100)) / 1e3 + 1.0 + 0.5 * 4, 1e-9);
    EXPECT_FALSE(m.decode_ms(shapes, 4, "cpu", "q4_0", 1));
    j["version"] = 2;
    EXPECT_THROW(perf::Models{j}, std::runtime_error);
    j["version"] = 1, j["schema"] = "other";
    EXPECT_THROW(perf::Models{j}, std::runtime_error);
}

