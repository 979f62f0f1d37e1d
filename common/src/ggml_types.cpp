#include "profinfer/ggml_types.h"

namespace profinfer {

namespace {
// From ggml.c's type_traits (blck_size, type_size).
constexpr GgmlType kTypes[] = {
    {0, "f32", 1, 4},       {1, "f16", 1, 2},       {2, "q4_0", 32, 18},    {3, "q4_1", 32, 20},
    {6, "q5_0", 32, 22},    {7, "q5_1", 32, 24},    {8, "q8_0", 32, 34},    {9, "q8_1", 32, 36},
    {10, "q2_K", 256, 84},  {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144}, {13, "q5_K", 256, 176},
    {14, "q6_K", 256, 210}, {15, "q8_K", 256, 292}, {24, "i8", 1, 1},       {25, "i16", 1, 2},
    {26, "i32", 1, 4},      {27, "i64", 1, 8},      {28, "f64", 1, 8},      {30, "bf16", 1, 2},
};
}  // namespace

const GgmlType* ggml_type(uint32_t id) {
    for (const auto& t : kTypes)
        if (t.id == id) return &t;
    return nullptr;
}

const GgmlType* ggml_type(const std::string& name) {
    for (const auto& t : kTypes)
        if (name == t.name) return &t;
    return nullptr;
}

uint64_t ggml_bytes(uint32_t id, uint64_t n) {
    const GgmlType* t = ggml_type(id);
    return t ? (n + t->block_elems - 1) / t->block_elems * t->block_bytes : 0;
}

}  // namespace profinfer
