#include "elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "profinfer/error.h"

namespace profinfer {

ElfSymbols::ElfSymbols(const std::filesystem::path& path) {
    if (elf_version(EV_CURRENT) == EV_NONE) throw Error("libelf initialisation failed");
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno("opening " + path.string());
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
        if (elf) elf_end(elf);
        ::close(fd);
        throw Error(path.string() + " is not an ELF file");
    }
    size_t shstrndx = 0;
    elf_getshdrstrndx(elf, &shstrndx);
    // Virtual address → file offset through the loadable segments.
    std::vector<GElf_Phdr> loads;
    size_t nph = 0;
    elf_getphdrnum(elf, &nph);
    for (size_t i = 0; i < nph; ++i) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, int(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) loads.push_back(ph);
    }
    auto to_offset = [&](uint64_t vaddr) -> uint64_t {
        for (const auto& ph : loads)
            if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_memsz) return vaddr - ph.p_vaddr + ph.p_offset;
        return 0;
    };
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) continue;
        const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
        if (name && std::strcmp(name, ".debug_info") == 0) has_debug_info_ = true;
        if (sh.sh_type == SHT_NOTE) {
            Elf_Data* data = elf_getdata(scn, nullptr);
            size_t off = 0, name_off, desc_off;
            GElf_Nhdr nh;
            while (data && (off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
                if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                    std::memcmp(static_cast<char*>(data->d_buf) + name_off, "GNU", 4) == 0) {
                    static const char* hex = "0123456789abcdef";
                    auto* d = static_cast<unsigned char*>(data->d_buf) + desc_off;
                    for (size_t i = 0; i < nh.n_descsz; ++i) build_id_ += hex[d[i] >> 4], build_id_ += hex[d[i] & 15];
                }
            }
        }
        if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
        if (sh.sh_type == SHT_SYMTAB) has_symtab_ = true;
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (!data || sh.sh_entsize == 0) continue;
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; i < n; ++i) {
            GElf_Sym sym;
            if (!gelf_getsym(data, int(i), &sym)) continue;
            if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
            if (const char* s = elf_strptr(elf, sh.sh_link, sym.st_name))
                if (uint64_t off = to_offset(sym.st_value)) {
                    functions_.emplace(s, off);
                    sizes_.emplace(s, sym.st_size);
                }
        }
    }
    elf_end(elf);
    ::close(fd);
}

}  // namespace profinfer
