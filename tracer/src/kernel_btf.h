#pragma once
#include <string>

namespace profinfer {

// The number of arguments the running kernel's BTF gives tracepoint TP (its
// btf_trace_<TP> prototype, without the context pointer), or -1 when the kernel has no
// BTF for it. Tracepoint prototypes change between kernels (sched_switch gained
// prev_state in 5.18): the tracer picks the program that matches.
int tracepoint_arg_count(const std::string& tp);

}  // namespace profinfer
