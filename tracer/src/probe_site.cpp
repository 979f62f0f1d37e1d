#include "probe_site.h"

#include <fstream>
#include <vector>

#if defined(__x86_64__)
#include <capstone/capstone.h>
#endif

namespace profinfer {

#if defined(__x86_64__)
namespace {

// The register REG (any width) is, or is part of, an argument register READS names.
bool touches_read_register(uint16_t reg, uint32_t reads) {
    switch (reg) {
        case X86_REG_RDI: case X86_REG_EDI: case X86_REG_DI: case X86_REG_DIL: return reads & kReadsArg1;
        case X86_REG_RSI: case X86_REG_ESI: case X86_REG_SI: case X86_REG_SIL: return reads & kReadsArg2;
        case X86_REG_RDX: case X86_REG_EDX: case X86_REG_DX: case X86_REG_DL: case X86_REG_DH: return reads & kReadsArg3;
        default: return false;
    }
}

bool is_direct_branch(csh cs, const cs_insn& i) {
    const cs_x86& x = i.detail->x86;
    const bool branch = cs_insn_group(cs, &i, CS_GRP_JUMP) || cs_insn_group(cs, &i, CS_GRP_CALL);
    return branch && x.op_count == 1 && x.operands[0].type == X86_OP_IMM;
}

// What the kernel emulates instead of single-stepping (arch/x86/kernel/uprobes.c): a push of
// a register, and direct jumps, conditional jumps and calls (loop/jrcxz are stepped).
bool is_emulated(csh cs, const cs_insn& i) {
    if (i.id == X86_INS_PUSH) return i.detail->x86.op_count == 1 && i.detail->x86.operands[0].type == X86_OP_REG;
    if (i.id == X86_INS_LOOP || i.id == X86_INS_LOOPE || i.id == X86_INS_LOOPNE || i.id == X86_INS_JRCXZ ||
        i.id == X86_INS_JECXZ)
        return false;
    return is_direct_branch(cs, i);
}

}  // namespace

uint64_t entry_probe_offset(const std::filesystem::path& lib, uint64_t offset, uint64_t size, uint32_t reads) {
    if (!offset) return offset;
    size = std::min<uint64_t>(size ? size : 64, 1 << 16);
    std::vector<uint8_t> code(size);
    std::ifstream f(lib, std::ios::binary);
    if (!f.seekg(std::streamoff(offset)) || !f.read(reinterpret_cast<char*>(code.data()), std::streamsize(size)))
        return offset;
    csh cs;
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &cs) != CS_ERR_OK) return offset;
    cs_option(cs, CS_OPT_DETAIL, CS_OPT_ON);
    cs_insn* insn = nullptr;
    const size_t n = cs_disasm(cs, code.data(), code.size(), offset, 0, &insn);
    uint64_t site = offset;
    for (size_t k = 0; k < n; ++k) {
        const cs_insn& i = insn[k];
        if (i.id == X86_INS_ENDBR64) continue;
        if (is_emulated(cs, i)) {
            site = i.address;
            break;
        }
        // Not emulated: single-stepped where it is. Stop at it unless the handler may run
        // after it: only straight-line code that leaves what the handler reads alone.
        cs_regs read_regs, written;
        uint8_t n_read = 0, n_written = 0;
        bool keeps = !(reads & kReadsStack) && !cs_insn_group(cs, &i, CS_GRP_JUMP) && !cs_insn_group(cs, &i, CS_GRP_CALL) &&
                     !cs_insn_group(cs, &i, CS_GRP_RET) && !cs_insn_group(cs, &i, CS_GRP_INT) &&
                     !cs_insn_group(cs, &i, CS_GRP_IRET) &&
                     cs_regs_access(cs, &i, read_regs, &n_read, written, &n_written) == CS_ERR_OK;
        for (uint8_t w = 0; keeps && w < n_written; ++w)
            if (touches_read_register(written[w], reads)) keeps = false;
        if (!keeps) {
            site = i.address;
            break;
        }
    }
    // Nothing in the function may jump into the part skipped (a loop back to the start would
    // pass the probe more than once per call).
    for (size_t k = 0; k < n && site != offset; ++k) {
        const cs_insn& i = insn[k];
        if (!is_direct_branch(cs, i)) continue;
        const uint64_t target = uint64_t(i.detail->x86.operands[0].imm);
        if (target > offset && target <= site) site = offset;
    }
    cs_free(insn, n);
    cs_close(&cs);
    return site;
}

#else

uint64_t entry_probe_offset(const std::filesystem::path&, uint64_t offset, uint64_t, uint32_t) { return offset; }

#endif

}  // namespace profinfer
