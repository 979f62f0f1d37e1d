#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "profinfer/events.h"

namespace profinfer {

// Where the probes find what they read in llama.cpp's structs, and the names of ggml's
// op enums. Taken from the binaries' DWARF when they carry it; otherwise the built-in
// table of the pinned llama.cpp, which the consumer validates on the first records
// (op in range, printable tensor name).
struct GgmlLayout {
    pi_layout offsets{};
    std::vector<std::string> op_names, unary_op_names, glu_op_names;
    std::string source;  // "DWARF of libggml-base.so.0.23.0, …" or "built-in (llama.cpp 80fb11a)"

    // The pinned version's layout (x86-64 and arm64 are both LP64: same offsets).
    static GgmlLayout builtin();
    // From DWARF: each library is searched for the structs and enums it defines.
    // Throws profinfer::Error naming what is missing if a library lacks one of them.
    static GgmlLayout from_dwarf(const std::vector<std::filesystem::path>& libraries);

    // "MUL_MAT", "UNARY(TANH)"-style display name, or "" for an out-of-range op.
    std::string op_name(uint32_t op, int32_t op_param0 = -1) const;
};

// The backend a ggml_backend.guid belongs to ("CPU", "BLAS", ...), from the pinned
// source's table; "" when unknown.
std::string backend_name_of_guid(const uint8_t* guid);

}  // namespace profinfer
