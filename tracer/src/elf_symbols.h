#pragma once
#include <filesystem>
#include <cstdint>
#include <map>
#include <string>

namespace profinfer {

// What the tracer needs to know of a shared library before attaching to it:
// which functions it defines (from .symtab and .dynsym) and where they are in the file
// (read once here rather than by libbpf for every probe), its GNU build id and whether
// it carries DWARF.
class ElfSymbols {
public:
    explicit ElfSymbols(const std::filesystem::path& path);

    bool has_function(const std::string& name) const { return functions_.count(name) != 0; }
    // File offset of a function's entry, as a uprobe wants it (0 if unknown).
    uint64_t file_offset(const std::string& name) const {
        auto it = functions_.find(name);
        return it == functions_.end() ? 0 : it->second;
    }
    // Its size in bytes (st_size; 0 if unknown).
    uint64_t function_size(const std::string& name) const {
        auto it = sizes_.find(name);
        return it == sizes_.end() ? 0 : it->second;
    }
    // Every function: name → file offset of its entry, and its size.
    const std::map<std::string, uint64_t>& functions() const { return functions_; }
    const std::string& build_id() const { return build_id_; }
    bool has_debug_info() const { return has_debug_info_; }
    bool has_symtab() const { return has_symtab_; }

private:
    std::map<std::string, uint64_t> functions_;  // name → file offset
    std::map<std::string, uint64_t> sizes_;      // name → st_size
    std::string build_id_;
    bool has_debug_info_ = false;
    bool has_symtab_ = false;
};

}  // namespace profinfer
