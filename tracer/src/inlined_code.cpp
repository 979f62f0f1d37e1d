#include "inlined_code.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include "profinfer/error.h"

namespace profinfer {

namespace {

struct Walk {
    const std::string& prefix;
    std::vector<GElf_Phdr> loads;  // the executable segments: virtual address → file offset
    std::vector<InlinedRange> out;

    uint64_t offset_of(uint64_t vaddr) const {
        for (const auto& ph : loads)
            if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_memsz) return vaddr - ph.p_vaddr + ph.p_offset;
        return 0;
    }

    void visit(Dwarf_Die* die, int depth) {
        const int tag = dwarf_tag(die);
        if (tag == DW_TAG_inlined_subroutine) {
            Dwarf_Attribute attr;
            const char* name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
            if (name && std::string_view(name).rfind(prefix, 0) == 0) {
                Dwarf_Addr base, lo, hi;
                for (ptrdiff_t off = 0; (off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0;)
                    if (uint64_t a = offset_of(lo); a && hi > lo) out.push_back({a, a + (hi - lo), name, depth});
            }
        }
        // Only code holds inlined code: skip types, variables and the like.
        if (tag != DW_TAG_compile_unit && tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine &&
            tag != DW_TAG_lexical_block && tag != DW_TAG_namespace && tag != DW_TAG_partial_unit)
            return;
        Dwarf_Die child;
        if (dwarf_child(die, &child) != 0) return;
        const int inner = depth + (tag == DW_TAG_inlined_subroutine ? 1 : 0);
        do visit(&child, tag == DW_TAG_subprogram ? 1 : inner);
        while (dwarf_siblingof(&child, &child) == 0);
    }
};

}  // namespace

std::vector<InlinedRange> inlined_ranges(const std::filesystem::path& path, const std::string& prefix) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno("opening " + path.string());
    elf_version(EV_CURRENT);
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    Walk w{prefix, {}, {}};
    if (Dwarf* dw = elf ? dwarf_begin_elf(elf, DWARF_C_READ, nullptr) : nullptr) {
        size_t nph = 0;
        elf_getphdrnum(elf, &nph);
        for (size_t i = 0; i < nph; ++i) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf, int(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) w.loads.push_back(ph);
        }
        Dwarf_Off off = 0, next;
        size_t hsize;
        while (dwarf_nextcu(dw, off, &next, &hsize, nullptr, nullptr, nullptr) == 0) {
            Dwarf_Die cu;
            if (dwarf_offdie(dw, off + hsize, &cu)) w.visit(&cu, 0);
            off = next;
        }
        dwarf_end(dw);
    }
    if (elf) elf_end(elf);
    ::close(fd);
    return std::move(w.out);
}

}  // namespace profinfer
