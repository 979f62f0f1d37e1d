#include "probe_attacher.h"

#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "elf_symbols.h"
#include "inlined_code.h"
#include "profinfer/error.h"
#include "tracer_bpf.skel.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// Which probes the operator level uses for a libggml-cpu, chosen per binary.
enum class OpStrategy { None, ComputeForward, NodeHooks };
const char* to_string(OpStrategy s) {
    switch (s) {
        case OpStrategy::ComputeForward: return "ggml_compute_forward";
        case OpStrategy::NodeHooks: return "ggml_cpu_extra_compute_forward + ggml_compute_forward_rms_norm_mul_fused";
        case OpStrategy::None: return "none";
    }
    return "?";
}

// Op: one probe hit per node and thread. Wait adds ggml_barrier, another hit or more per
// node and thread, for the compute/wait split (paper Fig. 6): the costliest probe, so it
// comes with --level full only.
enum class Group { Token, Graph, Op, Wait };

// One uprobe or uretprobe attached in every mapped library of ROLE that defines SYMBOL
// (or the first of several candidates, "a|b": the static functions of a C++ library go by
// mangled names that a compiler's clones change, as in "….isra.0").
struct Probe {
    const char* symbol;
    LibRole role;
    bool retprobe;
    bpf_program* (*program)(tracer_bpf*);
    Group group;
    bool required;  // recording at this level is impossible without it
    OpStrategy only_for = OpStrategy::None;  // operator probes belong to one strategy (None: all)
    uint32_t reads = kReadsStack;  // what its entry handler reads (probe_site.h): where it may go
};

#define PROG(name) [](tracer_bpf* s) { return s->progs.name; }
const Probe kProbes[] = {
    {"llama_decode", LibRole::Llama, false, PROG(llama_decode_enter), Group::Token, true},
    // llama_decode_exit_unrolled where the kernel lacks bpf_loop (the loader loads one).
    {"llama_decode", LibRole::Llama, true,
     [](tracer_bpf* s) {
         return bpf_program__autoload(s->progs.llama_decode_exit) ? s->progs.llama_decode_exit
                                                                  : s->progs.llama_decode_exit_unrolled;
     },
     Group::Token, true},
    {"ggml_backend_graph_compute_async", LibRole::GgmlBase, false, PROG(backend_graph_enter), Group::Graph, true,
     OpStrategy::None, kReadsArg1 | kReadsArg2},
    {"ggml_backend_graph_compute_async", LibRole::GgmlBase, true, PROG(backend_graph_exit), Group::Graph, true},
    {"ggml_graph_compute", LibRole::GgmlCpu, false, PROG(cpu_graph_enter), Group::Graph, true, OpStrategy::None,
     kReadsArg1},
    // cpu_graph_exit_loop where the kernel lacks bpf_for_each_map_elem (the loader loads one).
    {"ggml_graph_compute", LibRole::GgmlCpu, true,
     [](tracer_bpf* s) {
         return bpf_program__autoload(s->progs.cpu_graph_exit) ? s->progs.cpu_graph_exit : s->progs.cpu_graph_exit_loop;
     },
     Group::Graph, true},
    {"ggml_compute_forward", LibRole::GgmlCpu, false, PROG(compute_forward), Group::Op, true, OpStrategy::ComputeForward,
     kReadsArg1 | kReadsArg2},
    {"ggml_cpu_extra_compute_forward", LibRole::GgmlCpu, false, PROG(extra_compute_forward), Group::Op, true,
     OpStrategy::NodeHooks, kReadsArg1 | kReadsArg2},
    {"ggml_compute_forward_rms_norm_mul_fused", LibRole::GgmlCpu, false, PROG(rms_norm_mul_fused), Group::Op, false,
     OpStrategy::None, kReadsArg1 | kReadsArg2 | kReadsArg3},
    {"ggml_barrier", LibRole::GgmlCpu, false, PROG(barrier_enter), Group::Wait, true, OpStrategy::None, kReadsNothing},
    // ggml-vulkan's host side (docs/recording.md): a node's dispatch at --level op, the
    // submits and fence waits at --level graph. Static functions: optional.
#define VK_BUILD_GRAPH                                                                           \
    "_ZL19ggml_vk_build_graphP23ggml_backend_vk_contextP11ggml_cgraphiP11ggml_tensoribbb.isra.0|" \
    "_ZL19ggml_vk_build_graphP23ggml_backend_vk_contextP11ggml_cgraphiP11ggml_tensoribbb"
    {VK_BUILD_GRAPH, LibRole::GgmlVulkan, false, PROG(vk_build_graph_enter), Group::Op, false, OpStrategy::None,
     kReadsArg1 | kReadsArg2 | kReadsArg3},
    {VK_BUILD_GRAPH, LibRole::GgmlVulkan, true, PROG(vk_build_graph_exit), Group::Op, false},
#undef VK_BUILD_GRAPH
    {"_ZL14ggml_vk_submitRSt10shared_ptrI17vk_context_structEN2vk5FenceE", LibRole::GgmlVulkan, false,
     PROG(vk_submit_enter), Group::Graph, false},
    {"_ZL14ggml_vk_submitRSt10shared_ptrI17vk_context_structEN2vk5FenceE", LibRole::GgmlVulkan, true,
     PROG(vk_submit_exit), Group::Graph, false},
    {"_ZL22ggml_vk_wait_for_fenceP23ggml_backend_vk_context", LibRole::GgmlVulkan, false, PROG(vk_fence_wait_enter),
     Group::Graph, false},
    {"_ZL22ggml_vk_wait_for_fenceP23ggml_backend_vk_context", LibRole::GgmlVulkan, true, PROG(vk_fence_wait_exit),
     Group::Graph, false},
    {"_ZL19ggml_vk_synchronizeP23ggml_backend_vk_context", LibRole::GgmlVulkan, false, PROG(vk_synchronize_enter),
     Group::Graph, false},
    {"_ZL19ggml_vk_synchronizeP23ggml_backend_vk_context", LibRole::GgmlVulkan, true, PROG(vk_synchronize_exit),
     Group::Graph, false},
};

// The first of P's candidate symbols that ELF defines; empty if none.
std::string resolve(const ElfSymbols& elf, const char* candidates) {
    std::string all = candidates;
    for (size_t start = 0; start <= all.size();) {
        size_t bar = all.find('|', start);
        std::string name = all.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
        if (elf.has_function(name)) return name;
        if (bar == std::string::npos) break;
        start = bar + 1;
    }
    return "";
}
#undef PROG

Group max_group(TraceLevel l) {
    switch (l) {
        case TraceLevel::Token: return Group::Token;
        case TraceLevel::Graph: return Group::Graph;
        case TraceLevel::OpSampled: return Group::Graph;
        case TraceLevel::Op: return Group::Op;
        case TraceLevel::Full: return Group::Wait;
    }
    return Group::Token;
}
bool is_op_group(Group g) { return g == Group::Op || g == Group::Wait; }

OpStrategy choose_strategy(const ElfSymbols& elf) {
    if (elf.has_function("ggml_compute_forward")) return OpStrategy::ComputeForward;
    if (elf.has_function("ggml_cpu_extra_compute_forward")) return OpStrategy::NodeHooks;
    return OpStrategy::None;
}

}  // namespace

struct ProbeAttacher::Attached {
    bpf_link* link;
    const Probe* probe;  // null for the loader watch and tracepoints
    fs::path lib;
};

// A library with operator-level probes (a libggml-cpu, a libggml-vulkan): what the
// operator gate re-attaches.
struct ProbeAttacher::OpLibrary {
    fs::path path;
    LibRole role;
    OpStrategy strategy;
    std::shared_ptr<ElfSymbols> symbols;
};

ProbeAttacher::ProbeAttacher(tracer_bpf* skel, pid_t pid, TraceLevel level, WaitMethod wait, store::TraceTables& tables)
    : skel_(skel), pid_(pid), level_(level), wait_(wait), tables_(tables), layout_(GgmlLayout::builtin()) {
    skel_->bss->layout = layout_.offsets;
}

ProbeAttacher::~ProbeAttacher() { detach_all(); }

void ProbeAttacher::leave_out_unused_programs() {
    std::set<bpf_program*> used, unused;
    for (const Probe& p : kProbes) (p.group <= max_group(level_) ? used : unused).insert(p.program(skel_));
    for (bpf_program* prog : unused)
        if (!used.count(prog)) bpf_program__set_autoload(prog, false);
}

namespace {
// Closing a uprobe waits for the kernel's grace period, about 0.1 s each here (strace:
// close of a uprobe perf event 96-116 ms, Linux 6.18): one closing thread per link lets
// the waits overlap.
void destroy_links(const std::vector<bpf_link*>& links) {
    std::vector<std::thread> closers;
    for (bpf_link* l : links) closers.emplace_back([l] { bpf_link__destroy(l); });
    for (auto& t : closers) t.join();
}
}  // namespace

void ProbeAttacher::ops_off() { __atomic_store_n(&skel_->data->ops_enabled, false, __ATOMIC_RELEASE); }

void ProbeAttacher::detach_all() {
    // Operators off before the probes go: they do not go at one instant (each close waits
    // out a grace period, far longer in an emulated board), and a decode call that ran in
    // between was recorded in part — its nodes on the probes still in, none on those gone
    // (two whole calls with 80 of their 90 operator records, seen on a 6.1 virtual board).
    // Now the call under way is cut where the stop found it (counted as cut) and later
    // ones record no operator.
    if (!attached_.empty()) ops_off();
    std::vector<bpf_link*> links;
    for (auto& a : attached_) links.push_back(a.link);
    attached_.clear();
    destroy_links(links);
}

void ProbeAttacher::attach_tracepoint(bpf_program* prog, const char* name) {
    bpf_link* l = bpf_program__attach(prog);
    const int err = l ? 0 : errno;
    record_probe(name, "", "tp_btf", l != nullptr, l ? "" : std::strerror(err));
    if (!l) throw Error(std::string("cannot attach tracepoint ") + name + ": " + std::strerror(err));
    attached_.push_back({l, nullptr, {}});
}

// OFFSET: the function's file offset when we know it (ElfSymbols); 0 lets libbpf
// resolve SYMBOL itself.
// SIZE and READS: the function's size and what the entry handler reads (probe_site.h).
bpf_link* ProbeAttacher::attach_uprobe(bpf_program* prog, const fs::path& lib, const char* symbol, bool ret, uint64_t offset,
                                       uint64_t size, uint32_t reads) {
    if (!ret) offset = entry_probe_offset(lib, offset, size, reads);
    LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret, .func_name = offset ? nullptr : symbol);
    // --ablate attach: into profinfer itself, which does not map LIB — the kernel
    // writes no breakpoint into the target, everything else is as recorded (the loader watch
    // stays: the libraries are found, read and stopped for as always).
    const bool ablated = skel_->rodata->ablate == PI_ABLATE_ATTACH && prog != skel_->progs.dl_debug_state;
    const pid_t into = ablated ? getpid() : pid_;
    return bpf_program__attach_uprobe_opts(prog, into, lib.c_str(), offset, &uo);
}

void ProbeAttacher::record_probe(const std::string& symbol, const std::string& lib, const char* kind, bool ok,
                  const std::string& reason) {
    tables_.add(store::ProbeRow{symbol, lib, kind, ok, reason});
}

void ProbeAttacher::attach_loader_watch(bool every_process) {
    fs::path ld = every_process ? own_dynamic_loader() : dynamic_loader_of(pid_);
    const pid_t target = pid_;
    if (every_process) pid_ = -1;
    bpf_link* l = attach_uprobe(skel_->progs.dl_debug_state, ld, "_dl_debug_state", false, 0);
    pid_ = target;
    int err = l ? 0 : errno;
    record_probe("_dl_debug_state", ld, "uprobe", l != nullptr, l ? "" : std::strerror(err));
    if (!l && (err == EACCES || err == EPERM))
        throw Error("attaching uprobes was refused (" + std::string(std::strerror(err)) +
                    "): run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (see docs/reliability.md)");
    if (!l)
        throw Error("cannot attach to " + ld.string() + ":_dl_debug_state (" + std::strerror(err) +
                    "); without it libraries loaded later would be missed");
    attached_.push_back({l, nullptr, ld});
}

bool ProbeAttacher::seen_role(LibRole r) const {
    for (const auto& [path, role] : libraries_)
        if (role == r) return true;
    return false;
}

// DWARF when the ggml libraries carry it; otherwise the built-in table stays.
void ProbeAttacher::update_layout() {
    std::vector<fs::path> with_dwarf;
    for (const auto& [path, role] : libraries_)
        if (debug_info_[path] && (role == LibRole::GgmlBase || role == LibRole::GgmlCpu || role == LibRole::Llama))
            with_dwarf.push_back(path);
    std::sort(with_dwarf.begin(), with_dwarf.end(), [&](const fs::path& a, const fs::path& b) {
        return libraries_[a] == LibRole::Llama ? false : libraries_[b] == LibRole::Llama;  // libllama last: largest
    });
    if (with_dwarf.size() == dwarf_libs_used_) return;
    try {
        layout_ = GgmlLayout::from_dwarf(with_dwarf);
        dwarf_libs_used_ = with_dwarf.size();
    } catch (const Error&) {
        return;  // not all structs yet (libggml-cpu not loaded): keep what we have
    }
    skel_->bss->layout = layout_.offsets;
}

// Looks at the target's mappings and attaches to every library not seen before.
void ProbeAttacher::attach_new_libraries() {
    std::vector<std::string> fatal;
    std::vector<MappedLibrary> fresh;
    const auto mapped = mapped_libraries(pid_);
    // Whatever happens below, the sampled split classifies by what is mapped now (a
    // dlclose'd CPU variant's code is no longer barrier code).
    struct Ranges {
        ProbeAttacher& p;
        const std::vector<MappedLibrary>& m;
        ~Ranges() {
            try {
                p.update_wait_ranges(m);
            } catch (...) {
                // only the meta line can fail (a full disk): the consumer reports that
            }
        }
    } ranges{*this, mapped};
    for (const auto& lib : mapped) {
        if (lib.role == LibRole::Other || libraries_.count(lib.path)) continue;
        libraries_[lib.path] = lib.role;
        fresh.push_back(lib);
    }
    if (level_ == TraceLevel::OpSampled) store_code_ranges(mapped);
    if (fresh.empty()) return;
    std::map<fs::path, std::shared_ptr<ElfSymbols>> elf;
    for (const auto& lib : fresh) {
        elf[lib.path] = elf_[lib.path] = std::make_shared<ElfSymbols>(lib.path);
        debug_info_[lib.path] = elf[lib.path]->has_debug_info();
        tables_.add(store::LibraryRow{lib.path.string(), to_string(lib.role), elf[lib.path]->build_id(),
                                      debug_info_[lib.path]});
    }
    update_layout();
    tables_.set_meta(store::MetaKey::StructLayout, layout_.source);
    // Operator probes go in one after another; a call that begins before the last is in
    // would record some of its nodes and not others (attached to a running target, the first
    // calls lacked the fused RMS_NORM+MUL nodes when that probe went in seconds after the
    // first: a slow recorder). Off while they go in, on after (the BPF side latches
    // ops_enabled per llama_decode call): such a call records no operator, and says so.
    struct OpsOffWhileAttaching {
        tracer_bpf* skel;
        bool active;
        ~OpsOffWhileAttaching() {
            if (!active) return;
            ++skel->bss->ops_epoch;  // a graph that saw them off describes its nodes again
            __atomic_store_n(&skel->data->ops_enabled, true, __ATOMIC_RELEASE);
        }
    } ops_off{skel_, ops_attached_ && is_op_group(max_group(level_)) &&
                         std::any_of(fresh.begin(), fresh.end(), [](const MappedLibrary& l) {
                             return l.role == LibRole::GgmlCpu || l.role == LibRole::GgmlVulkan;
                         })};
    if (ops_off.active) this->ops_off();
    for (const auto& lib : fresh) {
        const auto& sym = *elf[lib.path];
        OpStrategy strategy = OpStrategy::None;
        if (lib.role == LibRole::GgmlCpu && is_op_group(max_group(level_))) {
            strategy = choose_strategy(sym);
            tables_.set_meta(store::MetaKey::OpStrategy, to_string(strategy));
            if (strategy == OpStrategy::None)
                fatal.push_back(lib.path.filename().string() +
                                 " has neither ggml_compute_forward nor ggml_cpu_extra_compute_forward: is it "
                                 "stripped? use a build with symbols, or --level graph");
        }
        for (const auto& p : kProbes) {
            if (p.role != lib.role || p.group > max_group(level_)) continue;
            if (p.group == Group::Wait && !barrier_probes()) continue;
            if (p.only_for != OpStrategy::None && p.only_for != strategy) continue;
            if (is_op_group(p.group) && p.role == LibRole::GgmlCpu && strategy == OpStrategy::None) continue;
            const char* kind = p.retprobe ? "uretprobe" : "uprobe";
            const std::string symbol = resolve(sym, p.symbol);
            if (symbol.empty()) {
                std::string why = lib.path.filename().string() + " has no symbol " + p.symbol +
                                  (sym.has_symtab() ? "" : ": is it stripped? use a build with symbols");
                record_probe(p.symbol, lib.path, kind, false, why);
                if (p.required) fatal.push_back(why);
                continue;
            }
            if (is_op_group(p.group) && !ops_attached_) continue;  // QoS has them off: attach later
            bpf_link* l = attach_uprobe(p.program(skel_), lib.path, symbol.c_str(), p.retprobe, sym.file_offset(symbol),
                                         sym.function_size(symbol), p.reads);
            record_probe(symbol, lib.path, kind, l != nullptr, l ? "" : std::strerror(errno));
            if (!l) {
                fatal.push_back("attaching " + symbol + " failed: " + std::strerror(errno));
                continue;
            }
            attached_.push_back({l, &p, lib.path});
        }
        if (strategy != OpStrategy::None || lib.role == LibRole::GgmlVulkan)
            op_libs_.push_back({lib.path, lib.role, strategy, elf[lib.path]});
    }
    if (!fatal.empty()) throw Error(fatal.front());
}

// --level op-sampled: the functions of the llama.cpp libraries (and of libgomp, where ggml's
// OpenMP threads wait) at the addresses the target maps them, once per mapping: what each
// sample's instruction is named by (the views resolve it; a library dlclose'd before the end
// keeps its rows).
// An op's kernel inlined into the function that dispatches it (ggml_compute_forward_geglu_f32
// into ggml_compute_forward_glu, which SWIGLU's kernel shares) is named by its own function:
// its code becomes a range of its own, an inner inline's over an outer's.
void ProbeAttacher::carve_inlined_ops(const MappedLibrary& lib, CodeRanges& ranges) {
    std::vector<InlinedRange> inlined;
    try {
        inlined = inlined_ranges(lib.path, "ggml_compute_forward_");
    } catch (const Error&) {
        return;  // the symbols' names stand
    }
    std::stable_sort(inlined.begin(), inlined.end(), [](const auto& a, const auto& b) { return a.depth < b.depth; });
    for (const auto& in : inlined) {
        const uint64_t lo = lib.address_of(in.lo);
        if (!lo) continue;
        auto it = ranges.upper_bound(lo);
        if (it == ranges.begin()) continue;
        --it;  // the range holding lo, if any
        const uint64_t from = it->first, to = it->second.first;
        if (lo >= to) continue;
        const uint64_t hi = std::min(to, lo + (in.hi - in.lo));
        const std::string outer = it->second.second;
        ranges.erase(it);
        if (from < lo) ranges.emplace(from, std::pair{lo, outer});
        ranges.emplace(lo, std::pair{hi, in.function});
        if (hi < to) ranges.emplace(hi, std::pair{to, outer});
    }
}

// The BPF side gets their executable mappings as they are now: a sample outside them looks on
// its stack for the return into them (caller_of in wait_sample.bpf.h).
void ProbeAttacher::store_code_ranges(const std::vector<MappedLibrary>& mapped) {
    const auto named = [](const MappedLibrary& lib) {
        return (lib.role != LibRole::Other || lib.path.filename().string().rfind("libgomp", 0) == 0) &&
               !lib.exec.empty();
    };
    std::vector<pi_wait_range> exec;
    for (const auto& lib : mapped)
        if (named(lib))
            for (const auto& s : lib.exec) exec.push_back({s.start, s.end});
    const size_t n = std::min<size_t>(exec.size(), PI_NAMED_RANGES);
    skel_->bss->n_named_ranges = 0;  // no sample reads a half-written table as complete
    std::copy_n(exec.begin(), n, skel_->bss->named_ranges);
    __atomic_store_n(&skel_->bss->n_named_ranges, uint32_t(n), __ATOMIC_RELEASE);
    for (const auto& lib : mapped) {
        if (!named(lib)) continue;
        const std::string key = lib.path.string() + "@" + std::to_string(lib.exec.front().start);
        if (!ranged_.insert(key).second) continue;
        std::shared_ptr<ElfSymbols> sym = elf_.count(lib.path) ? elf_.at(lib.path) : nullptr;
        try {
            if (!sym) sym = std::make_shared<ElfSymbols>(lib.path);
        } catch (const Error&) {
            continue;  // unreadable: its samples stay unnamed
        }
        const std::string name = lib.path.filename().string();
        CodeRanges ranges;
        for (const auto& [function, offset] : sym->functions()) {
            const uint64_t size = sym->function_size(function), at = lib.address_of(offset);
            if (size && at) ranges.emplace(at, std::pair{at + size, function});
        }
        if (lib.role == LibRole::GgmlCpu && sym->has_debug_info()) carve_inlined_ops(lib, ranges);
        // Code of the library no symbol covers (a stripped library's internals: libgomp's
        // barrier spin) is named by the library alone: the gaps get rows of no function.
        for (const auto& s : lib.exec) {
            uint64_t at = s.start;
            for (auto it = ranges.lower_bound(s.start); it != ranges.end() && it->first < s.end; ++it) {
                if (it->first > at) ranges.emplace(at, std::pair{it->first, std::string()});
                at = std::max(at, it->second.first);
            }
            if (at < s.end) ranges.emplace(at, std::pair{s.end, std::string()});
        }
        for (const auto& [lo, r] : ranges) tables_.add(store::CodeRangeRow{int64_t(lo), int64_t(r.first), name, r.second});
    }
}

bool ProbeAttacher::barrier_probes() const {
    return level_ == TraceLevel::Full && (wait_ == WaitMethod::Exact || wait_ == WaitMethod::Both);
}

bool ProbeAttacher::wait_samples() const {
    return level_ == TraceLevel::Full && (wait_ == WaitMethod::Sampled || wait_ == WaitMethod::Both);
}

// Barrier code in the target now: ggml_barrier of every mapped libggml-cpu, and the text
// of libgomp (with OpenMP, ggml_barrier is `#pragma omp barrier`, and the threads spin in
// libgomp; ggml uses OpenMP for nothing but its parallel region and barriers).
void ProbeAttacher::update_wait_ranges(const std::vector<MappedLibrary>& mapped) {
    if (!wait_samples()) return;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& lib : mapped) {
        if (lib.path.filename().string().rfind("libgomp", 0) == 0) {
            for (const auto& s : lib.exec) ranges.emplace_back(s.start, s.end);
        } else if (lib.role == LibRole::GgmlCpu && elf_.count(lib.path)) {
            const auto& sym = *elf_.at(lib.path);
            const uint64_t at = lib.address_of(sym.file_offset("ggml_barrier"));
            if (at && sym.function_size("ggml_barrier")) ranges.emplace_back(at, at + sym.function_size("ggml_barrier"));
        }
    }
    const size_t n = std::min<size_t>(ranges.size(), PI_WAIT_RANGES);
    skel_->bss->n_wait_ranges = 0;  // no sample reads a half-written table as complete
    for (size_t i = 0; i < n; ++i) skel_->bss->wait_ranges[i] = {ranges[i].first, ranges[i].second};
    __atomic_store_n(&skel_->bss->n_wait_ranges, uint32_t(n), __ATOMIC_RELEASE);
    if (n != wait_ranges_stored_) tables_.set_meta(store::MetaKey::WaitRanges, std::to_string(n));  // not at every loader stop
    wait_ranges_stored_ = n;
}

void ProbeAttacher::set_ops_attached(bool on) {
    if (on == ops_attached_) return;
    ops_attached_ = on;
    // Off before the probes go, on after they are all in: a call that begins in between
    // records no operator (the BPF side latches ops_enabled per llama_decode call).
    if (!on) ops_off();
    if (!on) {
        std::vector<bpf_link*> links;
        auto it = std::remove_if(attached_.begin(), attached_.end(), [&](const Attached& a) {
            if (!a.probe || !is_op_group(a.probe->group)) return false;
            links.push_back(a.link);
            return true;
        });
        attached_.erase(it, attached_.end());
        destroy_links(links);
    } else {
        for (const auto& [lib, role, strategy, sym] : op_libs_)
            for (const auto& p : kProbes) {
                if (!is_op_group(p.group) || p.group > max_group(level_) || p.role != role) continue;
                if (p.group == Group::Wait && !barrier_probes()) continue;
                if (p.only_for != OpStrategy::None && p.only_for != strategy) continue;
                const std::string symbol = resolve(*sym, p.symbol);
                if (symbol.empty()) continue;
                if (bpf_link* l = attach_uprobe(p.program(skel_), lib, symbol.c_str(), p.retprobe, sym->file_offset(symbol),
                                              sym->function_size(symbol), p.reads))
                    attached_.push_back({l, &p, lib});
            }
        ++skel_->bss->ops_epoch;  // a graph that saw them off describes its nodes again
        __atomic_store_n(&skel_->data->ops_enabled, true, __ATOMIC_RELEASE);
    }
}

}  // namespace profinfer
