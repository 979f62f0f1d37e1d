#pragma once
// Where an entry uprobe goes. On x86-64 the kernel emulates a push of a register and a
// direct jump, conditional jump or call at the trap, and single-steps any other instruction
// out of line: a debug exception more per hit (~10 µs here against ~0.7 µs, measured by
// tracer/bench/probe_cost_bench). So an entry probe moves from the function's first
// instruction to the first emulated one of its straight-line start, when every call still
// passes there exactly once (no branch before it, none back into the part it skips) and the
// handler still finds what it reads: the argument registers it names, unwritten by the
// instructions skipped; a handler that reads the stack moves past an endbr64 only. Return
// probes never move (the kernel takes the return address from the stack at the entry).
#include <cstdint>
#include <filesystem>

namespace profinfer {

// What an entry handler reads of the state at the entry.
enum ProbeReads : uint32_t {
    kReadsNothing = 0,
    kReadsArg1 = 1,  // rdi
    kReadsArg2 = 2,  // rsi
    kReadsArg3 = 4,  // rdx
    kReadsStack = 8,
};

// File offset for an entry probe on the function at file OFFSET, SIZE bytes long, of LIB:
// OFFSET itself where nothing better is safe (and on other architectures).
uint64_t entry_probe_offset(const std::filesystem::path& lib, uint64_t offset, uint64_t size, uint32_t reads);

}  // namespace profinfer
