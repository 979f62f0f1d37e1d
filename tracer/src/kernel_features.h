#pragma once
#include <string>

namespace profinfer {

// What the running kernel's BPF verifier accepts, among what the tracer's programs use past
// the 5.10 kernels of the boards' vendor trees: each missing one makes the loader pick a
// fallback (tracer.bpf.c's has_* constants, the cpu_graph_exit_loop program).
struct KernelFeatures {
    bool atomic_fetch = true;  // an atomic add whose old value is used (BPF_FETCH, 5.12)
    bool task_btf = true;      // bpf_get_current_task_btf (5.11)
    bool for_each = true;      // bpf_for_each_map_elem (5.13)

    // Probed by loading a tiny program for each. PROFINFER_KERNEL_FEATURES=old claims
    // none of them (the 5.10 path on any kernel, for the tests); =probe or unset: probed.
    static KernelFeatures probe();
    // The fallbacks in use, comma-separated ("atomic-fetch,task-btf,for-each"), or "none".
    std::string fallbacks() const;
};

}  // namespace profinfer
