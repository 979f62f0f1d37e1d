#pragma once
#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace profinfer {

// A small helper process that outlives profinfer and holds nothing of it (no BPF link:
// probes die with profinfer's descriptors). It keeps three promises to the target:
// - profinfer dies without its own cleanup (kill -9, the OOM killer, a crash): once the
//   dead process is fully gone, the guardian resumes the target if a loader stop of ours
//   holds it — only then: a target the user stopped stays stopped — and marks the trace
//   database incomplete; a recording that never began (the command never ran, no probe
//   went in) leaves no database, so the same -o works for the retry;
// - profinfer is stopped (^Z, SIGSTOP, a debugger) while a loader stop of ours holds the
//   target: the guardian resumes it after a moment and counts that (the library loaded
//   meanwhile runs untraced until profinfer goes on);
// - a memory cgroup of the launched command is removed once the command has exited;
// - a launched command's process group is never orphaned by profinfer's end (where a
//   job-control shell ran profinfer): the guardian is then a child of profinfer's parent in
//   that group, living as long as the command, so the kernel sends the group no SIGHUP and no
//   SIGCONT — a command the user stopped stays stopped, whatever happens to profinfer.
// Dismissed on every orderly exit, where the recorder does all of this itself.
// Started first, before the database exists: every step after it is covered.
// The processes held at loader stops (tgid keys of the BPF map HELD_MAP_FD), taken: each
// deleted from the map, and returned only if this caller's delete removed it, so that the
// recorder and the guardian never both resume one stop. Every process noted before the call
// and not taken by the other is among them; one noted meanwhile may be left for next time.
std::vector<pid_t> take_held_processes(int held_map_fd);

class TargetGuardian {
public:
    // LAUNCHING: profinfer launches the command (not --pid).
    TargetGuardian(const std::filesystem::path& db, bool launching);
    ~TargetGuardian();  // dismisses the guardian
    TargetGuardian(const TargetGuardian&) = delete;
    TargetGuardian& operator=(const TargetGuardian&) = delete;

    // The BPF object's .bss (an mmapable array map) with the loader-stop count the kernel
    // side bumps, the resume count user space keeps and the guardian's own resume count (byte
    // offsets of three u64s): the guardian maps it and closes the descriptor. HELD_MAP_FD:
    // the map of processes held at loader stops (take_held_processes), kept by the guardian.
    struct StopCounts {
        size_t stops, resumes, guardian_resumes;
    };
    void watch_stops(int bss_map_fd, size_t bss_size, StopCounts offsets, int held_map_fd);
    // --defer-mb: PI_EV_KIND_MAX counters of the records the recorder holds in memory, by
    // kind, in a page shared with the guardian (EventConsumer::count_held_in), and the ring
    // buffer (its descriptor kept by the guardian): after a recorder killed outright, what
    // both held is counted lost in the trace (`<kind>_not_stored`) and named in its error.
    uint64_t* deferred_held() const { return held_; }
    void watch_ring(int ring_map_fd);
    // The database is ours (created new): removed if the recording never begins.
    void created_database();
    // The process to resume: the launched command or attached process, later a process
    // the launched command forked.
    void set_target(pid_t target);
    // The launched command's memory cgroup: removed once the target has exited.
    void set_cgroup(const std::filesystem::path& cgroup);
    // The recording has begun: the command runs (a launch) or probes go into it (--pid).
    void started();

private:
    void send(char what, int fd = -1, size_t size = 0, StopCounts at = {}, const std::string& text = {});
    pid_t guardian_ = -1;
    bool beside_ = false;  // a child of profinfer's parent, beside the launched command
    uint64_t* held_ = nullptr;
    int sock_ = -1;
};

}  // namespace profinfer
