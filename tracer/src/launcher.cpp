#include "launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "profinfer/error.h"
#include "profinfer/subprocess.h"

namespace profinfer {

LaunchedProcess::LaunchedProcess(const std::vector<std::string>& argv) {
    if (argv.empty()) throw Error("no command to launch");
    program_ = argv[0];
    int gate[2], status[2];
    if (pipe2(gate, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) throw_errno("creating pipes");
    pid_ = fork();
    if (pid_ < 0) throw_errno("fork");
    if (pid_ == 0) {
        // No parent-death signal: if profinfer dies however it dies (kill -9, OOM), the
        // guardian resumes a loader stop of ours — only that: a command the user stopped
        // stays stopped — and keeps the process group from being orphaned (TargetGuardian).
        // The command gets the signal handling it would have had without us.
        for (int sig = 1; sig < NSIG; ++sig)
            if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        ::close(gate[1]);
        ::close(status[0]);
        close_inherited_fds_at_exec();
        // Only an explicit go runs the command: if profinfer dies before the probes are in
        // place, the pipe just closes and the command never starts untraced.
        char c = 0;
        ssize_t n;
        while ((n = ::read(gate[0], &c, 1)) < 0 && errno == EINTR) {
        }
        if (n != 1 || c != 'g') _exit(kNotReleased);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        int err = errno;
        (void)!::write(status[1], &err, sizeof err);
        _exit(127);
    }
    ::close(gate[0]);
    ::close(status[1]);
    gate_fd_ = gate[1];
    status_fd_ = status[0];
}

LaunchedProcess::~LaunchedProcess() {
    if (gate_fd_ >= 0) ::close(gate_fd_);
    if (status_fd_ >= 0) ::close(status_fd_);
    // A command that never ran sees the gate close and exits by itself; a running one
    // goes on (it is the user's, and is no longer ours to stop).
    if (pid_ > 0 && !exit_status_ && !released_) waitpid(pid_, nullptr, 0);
}

void LaunchedProcess::release() {
    const char go = 'g';
    if (::write(gate_fd_, &go, 1) != 1) throw_errno("releasing " + program_);
    ::close(gate_fd_);
    gate_fd_ = -1;
    released_ = true;
    int err = 0;
    ssize_t n;
    while ((n = ::read(status_fd_, &err, sizeof err)) < 0 && errno == EINTR) {
    }
    ::close(status_fd_);
    status_fd_ = -1;
    if (n == sizeof err) {
        wait_exit();
        throw Error("cannot run " + program_ + ": " + std::strerror(err));
    }
}

static int decode_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

std::optional<int> LaunchedProcess::poll_exit() {
    if (exit_status_) return exit_status_;
    int st;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) exit_status_ = decode_status(st);
    return exit_status_;
}

int LaunchedProcess::wait_exit() {
    if (exit_status_) return *exit_status_;
    int st;
    while (waitpid(pid_, &st, 0) < 0)
        if (errno != EINTR) throw_errno("waiting for " + program_);
    exit_status_ = decode_status(st);
    return *exit_status_;
}

void LaunchedProcess::signal(int sig) {
    if (!exit_status_) kill(pid_, sig);
}

}  // namespace profinfer
