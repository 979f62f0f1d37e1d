#pragma once
// --level op-sampled (docs/recording.md): operator time shares estimated from CPU-clock
// samples of the inference threads, each named by the function whose code it interrupted.
#include <cstdint>
#include <functional>
#include <string>

#include "profinfer/store.h"
#include "profinfer/table.h"

namespace profinfer {

// The operator type (as the exact levels name it: MUL_MAT, SOFT_MAX, ...) whose work runs in
// FUNCTION (a symbol of LIBRARY, mangled or not), or a bracketed bucket for what is no one
// operator's: "[barrier wait]" (ggml_barrier, libgomp), "[graph loop]" (the code between
// nodes: ggml_graph_compute_thread, the op dispatch, shape helpers), "[kernel]" (IN_KERNEL: a
// trap, a fault, a system call), "[other]" (a function no rule names, or no function).
// FLASH_ATTN: the trace's samples show flash attention's own code, and the f16 helpers it
// shares with an f16 MUL_MAT (dot products, V accumulation, Q to f16) are named its.
std::string op_of_sampled_function(const std::string& function, const std::string& library, bool in_kernel,
                                   bool flash_attn = false);

// The samples grouped by the function they fell in: its library and symbol ("" where none
// covers the address), its operator (op_of_sampled_function) and their number.
struct SampledFunction {
    std::string library, function, op;
    int64_t samples;
};
void for_each_sampled_function(store::Database& db, const std::function<void(const SampledFunction&)>& f);
// The sampling rate of an op-sampled trace (samples per second and CPU; 0 if unknown).
double sample_hz_of(store::Database& db);

// Whether the trace holds op-sampled samples.
bool has_cpu_samples(store::Database& db);

// Per op type and bucket: samples, the share of all samples taken in graphs, the share of the
// samples named by an operator (op_share_pct, what the exact op level's share is compared
// with) with its 95 % Wilson interval, and the CPU time the samples stand for (samples ×
// the sampling period). Estimates: the `estimate` column says so.
Table sampled_op_table(store::Database& db);

}  // namespace profinfer
