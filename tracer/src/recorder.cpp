#include "profinfer/recorder.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <signal.h>
#include <linux/perf_event.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "alternating_gate.h"
#include "consumer_priority.h"
#include "counters.h"
#include "event_consumer.h"
#include "kernel_btf.h"
#include "launcher.h"
#include "memory_cgroup.h"
#include "probe_attacher.h"
#include "budget_controller.h"
#include "qos_controller.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/output_file.h"
#include "profinfer/store.h"
#include "struct_layout.h"
#include "target.h"
#include "target_guardian.h"
#include "trace_writer.h"
#include "tracer_bpf.skel.h"

namespace fs = std::filesystem;

namespace profinfer {

TraceLevel parse_trace_level(const std::string& s) {
    if (s == "token") return TraceLevel::Token;
    if (s == "graph") return TraceLevel::Graph;
    if (s == "op") return TraceLevel::Op;
    if (s == "full") return TraceLevel::Full;
    throw Error("unknown level '" + s + "' (token, graph, op, full)");
}

const char* to_string(TraceLevel l) {
    switch (l) {
        case TraceLevel::Token: return "token";
        case TraceLevel::Graph: return "graph";
        case TraceLevel::Op: return "op";
        case TraceLevel::Full: return "full";
    }
    return "?";
}

WaitMethod parse_wait_method(const std::string& s) {
    if (s == "sampled") return WaitMethod::Sampled;
    if (s == "exact") return WaitMethod::Exact;
    if (s == "both") return WaitMethod::Both;
    throw Error("unknown wait method '" + s + "' (sampled, exact, both)");
}

const char* to_string(WaitMethod w) {
    switch (w) {
        case WaitMethod::Sampled: return "sampled";
        case WaitMethod::Exact: return "exact";
        case WaitMethod::Both: return "both";
    }
    return "?";
}

SchedPeers parse_sched_peers(const std::string& s) {
    if (s == "none") return SchedPeers::None;
    if (s == "comm") return SchedPeers::Comm;
    if (s == "full") return SchedPeers::Full;
    throw Error("unknown --sched-peers '" + s + "' (none, comm, full)");
}

const char* to_string(SchedPeers p) {
    switch (p) {
        case SchedPeers::None: return "none";
        case SchedPeers::Comm: return "comm";
        case SchedPeers::Full: return "full";
    }
    return "?";
}

const char* const kDefaultCounters = "cycles,stalled-cycles-backend,cache-misses,major-faults,minor-faults,task-clock";

static_assert(PI_EVENTS_VERSION == store::kEventsVersion, "the store must know the event format it holds");

namespace {

std::atomic<int> g_stop_signal{0};  // the last stop signal
std::atomic<int> g_stop_signals{0};  // how many arrived
extern "C" void on_stop_signal(int sig) {
    g_stop_signal = sig;
    ++g_stop_signals;
}

// Installed before anything else happens: a ^C or SIGTERM while the BPF objects load
// must reach our cleanup (which resumes or releases the target), not kill us mid-way.
void install_stop_handlers() {
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// The stop signal, if one arrived, as an error: used before the command starts.
void throw_if_stopped(const char* when) {
    if (int sig = g_stop_signal.load())
        throw Error(std::string("interrupted by ") + strsignal(sig) + " " + when);
}

// Checks a launch command before anything is created: the same PATH lookup execvp does.
void check_command(const std::string& program) {
    auto runnable = [](const fs::path& p) { return access(p.c_str(), X_OK) == 0 && !fs::is_directory(p); };
    if (program.find('/') != std::string::npos) {
        if (!runnable(program)) throw Error("cannot run " + program + ": " + std::strerror(errno ? errno : EACCES));
        return;
    }
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    for (size_t a = 0, b; a <= dirs.size(); a = b + 1) {
        b = dirs.find(':', a);
        if (b == std::string::npos) b = dirs.size();
        fs::path dir = dirs.substr(a, b - a);
        if (runnable((dir.empty() ? fs::path(".") : dir) / program)) return;
    }
    throw Error("cannot run " + program + ": not found in PATH");
}

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
    if (level == LIBBPF_DEBUG) return 0;
    if (!std::getenv("PROFINFER_LIBBPF_VERBOSE")) return 0;
    return vfprintf(stderr, fmt, args);
}

const char* drop_name(uint32_t kind) {
    switch (kind) {
        case PI_DROP_EXPERT_IDS: return "expert_ids_truncated";
        case PI_DROP_THREAD_SLOTS: return "thread_slots_full";
        case PI_DROP_MULTIPLEXED: return "counter_reads_multiplexed";
    }
    return "unknown";
}

const char* kind_name(uint32_t kind) {
    switch (kind) {
        case PI_EV_TOKEN: return "token";
        case PI_EV_LIBRARY: return "library";
        case PI_EV_GRAPH: return "graph";
        case PI_EV_OP: return "op";
        case PI_EV_NODE: return "node";
        case PI_EV_EXPERTS: return "experts";
        case PI_EV_SWITCH: return "sched_switch";
        case PI_EV_WAKEUP: return "sched_wakeup";
        case PI_EV_GPU: return "gpu";
    }
    return "unknown";
}

std::string read_cmdline(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::string s((std::istreambuf_iterator<char>(f)), {});
    std::replace(s.begin(), s.end(), '\0', ' ');
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

class Recorder {
public:
    explicit Recorder(const RecordOptions& o)
        : opts_(o), guardian_(std::make_unique<TargetGuardian>(o.output)), db_(create_store(o.output, *guardian_)) {
        if (o.qos_min_tps > 0) gate_ = std::make_unique<QosController>(o.qos_min_tps);
        if (o.budget_pct > 0) {
            auto b = std::make_unique<BudgetController>(o.budget_pct);
            budget_ = b.get();
            gate_ = std::move(b);
        }
        set_meta("status", store::to_string(store::RunStatus::Running));
        // Who is writing: a reader that finds the run still "running" with this process
        // gone knows the recording ended without its bookkeeping (store::run_health).
        set_meta("recorder_pid", std::to_string(getpid()));
        set_meta("recorder_start", std::to_string(store::process_start_time(getpid())));
        set_meta("sched_peers", to_string(o.sched_peers));
        set_meta("level", to_string(o.level));
        set_meta("board", o.board);
        set_meta("events_version", std::to_string(PI_EVENTS_VERSION));
        set_meta("clock", "CLOCK_MONOTONIC");
        set_meta("started_at", std::to_string(std::time(nullptr)));
        utsname u{};
        uname(&u);
        set_meta("host", u.nodename);
        set_meta("kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
        std::string cmd;
        for (const auto& a : o.command) cmd += (cmd.empty() ? "" : " ") + a;
        if (!cmd.empty()) set_meta("command", cmd);
        if (o.qos_min_tps > 0) set_meta("qos_min_tps", std::to_string(o.qos_min_tps));
        if (o.budget_pct > 0) set_meta("budget_pct", std::to_string(o.budget_pct));
    }

    // Every way out passes here: the probes go, then the target goes on.
    ~Recorder() {
        priority_.reset();  // its keeper reads the BPF object's counters
        release_target();
        consumer_.reset();
        tracer_bpf__destroy(skel_);
        guardian_.reset();
    }

    int run() {
        if (opts_.pid) {
            pid_ = *opts_.pid;
            set_meta("command", read_cmdline(pid_));
        } else {
            child_ = std::make_unique<LaunchedProcess>(opts_.command);
            pid_ = child_->pid();
            if (opts_.memory_limit) {  // before it runs: everything it maps is charged there
                cgroup_ = std::make_unique<MemoryCgroup>(opts_.memory_limit);
                cgroup_->add(pid_);
                set_meta("memory_limit_bytes", std::to_string(opts_.memory_limit));
                set_meta("memory_cgroup", cgroup_->path().string() + " (" + cgroup_->version() + ")");
            }
        }
        set_meta("pid", std::to_string(pid_));
        guardian_->set_target(pid_);
        if (cgroup_) guardian_->set_cgroup(cgroup_->path());
        throw_if_stopped("before recording started");
        open_counters();
        load_bpf();
        {
            auto* base = reinterpret_cast<const char*>(skel_->bss);
            auto at = [&](const void* field) { return size_t(static_cast<const char*>(field) - base); };
            const size_t page = size_t(sysconf(_SC_PAGESIZE));
            guardian_->watch_stops(bpf_map__fd(skel_->maps.bss),
                                   (bpf_map__value_size(skel_->maps.bss) + page - 1) / page * page,
                                   {at(&skel_->bss->library_stops), at(&skel_->bss->library_resumes),
                                    at(&skel_->bss->guardian_resumes), at(&skel_->bss->held_followers[0]),
                                    std::size(skel_->bss->held_followers)});
        }
        // The budget starts with the operator probes out: a window begins once it is paid for.
        if (budget_) probes_->set_ops_attached(false);
        writer_ = std::make_unique<TraceWriter>(*db_, probes_->layout(), opts_.sched_peers);
        consumer_ = std::make_unique<EventConsumer>(bpf_map__fd(skel_->maps.events), *writer_, gate_.get(), *probes_);
        guardian_->started();
        probes_->attach_loader_watch(child_ != nullptr);
        if (opts_.pid) {
            probes_->attach_new_libraries();
            if (!probes_->seen_role(LibRole::Llama))
                throw Error("process " + std::to_string(pid_) + " (" + process_comm(pid_) +
                            ") has not loaded libllama: is it a llama.cpp program?");
        } else {
            throw_if_stopped("before the command started; it was not run");
            child_->release();
        }
        // Idle only from here: attaching (and the first loader stops) at full speed. An
        // operator gate (QoS, budget) must see decode calls as they end: with one, normal.
        const bool idle = opts_.idle_consumer && !gate_;
        priority_ = std::make_unique<ConsumerPriority>(
            idle ? ConsumerPriority::Mode::Idle : ConsumerPriority::Mode::Normal,
            bpf_map__fd(skel_->maps.events), opts_.buffer_kb << 10, [this] {
                return g_stop_signal.load() != 0 || target_held();
            });
        set_meta("consumer", idle ? "idle" : "normal");
        int status = poll_until_exit();
        write_budget_meta();
        return finish(status);
    }

    // Recording cannot go on. The target is never harmed: the probes go and it runs on
    // (a launched command that already runs is the user's, not ours to kill). A run that
    // recorded nothing leaves no database, so the same -o works for the retry; one that
    // did is kept, marked incomplete, with the reason.
    void fail(const std::string& why) {
        if (priority_) priority_->stay_normal();
        release_target();
        try {
            if (writer_) writer_->commit();
        } catch (...) {
        }
        if (events_recorded() == 0) {
            consumer_.reset();
            writer_.reset();  // its statements first: a connection with live statements does not close
            probes_.reset();
            db_.reset();
            for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(opts_.output.string() + suffix);
            return;
        }
        try {
            store_loss_counts();
            set_meta("error", why);
            set_meta("status", store::to_string(store::RunStatus::Incomplete));
        } catch (...) {
            // A full disk may refuse even this; readers still see the recorder gone.
        }
    }

private:

    static std::unique_ptr<store::Database> create_store(const fs::path& path, TargetGuardian& guardian) {
        create_private_file(path);
        guardian.created_database();
        try {
            return std::make_unique<store::Database>(path, store::Database::Mode::Create);
        } catch (...) {
            fs::remove(path);
            throw;
        }
    }

    void set_meta(const std::string& k, const std::string& v) { db_->set_meta(k, v); }

    uint64_t events_recorded() const {
        uint64_t n = 0;
        if (writer_)
            for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) n += writer_->count(k);
        return n;
    }

    // Detaches every probe, then resumes the target if a loader stop of ours may still
    // hold it. Safe to call more than once.
    void release_target() {
        close_wait_sampler();
        if (probes_) probes_->detach_all();
        resume_if_held();
    }

    // A loader stop of ours holds the target (the kernel side stopped it more often than
    // it was resumed, by us or by the guardian).
    bool target_held() const {
        return skel_ && __atomic_load_n(&skel_->bss->library_stops, __ATOMIC_ACQUIRE) !=
                            __atomic_load_n(&skel_->bss->library_resumes, __ATOMIC_ACQUIRE);
    }

    // Only a stop of ours is undone: a target somebody else stopped stays stopped.
    void resume_if_held() {
        if (!target_held() || pid_ <= 0) return;
        __atomic_store_n(&skel_->bss->library_resumes, __atomic_load_n(&skel_->bss->library_stops, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELEASE);
        for (auto& slot : skel_->bss->held_followers)
            if (const pid_t f = pid_t(__atomic_exchange_n(&slot, 0u, __ATOMIC_ACQ_REL)); f && f != pid_) kill(f, SIGCONT);
        kill(pid_, SIGCONT);
    }

    // A launched command that forks (`unshare --pid --fork`, `timeout`, a shell): the
    // first process of its tree held at a loader stop with libllama loaded becomes the
    // target; its probes go in before it runs on.
    void adopt_follower() {
        if (!child_ || skel_->bss->target_chosen) return;
        for (const auto& slot : skel_->bss->held_followers) {
            const pid_t f = pid_t(__atomic_load_n(&slot, __ATOMIC_ACQUIRE));
            if (!f || f == pid_) continue;
            bool llama = false;
            try {
                for (const auto& lib : mapped_libraries(f)) llama |= lib.role == LibRole::Llama;
            } catch (const Error&) {
                continue;  // gone already
            }
            if (!llama) continue;
            set_meta("launched_pid", std::to_string(pid_));
            pid_ = f;
            __atomic_store_n(&skel_->bss->target_tgid, uint32_t(f), __ATOMIC_RELEASE);
            probes_->retarget(f);
            guardian_->set_target(f);
            set_meta("pid", std::to_string(f));
            set_meta("target_command", read_cmdline(f));
            return;
        }
    }

    // Lost and cut data, per kind, as of now: stored with every commit, so a run that
    // ends badly still says what it is missing.
    // Node records the kernel side still holds (a recording that stops mid-graph): they
    // never arrive, so they count as lost. Mid-run it is the few of the graph under way.
    int64_t ops_still_pending() const {
        if (!ended_) return 0;
        const int n = libbpf_num_possible_cpus();
        std::vector<int64_t> per_cpu(std::max(n, 1));
        uint32_t zero = 0;
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.ops_pending), &zero, per_cpu.data()) != 0) return 0;
        int64_t sum = 0;
        for (int64_t v : per_cpu) sum += v;
        return std::max<int64_t>(sum, 0);
    }

    // Records of the graph under way when the probes went (an interrupted attach) are cut,
    // not lost to a full buffer: stored as their own kind.
    void store_loss_counts() {
        store::Statement st(db_->handle(), "INSERT OR REPLACE INTO lost_events(kind, count) VALUES (?, ?)");
        for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k)
            st.bind(1, std::string(kind_name(k))).bind(2, int64_t(skel_->bss->lost_events[k])).run();
        st.bind(1, std::string(store::kOpsCutAtEnd)).bind(2, ops_still_pending()).run();
        for (uint32_t k = 0; k < PI_DROP_KIND_MAX; ++k)
            st.bind(1, std::string(drop_name(k))).bind(2, int64_t(skel_->bss->dropped[k])).run();
        st.bind(1, std::string("malformed")).bind(2, int64_t(writer_->malformed())).run();
    }

    void commit() {
        writer_->begin();
        store_loss_counts();
        writer_->commit();
    }

    void open_counters() {
        if (opts_.level != TraceLevel::Full && opts_.counters.empty()) return;
        std::string list = opts_.counters.empty() ? kDefaultCounters : opts_.counters;
        n_cpus_ = libbpf_num_possible_cpus();
        counters_ = std::make_unique<PerCpuCounters>(split_counter_list(list), n_cpus_);
        store::Statement st(db_->handle(),
                            "INSERT INTO counters(idx, name, perf_type, config, available, reason) VALUES (?,?,?,?,?,?)");
        int idx = 0;
        std::string unavailable;
        for (const auto& c : counters_->specs()) {
            st.bind(1, c.available ? int64_t{idx++} : int64_t{-1 - int64_t(&c - counters_->specs().data())});
            st.bind(2, c.name).bind(3, int64_t{c.perf_type}).bind(4, int64_t(c.config)).bind(5, int64_t{c.available});
            c.available ? st.bind_null(6) : st.bind(6, c.reason);
            st.run();
            if (!c.available) unavailable += (unavailable.empty() ? "" : ", ") + c.name + " (" + c.reason + ")";
        }
        if (!unavailable.empty() && !opts_.quiet) std::cerr << "profinfer: counters unavailable: " << unavailable << "\n";
    }

    void load_bpf() {
        libbpf_set_print(libbpf_print);
        skel_ = tracer_bpf__open();
        if (!skel_) throw_errno("opening the BPF object");
        skel_->bss->target_tgid = pid_;
        skel_->rodata->follow_children = child_ != nullptr;
        skel_->rodata->stop_on_library_load = true;
        skel_->rodata->capture_experts = opts_.level == TraceLevel::Full;
        skel_->rodata->trace_ops = opts_.level == TraceLevel::Op || opts_.level == TraceLevel::Full;
        skel_->rodata->n_cpus = std::max(n_cpus_, 1);
        const size_t n_active = counters_ ? counters_->active().size() : 0;
        skel_->rodata->n_counters = n_active;
        for (size_t c = 0; c < n_active && c < PI_MAX_COUNTERS; ++c)
            skel_->rodata->counter_source[c] = counters_->active()[c]->source;
        bpf_map__set_max_entries(skel_->maps.counters, std::max<size_t>(1, n_active * std::max(n_cpus_, 1)));
        bpf_map__set_max_entries(skel_->maps.events, opts_.buffer_kb << 10);
        // Threads with a node under way at once (slots are freed when a thread exits): four
        // per CPU is more than ggml starts; fewer buckets make the graph-exit flush cheaper.
        const char* slots = std::getenv("PROFINFER_THREAD_SLOTS");
        bpf_map__set_max_entries(skel_->maps.thread_states,
                                 slots ? std::max(1, std::atoi(slots)) : std::max(64, 4 * libbpf_num_possible_cpus()));
        skel_->rodata->wakeup_bytes = (opts_.buffer_kb << 10) / 8;
        // PROFINFER_ALTERNATE=W: windows of W calls recorded and W whose node probes trap and
        // return (the BPF side counts the calls); W:detach: W with the operator probes in and
        // W with them out (the recorder attaches and detaches them).
        if (const char* alt = std::getenv("PROFINFER_ALTERNATE")) {
            const std::string a = alt;
            const int w = std::atoi(alt);
            const bool detach = a.size() > 7 && a.substr(a.size() - 7) == ":detach";
            if (w <= 0 || (!detach && a != std::to_string(w)))
                throw Error("PROFINFER_ALTERNATE must be W or W:detach (W calls per window), not '" + a + "'");
            if (gate_) throw Error("PROFINFER_ALTERNATE cannot be combined with --budget or --qos-min-tps");
            if (opts_.level < TraceLevel::Op) throw Error("PROFINFER_ALTERNATE needs --level op or full");
            if (detach)
                gate_ = std::make_unique<AlternatingGate>(w);
            else
                skel_->rodata->alternate_calls = uint32_t(w);
            set_meta("alternate_calls", a);
        }
        // The overhead study's ablations (experiments/specs/overhead.toml: tracers op-trap, op-nosend): the
        // operator probes trap and return, or do everything but send. Not a trace.
        if (const char* ablate = std::getenv("PROFINFER_ABLATE")) {
            const std::string a = ablate;
            if (a != "trap" && a != "send") throw Error("PROFINFER_ABLATE must be trap or send, not '" + a + "'");
            skel_->rodata->ablate = a == "trap" ? PI_ABLATE_TRAP : PI_ABLATE_SEND;
            set_meta("ablate", a);
            if (!opts_.quiet)
                std::cerr << "profinfer: PROFINFER_ABLATE=" << a << ": operator records are "
                          << (a == "trap" ? "not made" : "not sent") << " (a cost measurement, not a trace)\n";
        }
        probes_ = std::make_unique<ProbeAttacher>(skel_, pid_, opts_.level, opts_.wait, *db_);
        const bool sched = opts_.level == TraceLevel::Full;
        skel_->rodata->emit_sched = sched;
        // sched_switch also keeps per-node counters right across CPU migrations. Its
        // prototype depends on the kernel: prev_state is an argument from 5.18 on, read from
        // the task before. PROFINFER_SCHED_SWITCH=3arg forces that path, =both loads the two
        // (every switch recorded twice), for the test that checks one against the other.
        const bool want_switch = sched || n_active > 0;
        const std::string forced = std::getenv("PROFINFER_SCHED_SWITCH") ? std::getenv("PROFINFER_SCHED_SWITCH") : "";
        const bool three_args = forced.empty() ? tracepoint_arg_count("sched_switch") == 3 : forced != "4arg";
        const bool four_args = forced.empty() ? !three_args : forced != "3arg";
        bpf_program__set_autoload(skel_->progs.sched_switch, want_switch && four_args);
        bpf_program__set_autoload(skel_->progs.sched_switch_3arg, want_switch && three_args);
        if (want_switch) set_meta("sched_switch_program", four_args && three_args ? "both" : three_args ? "3arg" : "4arg");
        bpf_program__set_autoload(skel_->progs.sched_wakeup, sched);
        bpf_program__set_autoload(skel_->progs.wait_sample, probes_->wait_samples());
        bpf_program__set_autoload(skel_->progs.follow_fork, child_ != nullptr);
        int err = tracer_bpf__load(skel_);
        if (err) {
            if (err == -EPERM || err == -EACCES)
                throw Error("loading BPF programs was refused: run as root, or grant CAP_BPF, CAP_PERFMON and "
                            "CAP_SYS_ADMIN (see docs/reliability.md)");
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
        if (probes_->wait_samples()) open_wait_sampler();
        for (auto [prog, name] : {std::pair{skel_->progs.sched_switch, "sched_switch"},
                                  std::pair{skel_->progs.sched_switch_3arg, "sched_switch"},
                                  std::pair{skel_->progs.sched_wakeup, "sched_wakeup"},
                                  std::pair{skel_->progs.thread_exit, "sched_process_exit"},
                                  std::pair{skel_->progs.follow_fork, "sched_process_fork"}}) {
            if (bpf_program__autoload(prog)) probes_->attach_tracepoint(prog, name);
        }
    }

    // --wait sampled: a CPU-clock sampling event on every CPU, each running wait_sample.
    void open_wait_sampler() {
        if (opts_.sample_hz < 1 || opts_.sample_hz > 20000)
            throw Error("--sample-hz must be 1 to 20000, not " + std::to_string(opts_.sample_hz));
        set_meta("wait_method", to_string(opts_.wait));
        set_meta("sample_hz", std::to_string(opts_.sample_hz));
        for (int cpu = 0; cpu < libbpf_num_possible_cpus(); ++cpu) {
            perf_event_attr a{};
            a.size = sizeof a;
            a.type = PERF_TYPE_SOFTWARE;
            a.config = PERF_COUNT_SW_CPU_CLOCK;
            // cpu-clock counts nanoseconds; a few µs off the round period so that samples do
            // not run in step with the scheduler tick or other round-period timers.
            a.sample_period = 1000000000ull / opts_.sample_hz + 1237;
            int fd = int(syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
            if (fd < 0) {
                if (errno == ENODEV || errno == EINVAL) continue;  // a possible CPU that is offline
                throw_errno("opening the CPU-clock sampler on CPU " + std::to_string(cpu) + " (--wait sampled)");
            }
            bpf_link* l = bpf_program__attach_perf_event(skel_->progs.wait_sample, fd);
            if (!l) {
                int err = errno;
                ::close(fd);
                throw Error(std::string("attaching the wait sampler: ") + std::strerror(err));
            }
            sample_links_.push_back(l);  // the link owns the fd
        }
    }

    void close_wait_sampler() {
        for (bpf_link* l : sample_links_) bpf_link__destroy(l);
        sample_links_.clear();
    }

    // What the budget knows about this run's cost (at every switch, and at the end).
    void write_budget_meta() {
        if (!budget_) return;
        set_meta("budget_cost_pct", std::to_string(100 * budget_->cost()));
        set_meta("budget_switch_cost_pct", std::to_string(100 * budget_->switch_cost()));
        set_meta("budget_gap_calls", std::to_string(budget_->gap()));
        set_meta("budget_window_cost_calls", std::to_string(budget_->last_window_cost()));
        set_meta("budget_traces_every_call", budget_->tracing_every_call() ? "1" : "0");
    }

    void apply_qos() {
        auto pending = consumer_->take_gate_action();
        if (!pending) return;
        const auto action = *pending;
        auto monotonic_ns = [] {  // the clock of bpf_ktime_get_ns
            timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            return int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
        };
        const int64_t switch_start = monotonic_ns();
        probes_->set_ops_attached(action == OperatorGate::Action::Attach);
        const int64_t ts = monotonic_ns();  // when it took effect
        if (budget_) budget_->note_switch(uint64_t(switch_start), uint64_t(ts));
        store::Statement st(db_->handle(),
                            "INSERT INTO qos_events(ts_ns, action, tokens_per_s, start_ns) VALUES (?, ?, ?, ?)");
        st.bind(1, ts).bind(2, std::string(action == OperatorGate::Action::Attach ? "attach" : "detach"));
        st.bind(3, gate_->tps()).bind(4, switch_start).run();
        write_budget_meta();
    }

    // The consumer cannot store what the probes send (a full disk, a layout that reads
    // garbage): recording stops, the target goes on untraced and is waited for as usual.
    void stop_recording(const std::string& why) {
        recording_error_ = why;
        release_target();
        try {
            writer_->commit();
        } catch (...) {
        }
        try {
            commit();
            set_meta("error", why);
            set_meta("status", store::to_string(store::RunStatus::Incomplete));
        } catch (...) {
            // Even that may not fit on a full disk; readers see the recorder gone.
        }
    }

    // Returns the target's exit status (launch) or -1 (attached process, or detached).
    int poll_until_exit() {
        using clock = std::chrono::steady_clock;
        auto last_commit = clock::now();
        int forwarded = 0;  // stop signals seen when we forwarded the first
        for (;;) {
            if (recording_error_.empty()) {
                try {
                    consumer_->poll(50);
                    // The stop count, not the record, says the target sits stopped: it moves
                    // only after the SIGSTOP is sent (so the SIGCONT below cancels it) and
                    // also when the record was lost.
                    const bool library_record = consumer_->take_library_changed();
                    if (library_record || target_held()) {
                        adopt_follower();
                        probes_->attach_new_libraries();
                        if (probes_->seen_role(LibRole::Llama)) skel_->bss->target_chosen = true;
                        resume_if_held();
                    }
                    apply_qos();
                    if (clock::now() - last_commit > std::chrono::milliseconds(250)) commit(), last_commit = clock::now();
                } catch (const Error& e) {
                    // The target ended under our feet (attaching to what it just mapped): the
                    // exit check below ends the recording as usual.
                    const bool ended = !process_exists(pid_) || process_state(pid_) == 'Z';
                    if (!ended && !child_) throw;  // an attached process: release it (the guard does) and say why
                    if (!ended) stop_recording(e.what());
                }
            } else {
                poll(nullptr, 0, 50);
            }
            if (int sig = g_stop_signal.load()) {
                if (!child_) {
                    interrupted_by_ = sig;
                    return -1;
                }
                // The first is forwarded, like any wrapper does, and we wait for the command
                // however long it takes to end; a second one stops the recording and leaves
                // the command running untraced (profinfer never kills what it started).
                if (!forwarded) {
                    interrupted_by_ = sig;
                    child_->signal(sig);
                    resume_if_held();  // a command held at a loader stop must see the signal
                    forwarded = g_stop_signals.load();
                } else if (g_stop_signals.load() > forwarded) {
                    left_running_ = true;
                    return -1;
                }
            }
            if (child_) {
                // A target it forked may outlive the launched command (`cmd &`): both end first.
                if (auto st = child_->poll_exit(); st && (pid_ == child_->pid() || !process_exists(pid_) ||
                                                          process_state(pid_) == 'Z'))
                    return *st;
            } else if (!process_exists(pid_) || process_state(pid_) == 'Z') {
                return -1;
            }
        }
    }

    int finish(int status) {
        if (!recording_error_.empty())
            throw Error(recording_error_ + (child_ ? " (recording stopped; the command ran on untraced)" : ""));
        release_target();  // no probe runs from here on: what is still pending stays so
        if (priority_) {
            priority_->stay_normal();  // catch up at full speed
            set_meta("consumer_boosts", std::to_string(priority_->boosts()));
        }
        consumer_->drain();
        ended_ = true;
        writer_->begin();
        store_loss_counts();
        const int64_t cut = ops_still_pending();
        uint64_t lost_total = 0;
        for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) lost_total += skel_->bss->lost_events[k];
        const uint64_t guardian_resumes = skel_->bss->guardian_resumes;
        bool killed = status > 128;
        store::RunStatus rs = (interrupted_by_ || killed || lost_total || cut || guardian_resumes)
                                  ? store::RunStatus::Incomplete
                                  : store::RunStatus::Complete;
        if (status >= 0) set_meta("target_exit_status", std::to_string(status));
        if (interrupted_by_) set_meta("interrupted_by", strsignal(interrupted_by_));
        std::string error;
        if (lost_total) error = std::to_string(lost_total) + " records lost (ring buffer full)";
        if (left_running_)
            error += std::string(error.empty() ? "" : "; ") + "the command (pid " + std::to_string(pid_) +
                     ") had not exited after " + strsignal(interrupted_by_) +
                     "; recording stopped at a second signal and it ran on untraced";
        if (guardian_resumes)
            error += std::string(error.empty() ? "" : "; ") + "profinfer was stopped while the target waited at " +
                     std::to_string(guardian_resumes) +
                     " loader stop(s): the guardian resumed it, the libraries loaded then ran untraced until profinfer "
                     "went on";
        if (!error.empty()) set_meta("error", error);
        // Left out by choice (--sched-peers), not lost: said in meta, not in lost_events.
        set_meta("sched_peer_ids_removed", std::to_string(writer_->peers_removed()));
        set_meta("ended_at", std::to_string(std::time(nullptr)));
        set_meta("status", store::to_string(rs));
        writer_->commit();
        if (!probes_->seen_role(LibRole::Llama) && guardian_resumes)
            throw Error("profinfer was stopped while the target waited at a loader stop; the guardian resumed it " +
                        std::to_string(guardian_resumes) +
                        " time(s) and it ended before profinfer went on: nothing of it was recorded");
        if (!probes_->seen_role(LibRole::Llama))
            throw Error(opts_.pid ? "the target never loaded libllama: is it a llama.cpp program?"
                                  : "the command (nor any process it started) never loaded libllama: is it a llama.cpp "
                                    "program?");
        if (!opts_.quiet) {
            std::cerr << "profinfer: recorded";
            for (uint32_t k : {PI_EV_TOKEN, PI_EV_GRAPH, PI_EV_OP, PI_EV_NODE, PI_EV_EXPERTS, PI_EV_SWITCH, PI_EV_WAKEUP})
                if (uint64_t n = writer_->count(k))
                    std::cerr << " " << n << " " << kind_name(k);
            std::cerr << "; " << lost_total << " lost → " << opts_.output.string() << " (" << store::to_string(rs) << ")\n";
            if (lost_total)
                std::cerr << "profinfer: warning: " << lost_total
                          << " events were lost (ring buffer full): raise --buffer-mb or lower --level\n";
            if (cut)
                std::cerr << "profinfer: " << cut
                          << " operator records of the graph under way when recording stopped were cut\n";
            if (left_running_)
                std::cerr << "profinfer: the command (pid " << pid_ << ") had not exited after "
                          << strsignal(interrupted_by_) << "; it runs on untraced\n";
            if (guardian_resumes)
                std::cerr << "profinfer: warning: " << error.substr(error.find("profinfer was stopped")) << "\n";
            for (uint32_t k = 0; k < PI_DROP_KIND_MAX; ++k)
                if (uint64_t n = skel_->bss->dropped[k])
                    std::cerr << "profinfer: warning: " << n << " " << drop_name(k) << "\n";
        }
        if (left_running_) return 128 + interrupted_by_;
        return status > 0 ? status : 0;
    }

    RecordOptions opts_;
    std::unique_ptr<TargetGuardian> guardian_;  // before the database: it removes one never used
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<OperatorGate> gate_;  // --qos-min-tps or --budget, if given
    BudgetController* budget_ = nullptr;  // gate_, when it is the budget
    std::unique_ptr<PerCpuCounters> counters_;
    int n_cpus_ = 1;
    tracer_bpf* skel_ = nullptr;
    std::unique_ptr<TraceWriter> writer_;
    std::unique_ptr<EventConsumer> consumer_;
    std::unique_ptr<ProbeAttacher> probes_;
    std::unique_ptr<MemoryCgroup> cgroup_;  // before child_: removed after the command is gone
    std::unique_ptr<LaunchedProcess> child_;
    pid_t pid_ = -1;
    std::unique_ptr<ConsumerPriority> priority_;
    std::vector<bpf_link*> sample_links_;
    std::string recording_error_;
    bool ended_ = false;  // probes detached and the ring buffer drained
    int interrupted_by_ = 0;
    bool left_running_ = false;  // a second stop signal: the launched command runs on untraced
};

}  // namespace

int record(const RecordOptions& opts) {
    install_stop_handlers();
    if (opts.stop_with_parent) {
        const pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) raise(SIGTERM);  // it died before we asked
    }
    // Everything that can be refused is refused before a database exists.
    if (!opts.pid && opts.command.empty()) throw Error("record needs --pid PID or a command after --");
    if (opts.pid && !opts.command.empty()) throw Error("record takes --pid PID or a command, not both");
    if (opts.pid && (*opts.pid <= 0 || !process_exists(*opts.pid)))
        throw Error("no process with pid " + std::to_string(*opts.pid));
    if (opts.pid && *opts.pid == getpid()) throw Error("profinfer cannot record itself");
    if (opts.qos_min_tps > 0 && opts.budget_pct > 0) throw Error("--qos-min-tps and --budget cannot be combined");
    if (opts.budget_pct > 0 && opts.level < TraceLevel::Op)
        throw Error("--budget needs --level op or full (it samples the operator level)");
    if (!(opts.budget_pct >= 0 && opts.budget_pct <= 100) || !(opts.qos_min_tps >= 0) || std::isinf(opts.qos_min_tps))
        throw Error("--budget must be 0.01 to 100 and --qos-min-tps a positive number");
    if (!opts.command.empty()) check_command(opts.command.front());
    // The kernel wants a power-of-two number of pages; a ring of 1 GiB is plenty.
    const size_t page_kb = size_t(sysconf(_SC_PAGESIZE)) >> 10;
    if (opts.buffer_kb < page_kb || opts.buffer_kb > (1u << 20) || (opts.buffer_kb & (opts.buffer_kb - 1)))
        throw Error("the ring buffer must be a power of two from " + std::to_string(page_kb) +
                    " KiB to 1024 MiB (--buffer-mb 1..1024 or --buffer-kb), not " + std::to_string(opts.buffer_kb) +
                    " KiB");
    Recorder r(opts);
    try {
        return r.run();
    } catch (const Error& e) {
        r.fail(e.what());
        throw;
    }
}

}  // namespace profinfer
