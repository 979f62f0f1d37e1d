#include "kernel_features.h"
#include "profinfer/knobs.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "profinfer/error.h"

namespace profinfer {

namespace {

bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
    bpf_insn i{};
    i.code = code, i.dst_reg = dst, i.src_reg = src, i.off = off, i.imm = imm;
    return i;
}

// r1 = 1; *(u64 *)(r10 - 8) = r1; r1 = atomic_fetch_add((u64 *)(r10 - 8), r1); r0 = 0; exit
bool probe_atomic_fetch() {
    const bpf_insn prog[] = {
        insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 1),
        insn(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_1, -8, 0),
        insn(BPF_STX | BPF_ATOMIC | BPF_DW, BPF_REG_10, BPF_REG_1, -8, BPF_ADD | BPF_FETCH),
        insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0),
        insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    };
    const int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "pi_fetch_probe", "GPL", prog,
                                 sizeof prog / sizeof prog[0], nullptr);
    if (fd < 0) return false;
    close(fd);
    return true;
}

bool probe_helper(bpf_func_id id) { return libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, id, nullptr) == 1; }

}  // namespace

KernelFeatures KernelFeatures::probe() {
    const std::string f = knob(Knob::KernelFeatures).value_or("");
    if (f == "old") return KernelFeatures{false, false, false, false};
    if (!f.empty() && f != "probe")
        throw Error("PROFINFER_KERNEL_FEATURES must be old or probe, not '" + f + "'");
    KernelFeatures k;
    k.atomic_fetch = probe_atomic_fetch();
    k.task_btf = probe_helper(BPF_FUNC_get_current_task_btf);
    k.for_each = probe_helper(BPF_FUNC_for_each_map_elem);
    k.loop = probe_helper(BPF_FUNC_loop);
    return k;
}

int drop_atomic_fetch(bpf_object* obj) {
    int rewritten = 0;
    bpf_program* prog = nullptr;
    bpf_object__for_each_program(prog, obj) {
        const bpf_insn* code = bpf_program__insns(prog);
        std::vector<bpf_insn> insns(code, code + bpf_program__insn_cnt(prog));
        int here = 0;
        for (auto& i : insns) {
            if (BPF_CLASS(i.code) != BPF_STX || BPF_MODE(i.code) != BPF_ATOMIC || i.imm == BPF_ADD) continue;
            if (i.imm != (BPF_ADD | BPF_FETCH))
                throw Error(std::string("BPF program ") + bpf_program__name(prog) + " uses atomic operation 0x" +
                            [&] {
                                char b[16];
                                std::snprintf(b, sizeof b, "%x", unsigned(i.imm));
                                return std::string(b);
                            }() +
                            ", which this kernel's verifier refuses (before 5.12)");
            i.imm = BPF_ADD;
            ++here;
        }
        if (here && bpf_program__set_insns(prog, insns.data(), insns.size()) != 0)
            throw Error(std::string("could not rewrite the atomic fetch-adds of BPF program ") + bpf_program__name(prog));
        rewritten += here;
    }
    return rewritten;
}

std::string KernelFeatures::fallbacks() const {
    std::string s;
    for (auto [have, name] : {std::pair{atomic_fetch, "atomic-fetch"}, {task_btf, "task-btf"}, {for_each, "for-each"}, {loop, "loop"}})
        if (!have) s += (s.empty() ? "" : ",") + std::string(name);
    return s.empty() ? "none" : s;
}

}  // namespace profinfer
