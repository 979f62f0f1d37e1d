#pragma once
// A recording once the BPF side is loaded: it starts the target under the probes, then
// polls the ring buffer until the target ends — storing every record, attaching to
// libraries as they load, applying the operator gate, committing with the loss counts —
// and finishes the database with the run's status. The recorder sets it up and owns
// what outlives it (the database, the probes, the program).
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "budget_controller.h"
#include "consumer_priority.h"
#include "db_bound.h"
#include "event_consumer.h"
#include "idle_cpus.h"
#include "launcher.h"
#include "operator_gate.h"
#include "probe_attacher.h"
#include "profinfer/recorder.h"
#include "profinfer/trace_tables.h"
#include "target_guardian.h"
#include "trace_writer.h"
#include "tracer_program.h"

namespace profinfer {

class RecordingSession {
public:
    // CHILD: the launched command (null when attached to --pid TARGET). GATE: --budget,
    // --qos-min-tps or --alternate W:detach (null: operators on every call);
    // BUDGET: GATE when it is the budget.
    struct Parts {
        const RecordOptions& opts;
        TracerProgram& program;
        ProbeAttacher& probes;
        store::TraceTables& tables;
        TargetGuardian& guardian;
        OperatorGate* gate;
        BudgetController* budget;
        LaunchedProcess* child;
    };
    RecordingSession(Parts parts, pid_t target);
    ~RecordingSession();
    RecordingSession(const RecordingSession&) = delete;
    RecordingSession& operator=(const RecordingSession&) = delete;

    // The probes go into the target (attached) or the command starts under them (launched).
    void start();
    // Until the target ends; returns profinfer's exit status (the command's, when launched).
    int run();
    // Recording failed: what was stored is committed, with the losses and WHY, and the run
    // marked incomplete. False when nothing had been recorded (the caller removes the file).
    bool fail(const std::string& why);
    // Every probe goes, then the target goes on. Safe to call more than once.
    void release_target();
    pid_t target() const { return pid_; }

private:
    void adopt_follower(const std::vector<pid_t>& held);
    void store_loss_counts();
    void commit();
    void settle_bound();
    void write_budget_meta();
    void apply_gate();
    void stop_recording(const std::string& why);
    int poll_until_exit();
    int finish(int status);
    void print_summary(store::RunStatus rs, int64_t cut, const std::string& error) const;
    void set_meta(store::MetaKey k, const std::string& v) { p_.tables.set_meta(k, v); }
    uint64_t events_recorded() const;

    Parts p_;
    pid_t pid_;
    std::unique_ptr<TraceWriter> writer_;
    std::unique_ptr<EventConsumer> consumer_;
    std::unique_ptr<ConsumerPriority> priority_;
    std::unique_ptr<DbBound> bound_;  // --max-db-mb
    // --consumer hold: the CPUs profinfer may run on, looked at while it holds records.
    std::unique_ptr<IdleCpus> idle_cpus_;
    // Records are held in memory (--defer-mb, --consumer hold).
    bool holding() const { return p_.opts.defer_mb > 0 || p_.opts.hold; }
    // --consumer hold stores a slice of what it holds when at least this many CPUs sat idle.
    static constexpr double kStoreWhenIdle = 0.25;
    std::string recording_error_;
    bool ended_ = false;  // probes detached and the ring buffer drained
    int interrupted_by_ = 0;
    void end_after_the_call_under_way();
    bool duration_reached_ = false;  // --duration ended the recording of an attached process
    double own_cpu_ms_ = 0;   // profinfer's threads while the target ran
    int64_t own_wakeups_ = 0;
    int64_t own_major_faults_ = 0;
    bool left_running_ = false;  // a second stop signal: the launched command runs on untraced
    bool ended_too_ = false;     // ... or it ended at that signal as well
    // finish(): what store_the_end found, for the summary line.
    store::RunStatus end_status_ = store::RunStatus::Incomplete;
    int64_t cut_ = 0;
    std::string end_error_;
    void store_the_end(int status);
    std::string what_the_command_did(int status) const;
};

}  // namespace profinfer
