#pragma once
#include <string>

struct bpf_object;

namespace profinfer {

// What the running kernel's BPF verifier accepts, among what the tracer's programs use past
// the 5.10 kernels of the boards' vendor trees: each missing one makes the loader pick a
// fallback (tracer.bpf.c's has_* constants, the cpu_graph_exit_loop and
// llama_decode_exit_unrolled programs).
struct KernelFeatures {
    bool atomic_fetch = true;  // an atomic add whose old value is used (BPF_FETCH, 5.12)
    bool task_btf = true;      // bpf_get_current_task_btf (5.11)
    bool for_each = true;      // bpf_for_each_map_elem (5.13)
    bool loop = true;          // bpf_loop (5.17)

    // Probed by loading a tiny program for each. PROFINFER_KERNEL_FEATURES=old claims
    // none of them (the 5.10 path on any kernel, for the tests); =probe or unset: probed.
    static KernelFeatures probe();
    // The fallbacks in use, comma-separated ("atomic-fetch,task-btf,for-each,loop"), or "none".
    std::string fallbacks() const;
};

// Kernels before 5.12 refuse a program holding an atomic with BPF_FETCH anywhere — the check
// runs over every instruction before the verifier prunes the branches a rodata constant
// rules out — so where atomic_fetch is missing, each fetch-add of OBJ (opened, not loaded)
// becomes the plain atomic add 5.10 accepts. Only has_atomic_fetch's branch holds them (the
// fallback beside it is what runs), so the rewritten instruction is never reached. Any
// other atomic (and, or, xor, xchg, cmpxchg: all 5.12) is an error naming its program.
// Returns the instructions rewritten.
int drop_atomic_fetch(bpf_object* obj);

}  // namespace profinfer
