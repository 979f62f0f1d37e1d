#include "recording_session.h"

#include <bpf/libbpf.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstring>
#include <ctime>
#include <iostream>
#include <utility>
#include <vector>

#include "epoll_set.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/number_text.h"
#include "profinfer/stop_signals.h"
#include "target.h"
#include "tracer_bpf.skel.h"

namespace profinfer {

namespace {

const char* drop_name(uint32_t kind) {
    switch (kind) {
        case PI_DROP_EXPERT_IDS: return "expert_ids_truncated";
        case PI_DROP_THREAD_SLOTS: return "thread_slots_full";
        case PI_DROP_MULTIPLEXED: return "counter_reads_multiplexed";
    }
    return "unknown";
}

int64_t monotonic_ns() {  // the clock of bpf_ktime_get_ns
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

bool ended(pid_t pid) { return !process_exists(pid) || process_state(pid) == 'Z'; }

}  // namespace

// --budget between its windows: the recorder woken by decode calls once per 100 ms at most
// (a window may open that much later; the credit it waits for keeps growing meanwhile).
constexpr uint64_t kBudgetGapWakeNs = 100'000'000;
// What is stored is committed this often while records flow (and this long after the last).
constexpr int64_t kCommitEveryMs = 250;

RecordingSession::RecordingSession(Parts parts, pid_t target) : p_(parts), pid_(target) {
    writer_ = std::make_unique<TraceWriter>(p_.tables, p_.probes.layout(), p_.opts.sched_peers);
    consumer_ = std::make_unique<EventConsumer>(bpf_map__fd(p_.program.skel()->maps.events), *writer_, p_.gate, p_.probes);
    if (p_.opts.max_db_mb > 0) {
        bound_ = std::make_unique<DbBound>(p_.tables, int64_t(p_.opts.max_db_mb * 1e6));
        consumer_->pause_every(size_t(DbBound::kCheckEvery * p_.opts.max_db_mb * 1e6), [this] { settle_bound(); });
    }
    if (holding()) {
        // --defer-mb: until the hold fills or the end; --consumer hold: also while a CPU idles.
        const double mb = p_.opts.defer_mb > 0 ? p_.opts.defer_mb : p_.opts.hold_mb;
        if (p_.opts.defer_mb <= 0) idle_cpus_ = std::make_unique<IdleCpus>();
        consumer_->defer_up_to(size_t(mb * 1e6));
        consumer_->on_stored([this] { commit(); });
        consumer_->count_held_in(p_.guardian.deferred_held());
        p_.guardian.watch_ring(bpf_map__fd(p_.program.skel()->maps.events));
        // Said from the start: a recorder killed outright loses what it held, and the trace
        // must say a deferred run began (the guardian's note names it).
        set_meta(store::MetaKey::DeferMb, format_double(mb, "%g"));
        p_.tables.commit();
    }
}

RecordingSession::~RecordingSession() {
    priority_.reset();  // its keeper reads the BPF object's counters
    release_target();
}

void RecordingSession::release_target() {
    p_.program.close_samplers();
    p_.probes.detach_all();
    p_.program.resume_if_held(pid_);
}

void RecordingSession::start() {
    // The budget starts with the operator probes out: a window begins once it is paid for.
    // Between windows it only counts calls: woken by them once per kBudgetGapWake.
    if (p_.budget) p_.probes.set_ops_attached(false), p_.program.set_token_wake_gap(kBudgetGapWakeNs);
    p_.guardian.started();
    p_.probes.attach_loader_watch(p_.child != nullptr);
    if (!p_.child) {
        p_.probes.attach_new_libraries();
        if (!p_.probes.seen_role(LibRole::Llama))
            throw Error("process " + std::to_string(pid_) + " (" + process_comm(pid_) +
                        ") has not loaded libllama: is it a llama.cpp program?");
    } else {
        stop_signals::throw_if_stopped("before the command started; it was not run");
        p_.child->release();
    }
    // Idle only from here: attaching (and the first loader stops) at full speed. An
    // operator gate (QoS, budget) must see decode calls as they end: with one, normal.
    const bool idle = p_.opts.idle_consumer && !p_.gate;
    priority_ = std::make_unique<ConsumerPriority>(
        idle ? ConsumerPriority::Mode::Idle : ConsumerPriority::Mode::Normal,
        bpf_map__fd(p_.program.skel()->maps.events), p_.opts.buffer_kb << 10,
        [this] { return stop_signals::last() != 0 || p_.program.target_held(); });
    set_meta(store::MetaKey::Consumer,
             std::string(idle_cpus_ ? "hold, " : "") + (idle ? "idle" : "normal"));
}

int RecordingSession::run() {
    // What profinfer's own threads cost while the target ran: CPU time and wake-ups (each
    // may take a CPU from the target), all threads.
    const auto usage = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u;
    };
    const auto ms = [](const timeval& t) { return double(t.tv_sec) * 1e3 + double(t.tv_usec) / 1e3; };
    const rusage before = usage();
    int status = poll_until_exit();
    const rusage after = usage();
    own_cpu_ms_ = ms(after.ru_utime) + ms(after.ru_stime) - ms(before.ru_utime) - ms(before.ru_stime);
    // Voluntary switches only: each is a sleep ended by a wake-up. Preemptions (involuntary)
    // depend on the machine's load, not on what the recorder does.
    own_wakeups_ = after.ru_nvcsw - before.ru_nvcsw;
    // Of which sleeps on a page being read in (the target's libraries' DWARF at its loader
    // stops: on a share the page cache does not keep, one per page, every run).
    own_major_faults_ = after.ru_majflt - before.ru_majflt;
    write_budget_meta();
    return finish(status);
}

uint64_t RecordingSession::events_recorded() const {
    uint64_t n = 0;
    for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) n += writer_->count(k);
    return n;
}

bool RecordingSession::fail(const std::string& why) {
    if (priority_) priority_->stay_normal();
    release_target();
    try {
        writer_->commit();
    } catch (...) {
    }
    if (events_recorded() == 0) return false;
    try {
        store_loss_counts();
        set_meta(store::MetaKey::Error, why);
        set_meta(store::MetaKey::Status, store::to_string(store::RunStatus::Incomplete));
    } catch (...) {
        // A full disk may refuse even this; readers still see the recorder gone.
    }
    return true;
}

// A launched command that forks (`unshare --pid --fork`, `timeout`, a shell): the first
// process of its tree held at a loader stop with libllama loaded becomes the target; its
// probes go in before it runs on.
void RecordingSession::adopt_follower(const std::vector<pid_t>& held) {
    if (!p_.child || p_.program.target_chosen()) return;
    for (const pid_t f : held) {
        if (f == pid_) continue;
        bool llama = false;
        try {
            for (const auto& lib : mapped_libraries(f)) llama |= lib.role == LibRole::Llama;
        } catch (const Error&) {
            continue;  // gone already
        }
        if (!llama) continue;
        set_meta(store::MetaKey::LaunchedPid, std::to_string(pid_));
        pid_ = f;
        p_.program.retarget(f);
        p_.probes.retarget(f);
        p_.guardian.set_target(f);
        set_meta(store::MetaKey::Pid, std::to_string(f));
        set_meta(store::MetaKey::TargetCommand, read_cmdline(f));
        return;
    }
}

// Lost and cut data, per kind, as of now: stored with every commit, so a run that ends
// badly still says what it is missing. Node records the kernel side still holds when the
// recording has ended never arrive: cut, not lost to a full buffer (mid-run they are only
// the graph under way).
void RecordingSession::store_loss_counts() {
    for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) p_.tables.set_lost(store::kRecordKinds[k], int64_t(p_.program.lost(k)));
    p_.tables.set_lost(store::kOpsCutAtEnd, ended_ ? p_.program.ops_pending() : 0);
    for (uint32_t k = 0; k < PI_DROP_KIND_MAX; ++k) p_.tables.set_lost(drop_name(k), int64_t(p_.program.dropped(k)));
    p_.tables.set_lost("malformed", int64_t(writer_->malformed()));
    // --defer-mb: records held in memory that a failed store left out.
    const auto& not_stored = consumer_->not_stored();
    for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k)
        if (not_stored[k]) p_.tables.set_lost(std::string(store::kRecordKinds[k]) + "_not_stored", int64_t(not_stored[k]));
}

void RecordingSession::commit() {
    writer_->begin();
    store_loss_counts();
    writer_->commit();
    settle_bound();
}

// --max-db-mb: checked after every drain and within one every DbBound::kCheckEvery of the
// bound in records, not only at the 250-ms commits.
void RecordingSession::settle_bound() {
    if (bound_) bound_->settle([this] { return writer_->node_defs_in_force(); }, [this] { writer_->commit(); });
}

// What the budget knows about this run's cost (at every switch, and at the end).
void RecordingSession::write_budget_meta() {
    auto* b = p_.budget;
    if (!b) return;
    using K = store::MetaKey;
    set_meta(K::BudgetCostPct, std::to_string(100 * b->cost()));
    set_meta(K::BudgetSwitchCostPct, std::to_string(100 * b->switch_cost()));
    set_meta(K::BudgetGapCalls, std::to_string(b->gap()));
    set_meta(K::BudgetWindowCostCalls, std::to_string(b->last_window_cost()));
    set_meta(K::BudgetTracesEveryCall, b->tracing_every_call() ? "1" : "0");
}

// --duration ends a recording, not a call: no new call records operators, and the one under
// way is let finish (bounded: a call that hangs is cut, and said so) so that the trace ends
// whole — it was cut mid-graph and marked incomplete in 5 recordings of 5.
void RecordingSession::end_after_the_call_under_way() {
    p_.probes.ops_off();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((p_.program.decode_in_flight() || p_.program.ops_pending() > 0) && std::chrono::steady_clock::now() < deadline &&
           !ended(pid_))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void RecordingSession::apply_gate() {
    auto pending = consumer_->take_gate_action();
    if (!pending) return;
    const auto action = *pending;
    const int64_t switch_start = monotonic_ns();
    p_.probes.set_ops_attached(action == OperatorGate::Action::Attach);
    const int64_t ts = monotonic_ns();  // when it took effect
    // A window is closed after its calls, each seen as it ends; a gap is not hurried.
    if (p_.budget) p_.program.set_token_wake_gap(action == OperatorGate::Action::Attach ? 0 : kBudgetGapWakeNs);
    if (p_.budget) p_.budget->note_switch(uint64_t(switch_start), uint64_t(ts));
    p_.tables.add(store::QosEventRow{ts, action == OperatorGate::Action::Attach ? "attach" : "detach", p_.gate->tps(),
                                     switch_start});
    write_budget_meta();
}

// The consumer cannot store what the probes send (a full disk, a layout that reads
// garbage): recording stops, the target goes on untraced and is waited for as usual.
void RecordingSession::stop_recording(const std::string& why) {
    recording_error_ = why;
    release_target();
    try {
        writer_->commit();
    } catch (...) {
    }
    try {
        commit();
        set_meta(store::MetaKey::Error, why);
        set_meta(store::MetaKey::Status, store::to_string(store::RunStatus::Incomplete));
    } catch (...) {
        // Even that may not fit on a full disk; readers see the recorder gone.
    }
}

namespace {

// The processes whose end ends the recording (the target, the launched command), as pidfds
// in the loop's epoll set: readable once the process has exited, and then left out (one of
// the two may end long before the other).
class ProcessEnds {
public:
    explicit ProcessEnds(EpollSet& set) : set_(set) {}
    ~ProcessEnds() {
        for (auto [pid, fd] : fds_)
            if (fd >= 0) ::close(fd);
    }
    void watch(pid_t pid) {
        for (auto [p, fd] : fds_)
            if (p == pid) return;
        const int fd = int(syscall(SYS_pidfd_open, pid, 0));
        fds_.push_back({pid, fd});  // -1: gone already, which the loop's exit check sees
        if (fd >= 0) set_.add(fd);
    }
    // True when one was dropped: the caller checks again before it sleeps.
    bool drop_ended() {
        bool dropped = false;
        for (auto& [pid, fd] : fds_) {
            pollfd p{fd, POLLIN, 0};
            if (fd >= 0 && ::poll(&p, 1, 0) == 1) set_.remove(fd), ::close(fd), fd = -1, dropped = true;
        }
        return dropped;
    }

private:
    EpollSet& set_;
    std::vector<std::pair<pid_t, int>> fds_;
};

}  // namespace

// Returns the target's exit status (launch) or -1 (attached process, or detached). Sleeps
// between wake-ups of the ring buffer (the kernel side wakes it at a sixteenth full, on a
// loader stop, at most once a second while records flow, and on every decode call when a
// gate needs to see them), stop signals and the end of the target or the command: an
// idle recording never wakes.
int RecordingSession::poll_until_exit() {
    using clock = std::chrono::steady_clock;
    auto last_commit = clock::now();
    int forwarded = 0;  // stop signals seen when we forwarded the first
    EpollSet wake;
    wake.add(bpf_map__fd(p_.program.skel()->maps.events), EPOLLIN | EPOLLET);
    if (stop_signals::fd() >= 0) wake.add(stop_signals::fd(), EPOLLIN | EPOLLET);
    // --duration (an attached process): a one-shot timer in the same sleep, not a poll.
    int timer = -1;
    if (p_.opts.duration_s > 0 && !p_.child) {
        timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (timer < 0) throw Error(std::string("timerfd_create: ") + std::strerror(errno));
        itimerspec at{};
        at.it_value.tv_sec = time_t(p_.opts.duration_s);
        at.it_value.tv_nsec = long((p_.opts.duration_s - double(at.it_value.tv_sec)) * 1e9);
        ::timerfd_settime(timer, 0, &at, nullptr);
        wake.add(timer, EPOLLIN);
    }
    struct CloseTimer {
        int fd;
        ~CloseTimer() {
            if (fd >= 0) ::close(fd);
        }
    } close_timer{timer};
    ProcessEnds ends(wake);
    if (p_.child) ends.watch(p_.child->pid());
    for (;;) {
        ends.watch(pid_);  // a follower adopted since
        bool more = false;  // records left in the buffer: no sleep
        if (recording_error_.empty()) {
            try {
                more = consumer_->drain();
                settle_bound();
                // The stop count, not the record, says the target sits stopped: it moves
                // only after the SIGSTOP is sent (so the SIGCONT below cancels it) and
                // also when the record was lost.
                const bool library_record = consumer_->take_library_changed();
                if (library_record || p_.program.target_held()) {
                    // Taken first: a process that stops while we look is not resumed unseen.
                    const auto held = p_.program.take_held();
                    adopt_follower(held.pids);
                    p_.probes.attach_new_libraries();
                    if (p_.probes.seen_role(LibRole::Llama)) p_.program.set_target_chosen();
                    p_.program.resume(held, pid_);
                }
                apply_gate();
                // --consumer hold: a slice of what is held stored while a CPU sits idle (the
                // records arriving meanwhile wait in the ring buffer: drained first, next turn).
                if (idle_cpus_ && consumer_->held_bytes() > 0 && idle_cpus_->idle() >= kStoreWhenIdle)
                    more |= consumer_->store_held(clock::now() + EventConsumer::kSlice);
                if (priority_) priority_->settle();
                if (clock::now() - last_commit >= std::chrono::milliseconds(kCommitEveryMs)) commit(), last_commit = clock::now();
            } catch (const Error& e) {
                // The target ended under our feet (attaching to what it just mapped): the
                // exit check below ends the recording as usual.
                if (!ended(pid_) && !p_.child) throw;  // an attached process: released by the caller, which says why
                if (!ended(pid_)) stop_recording(e.what());
            }
        }
        if (timer >= 0) {
            pollfd t{timer, POLLIN, 0};
            if (::poll(&t, 1, 0) == 1 || stop_signals::end_requested()) {
                duration_reached_ = true;
                end_after_the_call_under_way();
                return -1;  // detached by the caller; the process goes on
            }
        }
        if (int sig = stop_signals::last()) {
            if (!p_.child) {
                interrupted_by_ = sig;
                return -1;
            }
            // The first is forwarded, like any wrapper does, and we wait for the command
            // however long it takes to end; a second one stops the recording and leaves
            // the command running untraced (profinfer never kills what it started).
            if (!forwarded) {
                interrupted_by_ = sig;
                // A terminal's ^C reached the command already (it runs in our process group):
                // a second copy would be a second ^C to it (llama-cli ends at its second).
                if (!stop_signals::last_from_terminal()) p_.child->signal(sig);
                p_.program.resume_if_held(pid_);  // a command held at a loader stop must see the signal
                forwarded = stop_signals::count();
            } else if (stop_signals::count() > forwarded) {
                left_running_ = true;
                // A terminal's second ^C reaches the command too (the whole process group):
                // what is said at the end is what became of it, looked at for a moment.
                for (int i = 0; i < 20 && !ended_too_; ++i) {
                    ended_too_ = p_.child->poll_exit().has_value();
                    if (!ended_too_) ::usleep(10000);
                }
                return -1;
            }
        }
        if (p_.child) {
            // A target it forked may outlive the launched command (`cmd &`): both end first.
            if (auto st = p_.child->poll_exit(); st && (pid_ == p_.child->pid() || ended(pid_))) return *st;
        } else if (ended(pid_)) {
            return -1;
        }
        // Rows stored but not committed wait no longer than the commit interval: a target
        // that stops sending (a server between requests, a stopped process) left them out of
        // the trace until its next record, and a recorder killed meanwhile lost them
        // uncounted. Holding records, the recorder looks at the CPUs once a second even with
        // nothing arriving: a target that went idle leaves the CPUs free to store them.
        int timeout_ms = -1;
        if (idle_cpus_ && consumer_->held_bytes() > 0) timeout_ms = 1000;
        if (p_.tables.uncommitted()) {
            const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - last_commit).count();
            timeout_ms = int(std::clamp<int64_t>(kCommitEveryMs - since, 1, kCommitEveryMs));
        }
        if (p_.opts.flush_ms > 0) timeout_ms = timeout_ms < 0 ? p_.opts.flush_ms : std::min(timeout_ms, p_.opts.flush_ms);
        if (!ends.drop_ended() && !more) wake.wait(timeout_ms);
    }
}

// What a failure to store means for the launched command: it ran on untraced, or it had
// ended (STATUS its exit status) and every call of it reached the recorder.
std::string RecordingSession::what_the_command_did(int status) const {
    if (!p_.child) return "";
    return status >= 0 && !left_running_ ? " (the command had ended; what did not fit is lost)"
                                         : " (recording stopped; the command ran on untraced)";
}

int RecordingSession::finish(int status) {
    if (!recording_error_.empty()) throw Error(recording_error_ + what_the_command_did(-1));
    release_target();  // no probe runs from here on: what is still pending stays so
    try {
        store_the_end(status);
    } catch (const Error& e) {
        if (recording_error_.empty()) stop_recording("storing into " + p_.opts.output.string() + ": " + e.what());
        throw Error(recording_error_ + what_the_command_did(status));
    }
    if (!p_.probes.seen_role(LibRole::Llama) && p_.program.guardian_resumes())
        throw Error("profinfer was stopped while the target waited at a loader stop; the guardian resumed it " +
                    std::to_string(p_.program.guardian_resumes()) +
                    " time(s) and it ended before profinfer went on: nothing of it was recorded");
    if (!p_.probes.seen_role(LibRole::Llama))
        throw Error(!p_.child ? "the target never loaded libllama: is it a llama.cpp program?"
                              : "the command (nor any process it started) never loaded libllama: is it a llama.cpp "
                                "program?");
    if (!p_.opts.quiet) print_summary(end_status_, cut_, end_error_);
    if (left_running_) return 128 + interrupted_by_;
    return status > 0 ? status : 0;
}

// Everything stored once the target is released: what the buffer and --defer-mb still hold,
// the counts, the status; then the trace made one file. A failure here (a disk that fills at
// the very end) is said like one during the recording (finish).
void RecordingSession::store_the_end(int status) {
    if (priority_) {
        priority_->stay_normal();  // catch up at full speed
        set_meta(store::MetaKey::ConsumerBoosts, std::to_string(priority_->boosts()));
    }
    set_meta(store::MetaKey::RecorderCpuMs, format_double(own_cpu_ms_, "%.1f"));
    set_meta(store::MetaKey::RecorderWakeups, std::to_string(own_wakeups_));
    set_meta(store::MetaKey::RecorderMajorFaults, std::to_string(own_major_faults_));
    try {
        while (consumer_->drain()) {
        }
        // --defer-mb: what was held, stored now that the target no longer decodes under the
        // recorder.
        if (holding()) consumer_->flush();
    } catch (const Error& e) {
        // What was stored stays (stored in steps), the rest is counted lost, by kind.
        stop_recording("storing into " + p_.opts.output.string() + ": " + e.what());
        throw;
    }
    if (holding())
        set_meta(store::MetaKey::DeferredFlushes, std::to_string(consumer_->deferred_flushes()));
    ended_ = true;
    writer_->begin();
    store_loss_counts();
    const int64_t cut = p_.program.ops_pending();
    const uint64_t lost_total = p_.program.lost_total();
    const uint64_t guardian_resumes = p_.program.guardian_resumes();
    const bool killed = status > 128;
    const store::RunStatus rs = (interrupted_by_ || killed || lost_total || cut || guardian_resumes)
                                    ? store::RunStatus::Incomplete
                                    : store::RunStatus::Complete;
    using K = store::MetaKey;
    if (status >= 0) set_meta(K::TargetExitStatus, std::to_string(status));
    if (interrupted_by_) set_meta(K::InterruptedBy, strsignal(interrupted_by_));
    if (duration_reached_) {
        set_meta(K::DurationS, format_double(p_.opts.duration_s, "%g"));
        if (!p_.opts.quiet)
            std::cerr << "profinfer: --duration " << format_double(p_.opts.duration_s, "%g") << " s reached: detached from pid "
                      << pid_ << ", which goes on\n";
    }
    if (bound_) {
        writer_->commit();
        settle_bound();
        writer_->begin();
        set_meta(K::MaxDbMb, format_double(p_.opts.max_db_mb, "%g"));
        set_meta(K::CallsDropped, std::to_string(bound_->calls_dropped()));
    }
    std::string error;
    if (lost_total) error = std::to_string(lost_total) + " records lost (ring buffer full)";
    if (left_running_)
        error += std::string(error.empty() ? "" : "; ") + "the command (pid " + std::to_string(pid_) +
                 ") had not exited after " + strsignal(interrupted_by_) + "; recording stopped at a second signal" +
                 (ended_too_ ? " and the command ended with it" : " and it ran on untraced");
    if (guardian_resumes)
        error += std::string(error.empty() ? "" : "; ") + "profinfer was stopped while the target waited at " +
                 std::to_string(guardian_resumes) +
                 " loader stop(s): the guardian resumed it, the libraries loaded then ran untraced until profinfer "
                 "went on";
    if (!error.empty()) set_meta(K::Error, error);
    // A PMU counter that opened and read 0 on every operator (an emulated PMU, an event
    // this core does not implement) is no measurement: said per event, left out of the
    // analyses. Software events and page faults that read 0 did not happen: those stay.
    if (p_.opts.level == TraceLevel::Full || !p_.opts.counters.empty()) {
        std::string zero;
        for (int slot : writer_->counter_slots_read_zero())
            if (const CounterSpec* c = p_.program.counter(slot); c && counts_on_a_pmu(*c))
                zero += (zero.empty() ? "" : ",") + c->name;
        set_meta(K::CountersReadZero, zero);
        if (!zero.empty() && !p_.opts.quiet)
            std::cerr << "profinfer: counters opened but read 0 on every operator (not counted by this PMU, or the "
                         "event never occurred; left out of the analyses): "
                      << zero << "\n";
    }
    // Left out by choice (--sched-peers), not lost: said in meta, not in lost_events.
    set_meta(K::SchedPeerIdsRemoved, std::to_string(writer_->peers_removed()));
    set_meta(K::OpDuplicatesDropped, std::to_string(writer_->op_duplicates()));
    set_meta(K::EndedAt, std::to_string(std::time(nullptr)));
    set_meta(K::Status, store::to_string(rs));
    writer_->commit();
    // Before "(complete)" is said: the trace is one file, or the user is told what is beside it.
    // Its indexes and node_spans are one sort of every operator record (~2 s per million).
    if (const uint64_t ops = writer_->count(PI_EV_OP); ops >= 1000000 && !p_.opts.quiet)
        std::cerr << "profinfer: indexing " << ops << " operator records for the readers (~" << (ops + 500000) / 1000000 * 2
                  << " s)\n";
    const std::string beside = p_.tables.finish();
    if (!beside.empty()) std::cerr << "profinfer: warning: " << beside << "\n";
    end_status_ = rs, cut_ = cut, end_error_ = error;
}

void RecordingSession::print_summary(store::RunStatus rs, int64_t cut, const std::string& error) const {
    const uint64_t lost_total = p_.program.lost_total();
    std::cerr << "profinfer: recorded";
    for (uint32_t k : {PI_EV_TOKEN, PI_EV_GRAPH, PI_EV_OP, PI_EV_NODE, PI_EV_EXPERTS, PI_EV_SWITCH, PI_EV_WAKEUP})
        if (uint64_t n = writer_->count(k)) std::cerr << " " << n << " " << store::kRecordKinds[k];
    std::cerr << "; " << lost_total << " lost → " << p_.opts.output.string() << " (" << store::to_string(rs) << ")\n";
    if (lost_total)
        std::cerr << "profinfer: warning: " << lost_total
                  << " events were lost (ring buffer full): raise --buffer-mb or lower --level\n";
    if (bound_ && bound_->calls_dropped())
        std::cerr << "profinfer: --max-db-mb " << format_double(p_.opts.max_db_mb, "%g") << ": the oldest "
                  << bound_->calls_dropped() << " llama_decode calls were dropped whole (" << bound_->prunes()
                  << " times) to keep the trace under " << format_double(p_.opts.max_db_mb, "%g") << " MB\n";
    if (cut)
        std::cerr << "profinfer: " << cut << " operator records of the graph under way when recording stopped were cut\n";
    if (left_running_)
        std::cerr << "profinfer: the command (pid " << pid_ << ") had not exited after " << strsignal(interrupted_by_)
                  << (ended_too_ ? "; it ended at the second one too (a terminal's ^C reaches its whole process group)\n"
                                 : "; it runs on untraced\n");
    if (p_.program.guardian_resumes())
        std::cerr << "profinfer: warning: " << error.substr(error.find("profinfer was stopped")) << "\n";
    for (uint32_t k = 0; k < PI_DROP_KIND_MAX; ++k)
        if (uint64_t n = p_.program.dropped(k)) std::cerr << "profinfer: warning: " << n << " " << drop_name(k) << "\n";
}

}  // namespace profinfer
