#pragma once
#include <sys/types.h>

#include <filesystem>

namespace profinfer {

// A small helper process that outlives profinfer. If profinfer dies without running
// its own cleanup (kill -9, the OOM killer, a crash), the guardian waits until the
// dead process is fully gone — and with it every probe, whose links die with their
// file descriptors — then resumes the target (it may sit stopped at a loader stop of
// ours) and marks the trace database incomplete. Dismissed on every orderly exit,
// where the recorder does both itself.
class TargetGuardian {
public:
    TargetGuardian(pid_t target, const std::filesystem::path& db);
    ~TargetGuardian();  // dismisses the guardian
    TargetGuardian(const TargetGuardian&) = delete;
    TargetGuardian& operator=(const TargetGuardian&) = delete;

private:
    pid_t guardian_ = -1;
    int dismiss_fd_ = -1;
};

}  // namespace profinfer
