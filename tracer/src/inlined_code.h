#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace profinfer {

// Code of a function the compiler inlined into another, from a library's DWARF: [lo, hi) as
// file offsets (what MappedLibrary::address_of takes), the inlined function's name, and how
// deep it sits (1: inlined into a function, 2: into an inlined one, ...).
struct InlinedRange {
    uint64_t lo, hi;
    std::string function;
    int depth;
};

// Every inlined copy of a function whose name starts with PREFIX in the library at PATH, in
// the order of the DWARF; none where it has no DWARF. (ggml dispatches an op to its kernel
// through functions the compiler inlines: GEGLU's and SWIGLU's kernels are both code of
// ggml_compute_forward_glu in the symbol table, and a sample there names its op only
// through this.)
std::vector<InlinedRange> inlined_ranges(const std::filesystem::path& path, const std::string& prefix);

}  // namespace profinfer
