#include "struct_layout.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <set>

#include "ggml_tables.inc"
#include "profinfer/error.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

using Members = std::map<std::string, uint64_t>;
using Enumerators = std::map<std::string, int64_t>;

// The structs and enums wanted, found in one pass over a library's compile units.
class DwarfScan {
public:
    DwarfScan(std::set<std::string> structs, std::set<std::string> enums)
        : want_structs_(std::move(structs)), want_enums_(std::move(enums)) {}

    void scan(const fs::path& lib) {
        int fd = ::open(lib.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw_errno("opening " + lib.string());
        Dwarf* dw = dwarf_begin(fd, DWARF_C_READ);
        if (!dw) {
            ::close(fd);
            return;
        }
        Dwarf_Off off = 0, next;
        size_t hsize;
        while (!done() && dwarf_nextcu(dw, off, &next, &hsize, nullptr, nullptr, nullptr) == 0) {
            Dwarf_Die cu, die;
            if (dwarf_offdie(dw, off + hsize, &cu) && dwarf_child(&cu, &die) == 0) {
                do visit(&die);
                while (!done() && dwarf_siblingof(&die, &die) == 0);
            }
            off = next;
        }
        dwarf_end(dw);
        ::close(fd);
    }

    bool done() const { return structs_.size() == want_structs_.size() && enums_.size() == want_enums_.size(); }
    std::map<std::string, Members> structs_;
    std::map<std::string, Enumerators> enums_;

private:
    // Calls F(name, die) for each named child of DIE with tag TAG.
    template <class F>
    static void for_each_child(Dwarf_Die* die, int tag, F f) {
        Dwarf_Die child;
        if (dwarf_child(die, &child) != 0) return;
        do {
            const char* n = dwarf_diename(&child);
            if (n && dwarf_tag(&child) == tag) f(n, &child);
        } while (dwarf_siblingof(&child, &child) == 0);
    }

    void visit(Dwarf_Die* die) {
        const char* name = dwarf_diename(die);
        if (!name) return;
        int tag = dwarf_tag(die);
        Dwarf_Attribute a;
        if (tag == DW_TAG_structure_type && want_structs_.count(name) && !structs_.count(name) &&
            !dwarf_hasattr(die, DW_AT_declaration)) {
            Members& m = structs_[name];
            for_each_child(die, DW_TAG_member, [&](const char* n, Dwarf_Die* c) {
                Dwarf_Word v;
                if (dwarf_attr(c, DW_AT_data_member_location, &a) && dwarf_formudata(&a, &v) == 0) m[n] = v;
            });
        } else if (tag == DW_TAG_enumeration_type && want_enums_.count(name) && !enums_.count(name)) {
            Enumerators& e = enums_[name];
            for_each_child(die, DW_TAG_enumerator, [&](const char* n, Dwarf_Die* c) {
                Dwarf_Sword v;
                if (dwarf_attr(c, DW_AT_const_value, &a) && dwarf_formsdata(&a, &v) == 0) e[n] = v;
            });
        }
    }
    std::set<std::string> want_structs_, want_enums_;
};

std::vector<std::string> names_by_value(const Enumerators& e, const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& [n, v] : e) {
        if (n == prefix + "COUNT" || v < 0) continue;
        if (size_t(v) >= out.size()) out.resize(v + 1);
        out[v] = n.substr(prefix.size());
    }
    return out;
}

uint32_t member(const std::map<std::string, Members>& s, const std::string& st, const std::string& m) {
    auto it = s.find(st);
    if (it == s.end()) throw Error("DWARF has no struct " + st);
    auto jt = it->second.find(m);
    if (jt == it->second.end()) throw Error("DWARF struct " + st + " has no member " + m);
    return uint32_t(jt->second);
}

// 0 when the struct has no such member (an older ggml).
uint32_t optional_member(const std::map<std::string, Members>& s, const std::string& st, const std::string& m) {
    auto it = s.find(st);
    if (it == s.end()) return 0;
    auto jt = it->second.find(m);
    return jt == it->second.end() ? 0 : uint32_t(jt->second);
}

template <size_t N>
std::vector<std::string> to_vector(const char* const (&a)[N]) {
    return std::vector<std::string>(a, a + N);
}

uint32_t index_of(const std::vector<std::string>& names, const std::string& n) {
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == n) return uint32_t(i);
    throw Error("ggml has no op " + n);
}

}  // namespace

GgmlLayout GgmlLayout::builtin() {
    // struct ggml_tensor of the pinned ggml (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    // GGML_MAX_SRC 10, GGML_MAX_NAME 64): checked against DWARF by the tests.
    GgmlLayout l;
    auto& o = l.offsets;
    o.tensor_type = 0;
    o.tensor_ne = 16;
    o.tensor_nb = 48;
    o.tensor_op = 80;
    o.tensor_op_params = 84;
    o.tensor_flags = 148;
    o.tensor_src = 152;
    o.tensor_view_src = 232;
    o.tensor_data = 248;
    o.tensor_name = 256;
    o.params_ith = 0;
    o.params_nth = 4;
    o.cgraph_n_nodes = 4;
    o.cgraph_nodes = 16;
    o.cgraph_uid = 88;
    o.backend_guid = 0;
    o.batch_n_tokens = 0;
    o.batch_pos = 24;
    o.batch_seq_id = 40;
    o.batch_logits = 48;
    l.op_names = to_vector(kGgmlOpNames);
    l.unary_op_names = to_vector(kGgmlUnaryOpNames);
    l.glu_op_names = to_vector(kGgmlGluOpNames);
    o.op_mul_mat_id = index_of(l.op_names, "MUL_MAT_ID");
    l.source = "built-in table (pinned llama.cpp " PROFINFER_PINNED_COMMIT ")";
    return l;
}

GgmlLayout GgmlLayout::from_dwarf(const std::vector<fs::path>& libraries) {
    DwarfScan scan({"ggml_tensor", "ggml_compute_params", "ggml_cgraph", "ggml_backend", "llama_batch"},
                   {"ggml_op", "ggml_unary_op", "ggml_glu_op"});
    std::string from;
    for (const auto& lib : libraries) {
        if (scan.done()) break;
        size_t before = scan.structs_.size() + scan.enums_.size();
        scan.scan(lib);
        if (scan.structs_.size() + scan.enums_.size() > before)
            from += (from.empty() ? "" : ", ") + lib.filename().string();
    }
    const auto& s = scan.structs_;
    GgmlLayout l;
    auto& o = l.offsets;
    o.tensor_type = member(s, "ggml_tensor", "type");
    o.tensor_ne = member(s, "ggml_tensor", "ne");
    o.tensor_nb = member(s, "ggml_tensor", "nb");
    o.tensor_op = member(s, "ggml_tensor", "op");
    o.tensor_op_params = member(s, "ggml_tensor", "op_params");
    o.tensor_flags = member(s, "ggml_tensor", "flags");
    o.tensor_src = member(s, "ggml_tensor", "src");
    o.tensor_data = member(s, "ggml_tensor", "data");
    o.tensor_view_src = member(s, "ggml_tensor", "view_src");
    o.tensor_name = member(s, "ggml_tensor", "name");
    o.params_ith = member(s, "ggml_compute_params", "ith");
    o.params_nth = member(s, "ggml_compute_params", "nth");
    o.cgraph_n_nodes = member(s, "ggml_cgraph", "n_nodes");
    o.cgraph_nodes = member(s, "ggml_cgraph", "nodes");
    o.cgraph_uid = optional_member(s, "ggml_cgraph", "uid");
    o.backend_guid = member(s, "ggml_backend", "guid");
    o.batch_n_tokens = member(s, "llama_batch", "n_tokens");
    o.batch_pos = member(s, "llama_batch", "pos");
    o.batch_seq_id = member(s, "llama_batch", "seq_id");
    o.batch_logits = member(s, "llama_batch", "logits");
    for (const char* e : {"ggml_op", "ggml_unary_op", "ggml_glu_op"})
        if (!scan.enums_.count(e)) throw Error(std::string("DWARF has no enum ") + e);
    l.op_names = names_by_value(scan.enums_.at("ggml_op"), "GGML_OP_");
    l.unary_op_names = names_by_value(scan.enums_.at("ggml_unary_op"), "GGML_UNARY_OP_");
    l.glu_op_names = names_by_value(scan.enums_.at("ggml_glu_op"), "GGML_GLU_OP_");
    o.op_mul_mat_id = index_of(l.op_names, "MUL_MAT_ID");
    l.source = "DWARF of " + from;
    return l;
}

std::string backend_name_of_guid(const uint8_t* guid) {
    for (const auto& k : kKnownBackendGuids)
        if (std::equal(guid, guid + 16, k.guid)) return k.name;
    return "";
}

std::string GgmlLayout::op_name(uint32_t op, int32_t op_param0) const {
    if (op >= op_names.size()) return "";
    const std::string& n = op_names[op];
    const std::vector<std::string>* sub = n == "UNARY" ? &unary_op_names : n == "GLU" ? &glu_op_names : nullptr;
    if (sub && op_param0 >= 0 && size_t(op_param0) < sub->size()) return (*sub)[op_param0];
    return n;
}

}  // namespace profinfer
