#pragma once
// Attaching the probes, and owning them: which probes a level needs, in which of the
// target's libraries, with which strategy for the operator level; every attempt is
// recorded in the `probes` table. Its failures (a stripped library, a refused attach)
// are errors naming the library and symbol; detach_all() is the one way they go.
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "profinfer/recorder.h"
#include "probe_site.h"
#include "profinfer/trace_tables.h"
#include "struct_layout.h"
#include "target.h"

struct tracer_bpf;
struct bpf_link;
struct bpf_program;

namespace profinfer {

class ElfSymbols;

class ProbeAttacher {
public:
    // SKEL opened (not necessarily loaded yet); its layout global is kept up to date.
    ProbeAttacher(tracer_bpf* skel, pid_t pid, TraceLevel level, WaitMethod wait, store::TraceTables& tables);
    ~ProbeAttacher();
    ProbeAttacher(const ProbeAttacher&) = delete;
    ProbeAttacher& operator=(const ProbeAttacher&) = delete;

    // The struct layout in use (DWARF once the libraries have it, else the built-in table).
    const GgmlLayout& layout() const { return layout_; }

    void attach_tracepoint(bpf_program* prog, const char* name);
    // Before the skeleton loads: the programs of probes above the level are not loaded
    // (the verifier's work on the operator programs was most of profinfer's start-up CPU).
    void leave_out_unused_programs();
    // The dynamic loader's _dl_debug_state, so that libraries loaded later are seen: the
    // target's (its loader, in its own root), or — EVERY_PROCESS, for a launched command
    // whose children are followed — ours, in every process that maps it (the BPF side
    // keeps the target's tree only).
    void attach_loader_watch(bool every_process = false);
    // The target is now PID (a process the launched command forked).
    void retarget(pid_t pid) { pid_ = pid; }
    // Looks at the target's mappings and attaches to every library not seen before.
    // Throws when a probe the level needs cannot be had.
    void attach_new_libraries();
    bool seen_role(LibRole role) const;

    // The QoS controller's switch: operator probes off (detached) or on again.
    void set_ops_attached(bool on);
    bool ops_attached() const { return ops_attached_; }

    // At --level full: a probe on every ggml_barrier (exact, both), CPU-clock samples
    // classified by IP (sampled, both).
    bool barrier_probes() const;
    bool wait_samples() const;

    // Every probe goes, at once. Safe to call more than once.
    void detach_all();
    // No operator recorded from here on (the BPF side also latches it per llama_decode call):
    // the first step before operator probes go or while they go in, and before a recording
    // ends at a call boundary (--duration): the call under way keeps its operators.
    void ops_off();

private:
    struct Attached;
    struct OpLibrary;
    bpf_link* attach_uprobe(bpf_program* prog, const std::filesystem::path& lib, const char* symbol, bool ret,
                            uint64_t offset, uint64_t size = 0, uint32_t reads = kReadsStack);
    void record_probe(const std::string& symbol, const std::string& lib, const char* kind, bool ok,
                      const std::string& reason);
    void update_layout();
    void update_wait_ranges(const std::vector<MappedLibrary>& mapped);
    void store_code_ranges(const std::vector<MappedLibrary>& mapped);
    using CodeRanges = std::map<uint64_t, std::pair<uint64_t, std::string>>;  // lo → hi, function
    static void carve_inlined_ops(const MappedLibrary& lib, CodeRanges& ranges);

    tracer_bpf* skel_;
    pid_t pid_;
    TraceLevel level_;
    WaitMethod wait_;
    store::TraceTables& tables_;
    GgmlLayout layout_;
    std::vector<Attached> attached_;
    std::vector<OpLibrary> op_libs_;
    std::map<std::filesystem::path, LibRole> libraries_;
    std::map<std::filesystem::path, bool> debug_info_;
    std::map<std::filesystem::path, std::shared_ptr<ElfSymbols>> elf_;
    size_t dwarf_libs_used_ = 0;
    size_t wait_ranges_stored_ = size_t(-1);  // meta.wait_ranges as last written
    std::set<std::string> ranged_;  // mappings whose code_ranges are stored (path and start)
    bool ops_attached_ = true;
};

}  // namespace profinfer
