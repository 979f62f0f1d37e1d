#pragma once
#include <filesystem>
#include <set>
#include <string>

namespace profinfer {

// What the tracer needs to know of a shared library before attaching to it:
// which functions it defines (from .symtab and .dynsym), its GNU build id and
// whether it carries DWARF.
class ElfSymbols {
public:
    explicit ElfSymbols(const std::filesystem::path& path);

    bool has_function(const std::string& name) const { return functions_.count(name) != 0; }
    const std::set<std::string>& functions() const { return functions_; }
    const std::string& build_id() const { return build_id_; }
    bool has_debug_info() const { return has_debug_info_; }
    bool has_symtab() const { return has_symtab_; }

private:
    std::set<std::string> functions_;
    std::string build_id_;
    bool has_debug_info_ = false;
    bool has_symtab_ = false;
};

}  // namespace profinfer
