#include "kernel_btf.h"

#include <bpf/btf.h>

namespace profinfer {

int tracepoint_arg_count(const std::string& tp) {
    struct btf* vmlinux = btf__load_vmlinux_btf();
    if (!vmlinux) return -1;
    int n = -1;
    const int id = btf__find_by_name_kind(vmlinux, ("btf_trace_" + tp).c_str(), BTF_KIND_TYPEDEF);
    const btf_type* t = id > 0 ? btf__type_by_id(vmlinux, id) : nullptr;  // typedef → pointer → prototype
    if (t) t = btf__type_by_id(vmlinux, t->type);
    if (t && btf_is_ptr(t)) t = btf__type_by_id(vmlinux, t->type);
    if (t && btf_is_func_proto(t)) n = int(btf_vlen(t)) - 1;
    btf__free(vmlinux);
    return n;
}

}  // namespace profinfer
