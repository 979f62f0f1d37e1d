// The BPF object as built for this architecture, checked without loading it (libbpf opens
// and parses it with no system call to the kernel's BPF): so it runs where BPF cannot load,
// e.g. the arm64 build under qemu-user (make test-arm64).
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "profinfer/events.h"
#include "kernel_features.h"
#include "tracer_bpf.skel.h"

namespace {

int struct_member(const btf* b, const char* type, const char* member) {
    const int id = btf__find_by_name_kind(b, type, BTF_KIND_STRUCT);
    if (id < 0) return -1;
    const btf_type* t = btf__type_by_id(b, id);
    const btf_member* m = btf_members(t);
    for (int i = 0; i < btf_vlen(t); ++i)
        if (std::string(btf__name_by_offset(b, m[i].name_off)) == member) return i;
    return -1;
}

}  // namespace

TEST(BpfObject, OpensWithEveryProgramAndThisArchitecturesRegisters) {
    tracer_bpf* skel = tracer_bpf__open();
    ASSERT_NE(skel, nullptr) << "libbpf could not open the embedded BPF object";
    std::set<std::string> progs;
    bpf_program* p;
    bpf_object__for_each_program(p, skel->obj) progs.insert(bpf_program__name(p));
    for (const char* must : {"llama_decode_enter", "extra_compute_forward", "sched_switch", "sched_switch_3arg", "wait_sample"})
        EXPECT_TRUE(progs.count(must)) << must;
    EXPECT_EQ(bpf_program__type(skel->progs.sched_switch), BPF_PROG_TYPE_TRACING);
    EXPECT_EQ(bpf_program__type(skel->progs.wait_sample), BPF_PROG_TYPE_PERF_EVENT);
    // The registers the uprobe programs read (CO-RE relocated against the kernel at load)
    // are this architecture's: arm64's user_pt_regs (x0.. in regs[], pc, sp), x86-64's
    // pt_regs (di, si, ip, sp).
    const btf* b = bpf_object__btf(skel->obj);
    ASSERT_NE(b, nullptr);
#if defined(__aarch64__)
    EXPECT_GE(struct_member(b, "user_pt_regs", "regs"), 0);
    EXPECT_GE(struct_member(b, "user_pt_regs", "pc"), 0);
    EXPECT_LT(struct_member(b, "pt_regs", "di"), 0);
#elif defined(__x86_64__)
    EXPECT_GE(struct_member(b, "pt_regs", "di"), 0);
    EXPECT_GE(struct_member(b, "pt_regs", "ip"), 0);
    EXPECT_LT(btf__find_by_name_kind(b, "user_pt_regs", BTF_KIND_STRUCT), 0);
#endif
    // The fallback for kernels before 5.14 carries its own flavour of task_struct.
    EXPECT_GE(struct_member(b, "task_struct___pre_5_14", "state"), 0);
    tracer_bpf__destroy(skel);
}

// For kernels before 5.12 (the boards' 5.10): the object's fetch-adds — in the branches
// has_atomic_fetch rules out — become plain atomic adds, and no fetch is left anywhere
// (5.10 refuses the whole program for one, reached or not).
TEST(BpfObject, FetchAddsAreRewrittenForKernelsWithoutThem) {
    tracer_bpf* skel = tracer_bpf__open();
    ASSERT_NE(skel, nullptr);
    auto fetches = [&] {
        int n = 0;
        bpf_program* p;
        bpf_object__for_each_program(p, skel->obj) {
            const bpf_insn* code = bpf_program__insns(p);
            for (size_t i = 0; i < bpf_program__insn_cnt(p); ++i)
                n += BPF_CLASS(code[i].code) == BPF_STX && BPF_MODE(code[i].code) == BPF_ATOMIC && (code[i].imm & BPF_FETCH);
        }
        return n;
    };
    const int before = fetches();
    EXPECT_GT(before, 0) << "graph numbers and decode-call windows use a fetch-add where the kernel has one";
    EXPECT_EQ(profinfer::drop_atomic_fetch(skel->obj), before);
    EXPECT_EQ(fetches(), 0);
    tracer_bpf__destroy(skel);
}
