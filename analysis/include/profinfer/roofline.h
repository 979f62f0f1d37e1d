#pragma once
// The roofline verdict the paper asks for but never computes: per operator, its
// arithmetic intensity (FLOPs per byte moved, from shapes and types), the roof this
// machine offers at that intensity (min(peak FLOP rate, bandwidth × intensity), from
// `profinfer bench-machine`) and how close the operator came to it.
#include <filesystem>
#include <string>

#include "profinfer/machine_bench.h"
#include "profinfer/stats.h"
#include "profinfer/trace_graph.h"

#include "profinfer/store.h"

namespace profinfer {

// FLOPs of one node from its op and shapes (multiply-add = 2).
double node_flops(const Node& n);

// The arithmetic a node's kernel does, naming its compute roof in MachineRoof::peak_gops:
// a MatMul by its weight type (f32, f16, bf16; int8 for quantised weights, whose
// activations llama.cpp quantises to 8 bits), everything else f32.
std::string compute_kind(const Node& n);

// Below this share of its roof an operator is limited by neither memory nor compute but
// by fixed costs: thread synchronisation, scheduling, dispatch.
constexpr double kOverheadShare = 0.10;

// Per operator name and op over the decode calls: mean time, FLOPs, bytes, intensity,
// achieved GFLOP/s and GB/s, the roof of its kind of arithmetic, % of roof and the verdict (memory-bound,
// compute-bound, overhead-dominated).
Table roofline_table(store::Database& db, const MachineBench& machine);

}  // namespace profinfer
