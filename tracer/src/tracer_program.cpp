#include "tracer_program.h"
#include "profinfer/knobs.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "alternating_gate.h"
#include "consumer_priority.h"
#include "kernel_btf.h"
#include "kernel_features.h"
#include "kernel_tick.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "target_guardian.h"
#include "tracer_bpf.skel.h"

namespace profinfer {

namespace {

bool verifier_stats() { return knob(Knob::LibbpfVerbose).value_or("") == "stats"; }

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
    // =stats: only each program's load log, which then holds the verifier's statistics alone.
    if (verifier_stats()) return std::strstr(fmt, "PROG LOAD LOG") ? vfprintf(stderr, fmt, args) : 0;
    if (level == LIBBPF_DEBUG) return 0;
    if (!knob(Knob::LibbpfVerbose)) return 0;
    return vfprintf(stderr, fmt, args);
}

// The threads of process PID now (none when it is gone).
std::vector<pid_t> task_ids(pid_t pid) {
    std::vector<pid_t> ids;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec))
        ids.push_back(pid_t(std::atoi(e.path().filename().c_str())));
    return ids;
}

}  // namespace

TracerProgram::TracerProgram(const RecordOptions& opts, pid_t target, bool launched, bool has_gate,
                             store::TraceTables& tables)
    : opts_(opts), launched_(launched), tables_(tables) {
    open_counters();
    libbpf_set_print(libbpf_print);
    skel_ = tracer_bpf__open();
    if (!skel_) throw_errno("opening the BPF object");
    skel_->bss->target_tgid = target;
    skel_->rodata->follow_children = launched;
    skel_->rodata->stop_on_library_load = true;
    skel_->rodata->capture_experts = opts.level == TraceLevel::Full;
    skel_->rodata->trace_ops = opts.level == TraceLevel::Op || opts.level == TraceLevel::Full;
    skel_->rodata->emit_sched = opts.level == TraceLevel::Full;
    skel_->rodata->n_cpus = std::max(n_cpus_, 1);
    const size_t n_active = counters_ ? counters_->active().size() : 0;
    skel_->rodata->n_counters = n_active;
    for (size_t c = 0; c < n_active && c < PI_MAX_COUNTERS; ++c)
        skel_->rodata->counter_source[c] = counters_->active()[c]->source;
    bpf_map__set_max_entries(skel_->maps.counters, std::max<size_t>(1, n_active * std::max(n_cpus_, 1)));
    bpf_map__set_max_entries(skel_->maps.events, opts.buffer_kb << 10);
    skel_->rodata->wakeup_bytes = uint64_t(double(opts.buffer_kb << 10) * ConsumerPriority::kBoostAt);
    skel_->rodata->wake_on_token = has_gate;  // the gate sees each decode call as it ends
    read_knobs(has_gate);
}

TracerProgram::~TracerProgram() {
    close_samplers();
    tracer_bpf__destroy(skel_);
}

void TracerProgram::open_counters() {
    if (opts_.level != TraceLevel::Full && opts_.counters.empty()) return;
    std::string list = opts_.counters.empty() ? kDefaultCounters : opts_.counters;
    n_cpus_ = libbpf_num_possible_cpus();
    counters_ = std::make_unique<PerCpuCounters>(split_counter_list(list), n_cpus_);
    int idx = 0;
    std::string unavailable;
    for (const auto& c : counters_->specs()) {
        tables_.add(store::CounterRow{c.available ? int64_t{idx++} : int64_t{-1 - int64_t(&c - counters_->specs().data())},
                                     c.name, int64_t{c.perf_type}, int64_t(c.config), c.available, c.reason});
        if (!c.available) unavailable += (unavailable.empty() ? "" : ", ") + c.name + " (" + c.reason + ")";
    }
    if (!unavailable.empty() && !opts_.quiet) std::cerr << "profinfer: counters unavailable: " << unavailable << "\n";
}

const CounterSpec* TracerProgram::counter(int slot) const {
    const auto active = counters_ ? counters_->active() : std::vector<const CounterSpec*>{};
    return slot >= 0 && size_t(slot) < active.size() ? active[slot] : nullptr;
}

// The environment knobs of tests and cost measurements (docs/recording.md).
void TracerProgram::read_knobs(bool has_gate) {
    // Threads with a node under way at once (slots are freed when a thread exits): four
    // per CPU is more than ggml starts; fewer buckets make the graph-exit flush cheaper.
    const auto slots = knob(Knob::ThreadSlots);
    bpf_map__set_max_entries(skel_->maps.thread_states,
                             slots ? std::max(1, std::atoi(slots->c_str())) : std::max(64, 4 * libbpf_num_possible_cpus()));
    // --alternate W: windows of W calls recorded and W whose node probes trap and return
    // (the BPF side counts the calls); W:detach: W with the operator probes in and W with
    // them out (the recorder attaches and detaches them).
    if (!opts_.alternate.empty()) {
        const std::string& a = opts_.alternate;
        const int w = std::atoi(a.c_str());
        const bool detach = a.size() > 7 && a.substr(a.size() - 7) == ":detach";
        if (w <= 0 || (!detach && a != std::to_string(w)))
            throw Error("--alternate must be W or W:detach (W calls per window), not '" + a + "'");
        if (has_gate) throw Error("--alternate cannot be combined with --budget or --qos-min-tps");
        if (opts_.level < TraceLevel::Op) throw Error("--alternate needs --level op or full");
        if (detach)
            alternating_gate_ = std::make_unique<AlternatingGate>(w), skel_->rodata->wake_on_token = true;
        else
            skel_->rodata->alternate_calls = uint32_t(w);
        tables_.set_meta(store::MetaKey::AlternateCalls, a);
    }
    // The overhead studies' ablations (tracers op-trap, op-nosend, noprobe): the operator
    // probes trap and return, or do everything but send, or every probe goes into profinfer
    // itself. Not a trace.
    if (!opts_.ablate.empty()) {
        const std::string& a = opts_.ablate;
        if (a != "trap" && a != "send" && a != "attach")
            throw Error("--ablate must be trap, send or attach, not '" + a + "'");
        skel_->rodata->ablate = a == "trap" ? PI_ABLATE_TRAP : a == "send" ? PI_ABLATE_SEND : PI_ABLATE_ATTACH;
        tables_.set_meta(store::MetaKey::Ablate, a);
        if (!opts_.quiet)
            std::cerr << "profinfer: --ablate " << a << ": "
                      << (a == "trap"   ? "operator records are not made"
                          : a == "send" ? "operator records are not sent"
                                        : "no probe in the target (its uprobes go into profinfer itself)")
                      << " (a cost measurement, not a trace)\n";
    }
}

void TracerProgram::load(ProbeAttacher& probes) {
    const bool sched = opts_.level == TraceLevel::Full;
    const size_t n_active = counters_ ? counters_->active().size() : 0;
    // sched_switch also keeps per-node counters right across CPU migrations. Its
    // prototype depends on the kernel: prev_state is an argument from 5.18 on, read from
    // the task before. PROFINFER_SCHED_SWITCH=3arg forces that path, =both loads the two
    // (every switch recorded twice), for the test that checks one against the other.
    const bool want_switch = sched || n_active > 0;
    const std::string forced = knob(Knob::SchedSwitch).value_or("");
    const bool kernel_three = tracepoint_arg_count("sched_switch") == 3;
    const bool three_args = forced.empty() ? kernel_three : forced != "4arg";
    const bool four_args = forced.empty() ? !three_args : forced != "3arg";
    if (want_switch && four_args && kernel_three)
        throw Error("PROFINFER_SCHED_SWITCH=" + forced + " loads the 4-argument sched_switch program, but this kernel's "
                    "sched_switch passes 3 (prev_state is an argument from 5.18): only 3arg loads here");
    bpf_program__set_autoload(skel_->progs.sched_switch, want_switch && four_args);
    bpf_program__set_autoload(skel_->progs.sched_switch_3arg, want_switch && three_args);
    if (want_switch)
        tables_.set_meta(store::MetaKey::SchedSwitchProgram,
                         four_args && three_args ? "both" : three_args ? "3arg" : "4arg");
    // What an older kernel's verifier refuses is left out for a fallback (kernel_features.h).
    const KernelFeatures kernel = KernelFeatures::probe();
    skel_->rodata->has_atomic_fetch = kernel.atomic_fetch;
    skel_->rodata->has_task_btf = kernel.task_btf;
    if (!kernel.atomic_fetch) drop_atomic_fetch(skel_->obj);
    bpf_program__set_autoload(skel_->progs.cpu_graph_exit, kernel.for_each);
    bpf_program__set_autoload(skel_->progs.cpu_graph_exit_loop, !kernel.for_each);
    bpf_program__set_autoload(skel_->progs.llama_decode_exit, kernel.loop);
    bpf_program__set_autoload(skel_->progs.llama_decode_exit_unrolled, !kernel.loop);
    tables_.set_meta(store::MetaKey::KernelFallbacks, kernel.fallbacks());
    bpf_program__set_autoload(skel_->progs.sched_wakeup, sched);
    bpf_program__set_autoload(skel_->progs.wait_sample, probes.wait_samples());
    // --level op-sampled: on the kernel's tick where it can (kernel_tick.h), else a perf event.
    const bool op_sampled = opts_.level == TraceLevel::OpSampled;
    const KernelTick tick = op_sampled && opts_.op_sample_on_tick ? KernelTick::find() : KernelTick{};
    const bool on_tick = op_sampled && opts_.op_sample_on_tick && tick.usable();
    if (op_sampled && opts_.op_sample_on_tick && !on_tick && !opts_.quiet)
        std::cerr << "profinfer: --level op-sampled samples with a timer of its own at " << opts_.op_sample_hz
                  << " Hz, not on the kernel's tick: " << tick.why_not << "\n";
    skel_->rodata->tick_function = tick.function;
    bpf_program__set_autoload(skel_->progs.op_sample, op_sampled);  // the fallback where the tick's program is refused
    bpf_program__set_autoload(skel_->progs.op_tick, on_tick);
    bpf_program__set_autoload(skel_->progs.follow_fork, launched_);
    probes.leave_out_unused_programs();
    if (verifier_stats()) {
        bpf_program* prog;
        bpf_object__for_each_program(prog, skel_->obj) bpf_program__set_log_level(prog, 4);  // BPF_LOG_STATS
    }
    int err = tracer_bpf__load(skel_);
    if (err) {
        if ((err == -EPERM || err == -EACCES) && geteuid() != 0)
            throw Error("loading BPF programs was refused: run as root, or grant CAP_BPF, CAP_PERFMON and "
                        "CAP_SYS_ADMIN (see docs/reliability.md)");
        if (err == -EPERM || err == -EACCES)
            throw Error("the kernel's verifier refused the BPF programs (" + std::string(std::strerror(-err)) +
                        "; PROFINFER_LIBBPF_VERBOSE=1 prints its log)");
        throw Error(std::string("loading BPF programs failed: ") + std::strerror(-err));
    }
    for (size_t c = 0; c < n_active; ++c)
        for (int cpu = 0; cpu < n_cpus_; ++cpu) {
            uint32_t key = c * n_cpus_ + cpu;
            int fd = counters_->fd(c, cpu);
            if (fd < 0) continue;  // read from the thread's task_struct
            if (bpf_map_update_elem(bpf_map__fd(skel_->maps.counters), &key, &fd, BPF_ANY) != 0)
                throw_errno("installing counter " + counters_->active()[c]->name);
        }
    if (probes.wait_samples()) open_sampler(skel_->progs.wait_sample, opts_.sample_hz, "--wait sampled");
    bpf_link* tick_link = on_tick ? bpf_program__attach(skel_->progs.op_tick) : nullptr;
    if (tick_link) {
        tables_.set_meta(store::MetaKey::SampleHz, std::to_string(tick.hz));
        tables_.set_meta(store::MetaKey::SampleScope, "tick");
        sample_links_.push_back(tick_link);
    } else if (op_sampled) {
        if (on_tick && !opts_.quiet)
            std::cerr << "profinfer: --level op-sampled samples with a timer of its own at " << opts_.op_sample_hz
                      << " Hz, not on the kernel's tick: its raw tracepoint hrtimer_expire_entry was refused ("
                      << std::strerror(errno) << ")\n";
        open_sampler(skel_->progs.op_sample, opts_.op_sample_hz, "--level op-sampled");
    }
    for (auto [prog, name] : {std::pair{skel_->progs.sched_switch, "sched_switch"},
                              std::pair{skel_->progs.sched_switch_3arg, "sched_switch"},
                              std::pair{skel_->progs.sched_wakeup, "sched_wakeup"},
                              std::pair{skel_->progs.thread_exit, "sched_process_exit"},
                              std::pair{skel_->progs.follow_fork, "sched_process_fork"}}) {
        if (bpf_program__autoload(prog)) probes.attach_tracepoint(prog, name);
    }
}

// A CPU-clock sampling event at HZ running PROG. wait_sample (--wait sampled) needs every
// CPU: one event per CPU, whoever runs there. op_sample (--level op-sampled) needs only the
// target's threads running: one event per thread of the target, inherited by every thread
// and process it starts, so that a sample interrupts (and costs) the target alone. A
// CPU-clock interrupt costs the interrupted thread 8-12 µs in a KVM guest; per CPU, every
// process on the machine paid it, and the duet's untraced side with it.
void TracerProgram::open_sampler(bpf_program* prog, unsigned hz, const std::string& why) {
    if (prog == skel_->progs.wait_sample) tables_.set_meta(store::MetaKey::WaitMethod, to_string(opts_.wait));
    tables_.set_meta(store::MetaKey::SampleHz, std::to_string(hz));
    const bool per_task = prog == skel_->progs.op_sample;
    tables_.set_meta(store::MetaKey::SampleScope, per_task ? "target" : "cpu");
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    // cpu-clock counts nanoseconds; a few µs off the round period so that samples do
    // not run in step with the scheduler tick or other round-period timers.
    a.sample_period = 1000000000ull / hz + 1237;
    a.inherit = per_task;
    auto attach = [&](int fd, const std::string& where) {
        bpf_link* l = bpf_program__attach_perf_event(prog, fd);
        if (!l) {
            int err = errno;
            ::close(fd);
            throw Error("attaching the CPU-clock sampler " + where + " (" + why + "): " + std::strerror(err));
        }
        sample_links_.push_back(l);  // the link owns the fd
    };
    if (!per_task) {
        for (int cpu = 0; cpu < libbpf_num_possible_cpus(); ++cpu) {
            int fd = int(syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
            if (fd < 0) {
                if (errno == ENODEV || errno == EINVAL) continue;  // a possible CPU that is offline
                throw_errno("opening the CPU-clock sampler on CPU " + std::to_string(cpu) + " (" + why + ")");
            }
            attach(fd, "on CPU " + std::to_string(cpu));
        }
        return;
    }
    // Every thread the target has now (one, for a command not yet started: whatever it starts
    // inherits the event). Attached, a thread started by one not yet covered while the events
    // were opened has none: a second look covers it (one that was covered too, having
    // inherited an event, has its doubled samples dropped on the BPF side). Two looks, not
    // until none is new: ggml without OpenMP starts its workers anew for every graph.
    const pid_t target = skel_->bss->target_tgid;
    std::set<pid_t> covered;
    for (int look = 0; look < (launched_ ? 1 : 2); ++look) {
        std::vector<pid_t> tids = task_ids(target);
        // The main thread first: it starts most threads, and those started after its event
        // inherit it.
        std::stable_partition(tids.begin(), tids.end(), [&](pid_t t) { return t == target; });
        for (pid_t tid : tids) {
            if (!covered.insert(tid).second) continue;
            int fd = int(syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
            if (fd < 0) {
                if (errno == ESRCH) continue;  // the thread ended meanwhile
                throw_errno("opening the CPU-clock sampler on thread " + std::to_string(tid) + " (" + why + ")");
            }
            attach(fd, "on thread " + std::to_string(tid));
        }
    }
    if (covered.empty()) throw Error("opening the CPU-clock sampler (" + why + "): process " + std::to_string(target) + " has no threads");
}

void TracerProgram::close_samplers() {
    for (bpf_link* l : sample_links_) bpf_link__destroy(l);
    sample_links_.clear();
}

bool TracerProgram::target_held() const {
    return skel_ && __atomic_load_n(&skel_->bss->library_stops, __ATOMIC_ACQUIRE) !=
                        __atomic_load_n(&skel_->bss->library_resumes, __ATOMIC_ACQUIRE);
}

TracerProgram::Held TracerProgram::take_held() {
    Held h;
    if (!skel_) return h;
    // A process is noted after its SIGSTOP and counted after that: read the count first,
    // and every stop it includes has its process in the map read after (or taken by the
    // guardian, which resumes it).
    h.stops = __atomic_load_n(&skel_->bss->library_stops, __ATOMIC_ACQUIRE);
    h.pids = take_held_processes(bpf_map__fd(skel_->maps.held));
    return h;
}

void TracerProgram::resume(const Held& held, pid_t target) {
    if (!skel_ || target <= 0) return;
    // Never backwards: the guardian may have resumed further meanwhile.
    uint64_t resumes = __atomic_load_n(&skel_->bss->library_resumes, __ATOMIC_ACQUIRE);
    if (held.stops <= resumes && held.pids.empty()) return;
    if (held.stops > resumes) __atomic_store_n(&skel_->bss->library_resumes, held.stops, __ATOMIC_RELEASE);
    for (const pid_t f : held.pids)
        if (f != target) kill(f, SIGCONT);
    kill(target, SIGCONT);
}

void TracerProgram::resume_if_held(pid_t target) {
    if (!target_held() || target <= 0) return;
    resume(take_held(), target);
}

int64_t TracerProgram::ops_pending() const {
    const int n = libbpf_num_possible_cpus();
    std::vector<int64_t> per_cpu(std::max(n, 1));
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.ops_pending), &zero, per_cpu.data()) != 0) return 0;
    int64_t sum = 0;
    for (int64_t v : per_cpu) sum += v;
    return std::max<int64_t>(sum, 0);
}

void TracerProgram::set_token_wake_gap(uint64_t gap_ns) {
    if (skel_) __atomic_store_n(&skel_->bss->token_wake_gap_ns, gap_ns, __ATOMIC_RELEASE);
}

bool TracerProgram::decode_in_flight() const {
    uint32_t key = 0;
    return bpf_map_get_next_key(bpf_map__fd(skel_->maps.decode_entries), nullptr, &key) == 0;
}

uint64_t TracerProgram::lost(uint32_t kind) const { return skel_->bss->lost_events[kind]; }
uint64_t TracerProgram::lost_total() const {
    uint64_t n = 0;
    for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) n += lost(k);
    return n;
}
uint64_t TracerProgram::dropped(uint32_t kind) const { return skel_->bss->dropped[kind]; }
uint64_t TracerProgram::guardian_resumes() const { return skel_->bss->guardian_resumes; }

void TracerProgram::hand_stops_to(TargetGuardian& guardian) const {
    auto* base = reinterpret_cast<const char*>(skel_->bss);
    auto at = [&](const void* field) { return size_t(static_cast<const char*>(field) - base); };
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    guardian.watch_stops(bpf_map__fd(skel_->maps.bss), (bpf_map__value_size(skel_->maps.bss) + page - 1) / page * page,
                         {at(&skel_->bss->library_stops), at(&skel_->bss->library_resumes),
                          at(&skel_->bss->guardian_resumes)},
                         bpf_map__fd(skel_->maps.held));
}

void TracerProgram::retarget(pid_t target) {
    __atomic_store_n(&skel_->bss->target_tgid, uint32_t(target), __ATOMIC_RELEASE);
}

bool TracerProgram::target_chosen() const { return skel_->bss->target_chosen; }
void TracerProgram::set_target_chosen() { skel_->bss->target_chosen = true; }

}  // namespace profinfer
