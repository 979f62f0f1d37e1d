#pragma once
#include <cstdint>
#include <string>

namespace profinfer {

// ggml tensor types (values of enum ggml_type, stable across versions): the block each
// stores its elements in. One table for the synthesiser (what it writes) and the
// analysis (bytes an operator moves).
struct GgmlType {
    uint32_t id;
    const char* name;
    uint32_t block_elems;
    uint32_t block_bytes;
};

// nullptr for a type this table does not know.
const GgmlType* ggml_type(uint32_t id);
const GgmlType* ggml_type(const std::string& name);
// Bytes of N elements of type ID, or 0 for an unknown type.
uint64_t ggml_bytes(uint32_t id, uint64_t n_elements);

}  // namespace profinfer
