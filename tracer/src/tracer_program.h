#pragma once
// The BPF side of a recording, set up: the skeleton opened and configured from the
// options and the environment knobs, the counters opened, the programs loaded, the
// counters installed, the wait sampler and the tracepoints attached. It also reads what
// the kernel side counts (lost and dropped records, the loader stops it holds).
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "counters.h"
#include "operator_gate.h"
#include "probe_attacher.h"
#include "profinfer/recorder.h"
#include "profinfer/trace_tables.h"

struct tracer_bpf;
struct bpf_link;

namespace profinfer {

class TargetGuardian;

class TracerProgram {
public:
    // Opens the counters (their rows stored) and the skeleton, configured for TARGET.
    // LAUNCHED: a command profinfer starts (its children followed). HAS_GATE: --budget or
    // --qos-min-tps switches the operator probes (--alternate is refused with it).
    TracerProgram(const RecordOptions& opts, pid_t target, bool launched, bool has_gate, store::TraceTables& tables);
    ~TracerProgram();
    TracerProgram(const TracerProgram&) = delete;
    TracerProgram& operator=(const TracerProgram&) = delete;

    tracer_bpf* skel() const { return skel_; }
    // --alternate W:detach: the gate that attaches and detaches the operator probes
    // every W calls (taken once; null otherwise).
    std::unique_ptr<OperatorGate> take_alternating_gate() { return std::move(alternating_gate_); }
    // Loads the programs the options need (PROBES knows which wait method runs), installs
    // the counters, opens the samplers (--wait sampled, --level op-sampled) and attaches the
    // tracepoints.
    void load(ProbeAttacher& probes);
    void close_samplers();

    // A loader stop of ours holds the target (the kernel side stopped it more often than
    // it was resumed, by us or by the guardian).
    bool target_held() const;
    // The processes held at loader stops, taken: the stop count first, then the map (so a
    // stop counted in it has its process among them; a later one is left for next time).
    struct Held {
        uint64_t stops = 0;
        std::vector<pid_t> pids;
    };
    Held take_held();
    // Undoes the stops of HELD (taken before anything about them was decided): each of its
    // processes and TARGET go on. A stop after the take stays held for the next look.
    void resume(const Held& held, pid_t target);
    // Undoes a stop of ours (a target somebody else stopped stays stopped): TARGET and any
    // process held at a loader stop go on.
    void resume_if_held(pid_t target);
    // Node records the kernel side still holds for threads mid-graph.
    int64_t ops_pending() const;
    // A llama_decode call of the target has begun and not yet returned (its entry is held).
    bool decode_in_flight() const;
    // With a gate that sees decode calls: the consumer woken at most once per GAP_NS by them
    // (0: by every call). tracer.bpf.c's token_wake_gap_ns.
    void set_token_wake_gap(uint64_t gap_ns);
    uint64_t lost(uint32_t kind) const;     // records of KIND lost to a full ring buffer
    uint64_t lost_total() const;            // of every kind
    uint64_t dropped(uint32_t kind) const;  // data cut inside records (PI_DROP_*)
    uint64_t guardian_resumes() const;
    // The counter whose deltas are at SLOT of the op records (null past the active ones).
    const CounterSpec* counter(int slot) const;
    // The guardian watches the loader-stop counters in the object's .bss.
    void hand_stops_to(TargetGuardian& guardian) const;
    // A launched command's tree: the target chosen among its processes held (take_held),
    // its tgid now the one the probes keep.
    void retarget(pid_t target);
    bool target_chosen() const;
    void set_target_chosen();

private:
    void open_counters();
    void read_knobs(bool has_gate);
    void open_sampler(bpf_program* prog, unsigned hz, const std::string& why);

    const RecordOptions& opts_;
    bool launched_;
    store::TraceTables& tables_;
    std::unique_ptr<PerCpuCounters> counters_;
    int n_cpus_ = 1;
    tracer_bpf* skel_ = nullptr;
    std::unique_ptr<OperatorGate> alternating_gate_;
    std::vector<bpf_link*> sample_links_;
};

}  // namespace profinfer
