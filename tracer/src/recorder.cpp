// record: the orchestrator. It refuses bad options before anything exists, creates the
// database (the guardian first, so that a recorder that dies never leaves the target
// stopped), launches or finds the target, sets up the BPF side (TracerProgram) and the
// probes (ProbeAttacher), and hands over to the RecordingSession; every way out passes
// through its cleanup: the probes go, then the target goes on.
#include "profinfer/recorder.h"

#include <sys/prctl.h>
#include <sys/utsname.h>
#include <signal.h>
#include <unistd.h>

#include <ctime>
#include <memory>

#include "budget_controller.h"
#include "launcher.h"
#include "memory_cgroup.h"
#include "probe_attacher.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/output_file.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "qos_controller.h"
#include "record_options.h"
#include "recording_session.h"
#include "profinfer/stop_signals.h"
#include "target.h"
#include "target_guardian.h"
#include "tracer_program.h"

namespace fs = std::filesystem;

namespace profinfer {

static_assert(PI_EVENTS_VERSION == store::kEventsVersion, "the store must know the event format it holds");

namespace {

class Recorder {
    using K = store::MetaKey;

public:
    explicit Recorder(const RecordOptions& o)
        : opts_(o),
          guardian_(std::make_unique<TargetGuardian>(o.output, !o.pid)),
          db_(create_store(o.output, *guardian_)),
          tables_(std::make_unique<store::TraceTables>(*db_)) {
        if (o.qos_min_tps > 0) gate_ = std::make_unique<QosController>(o.qos_min_tps);
        if (o.budget_pct > 0) {
            auto b = std::make_unique<BudgetController>(o.budget_pct);
            budget_ = b.get();
            gate_ = std::move(b);
        }
        set_meta(K::Status, store::to_string(store::RunStatus::Running));
        // Who is writing: a reader that finds the run still "running" with this process
        // gone knows the recording ended without its bookkeeping (store::run_health).
        set_meta(K::RecorderPid, std::to_string(getpid()));
        set_meta(K::RecorderStart, std::to_string(store::process_start_time(getpid())));
        set_meta(K::SchedPeers, to_string(o.sched_peers));
        set_meta(K::Level, to_string(o.level));
        set_meta(K::Board, o.board);
        set_meta(K::EventsVersion, std::to_string(PI_EVENTS_VERSION));
        set_meta(K::Clock, "CLOCK_MONOTONIC");
        set_meta(K::StartedAt, std::to_string(std::time(nullptr)));
        utsname u{};
        uname(&u);
        set_meta(K::Host, u.nodename);
        set_meta(K::Kernel, std::string(u.sysname) + " " + u.release + " " + u.machine);
        std::string cmd;
        for (const auto& a : o.command) cmd += (cmd.empty() ? "" : " ") + a;
        if (!cmd.empty()) set_meta(K::Command, cmd);
        if (o.qos_min_tps > 0) set_meta(K::QosMinTps, std::to_string(o.qos_min_tps));
        if (o.budget_pct > 0) set_meta(K::BudgetPct, std::to_string(o.budget_pct));
    }

    // Every way out passes here: the probes go, then the target goes on.
    ~Recorder() {
        session_.reset();
        release_target();
        probes_.reset();
        program_.reset();
        guardian_.reset();
    }

    int run() {
        if (opts_.pid) {
            pid_ = *opts_.pid;
            set_meta(K::Command, read_cmdline(pid_));
            set_meta(K::Attached, "1");
        } else {
            child_ = std::make_unique<LaunchedProcess>(opts_.command);
            pid_ = child_->pid();
            if (opts_.memory_limit) {  // before it runs: everything it maps is charged there
                cgroup_ = std::make_unique<MemoryCgroup>(opts_.memory_limit);
                cgroup_->add(pid_);
                set_meta(K::MemoryLimitBytes, std::to_string(opts_.memory_limit));
                set_meta(K::MemoryCgroup, cgroup_->path().string() + " (" + cgroup_->version() + ")");
            }
        }
        set_meta(K::Pid, std::to_string(pid_));
        guardian_->set_target(pid_);
        if (cgroup_) guardian_->set_cgroup(cgroup_->path());
        stop_signals::throw_if_stopped("before recording started");
        program_ = std::make_unique<TracerProgram>(opts_, pid_, child_ != nullptr, gate_ != nullptr, *tables_);
        if (auto alternating = program_->take_alternating_gate()) gate_ = std::move(alternating);
        probes_ = std::make_unique<ProbeAttacher>(program_->skel(), pid_, opts_.level, opts_.wait, *tables_);
        program_->load(*probes_);
        program_->hand_stops_to(*guardian_);
        session_ = std::make_unique<RecordingSession>(
            RecordingSession::Parts{opts_, *program_, *probes_, *tables_, *guardian_, gate_.get(), budget_, child_.get()},
            pid_);
        session_->start();
        return session_->run();
    }

    // Recording cannot go on. The target is never harmed: the probes go and it runs on
    // (a launched command that already runs is the user's, not ours to kill). A run that
    // recorded nothing leaves no database, so the same -o works for the retry; one that
    // did is kept, marked incomplete, with the reason.
    void fail(const std::string& why) {
        if (session_ && session_->fail(why)) return;
        session_.reset();
        release_target();
        probes_.reset();
        tables_.reset();  // its statements first: a connection with live statements does not close
        db_.reset();
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(opts_.output.string() + suffix);
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

    void set_meta(store::MetaKey k, const std::string& v) { tables_->set_meta(k, v); }

    // Before the session exists, or after it went: every probe goes, then the target.
    void release_target() {
        if (session_) return session_->release_target();
        if (program_) program_->close_samplers();
        if (probes_) probes_->detach_all();
        if (program_) program_->resume_if_held(pid_);
    }

    RecordOptions opts_;
    std::unique_ptr<TargetGuardian> guardian_;  // before the database: it removes one never used
    std::unique_ptr<store::Database> db_;
    std::unique_ptr<store::TraceTables> tables_;  // db_'s rows, written only through it
    std::unique_ptr<OperatorGate> gate_;  // --qos-min-tps, --budget or --alternate W:detach
    BudgetController* budget_ = nullptr;  // gate_, when it is the budget
    std::unique_ptr<MemoryCgroup> cgroup_;  // before child_: removed after the command is gone
    std::unique_ptr<LaunchedProcess> child_;
    pid_t pid_ = -1;
    std::unique_ptr<TracerProgram> program_;
    std::unique_ptr<ProbeAttacher> probes_;
    std::unique_ptr<RecordingSession> session_;
};

}  // namespace

int record(const RecordOptions& opts) {
    stop_signals::install();
    if (opts.stop_with_parent) {
        const pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) raise(SIGTERM);  // it died before we asked
    }
    check_record_options(opts);  // everything that can be refused is refused before a database exists
    Recorder r(opts);
    try {
        return r.run();
    } catch (const Error& e) {
        r.fail(e.what());
        throw;
    }
}

}  // namespace profinfer
