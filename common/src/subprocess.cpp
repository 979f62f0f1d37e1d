#include "profinfer/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "profinfer/error.h"

extern char** environ;

namespace profinfer {

namespace {

struct Pipe {
    int fd[2] = {-1, -1};
    Pipe() {
        if (pipe2(fd, O_CLOEXEC) != 0) throw_errno("creating a pipe");
    }
    ~Pipe() { close_both(); }
    void close_end(int i) {
        if (fd[i] >= 0) ::close(fd[i]), fd[i] = -1;
    }
    void close_both() { close_end(0), close_end(1); }
};

// CHILD_FDS[i]: the descriptor that becomes the child's fd i (-1: /dev/null).
pid_t spawn(const std::vector<std::string>& argv, const int child_fds[3]) {
    if (argv.empty()) throw Error("no program to run");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; i < 3; ++i) {
        if (child_fds[i] >= 0)
            posix_spawn_file_actions_adddup2(&fa, child_fds[i], i);
        else
            posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
    }
    // Nothing but 0-2 reaches the child (close_inherited_fds_at_exec).
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    // The child starts with default signal handling whatever we ignore or block.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw Error("cannot run " + argv[0] + ": " + std::strerror(rc));
    return pid;
}

int wait_status(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace

void close_inherited_fds_at_exec() noexcept {
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
    // Marked, not closed: the caller may still need a descriptor until exec (a gate pipe).
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
    // Linux before 5.11 (a 5.10 board) has no CLOSE_RANGE_CLOEXEC: one fcntl per possible fd.
    struct rlimit rl{};
    const long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? long(rl.rlim_cur) : 65536;
    for (long fd = 3; fd < top && fd < (1L << 20); ++fd) {
        const int flags = fcntl(int(fd), F_GETFD);
        if (flags >= 0 && !(flags & FD_CLOEXEC)) fcntl(int(fd), F_SETFD, flags | FD_CLOEXEC);
    }
}

void check_command(const std::string& program) {
    namespace fs = std::filesystem;
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

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input) {
    Pipe in, out, err;
    const int fds[3] = {in.fd[0], out.fd[1], err.fd[1]};
    pid_t pid = spawn(argv, fds);
    in.close_end(0), out.close_end(1), err.close_end(1);
    // A writer that outlives its reader must not kill us with SIGPIPE.
    struct sigaction ign{}, old{};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old);
    ProcessResult r;
    size_t written = 0;
    if (input.empty()) in.close_end(1);
    char buf[65536];
    while (out.fd[0] >= 0 || err.fd[0] >= 0) {
        pollfd p[3];
        int n = 0;
        for (int fd : {out.fd[0], err.fd[0], in.fd[1]})
            if (fd >= 0) p[n++] = {fd, short(fd == in.fd[1] ? POLLOUT : POLLIN), 0};
        if (poll(p, n, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < n; ++i) {
            if (!p[i].revents) continue;
            if (p[i].fd == in.fd[1]) {
                ssize_t w = ::write(in.fd[1], input.data() + written, input.size() - written);
                if (w > 0) written += size_t(w);
                if (w < 0 && errno != EINTR && errno != EAGAIN) written = input.size();
                if (written == input.size()) in.close_end(1);
                continue;
            }
            ssize_t k = ::read(p[i].fd, buf, sizeof buf);
            if (k > 0) {
                (p[i].fd == out.fd[0] ? r.out : r.err).append(buf, size_t(k));
            } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
                out.fd[0] == p[i].fd ? out.close_end(0) : err.close_end(0);
            }
        }
    }
    in.close_end(1);
    sigaction(SIGPIPE, &old, nullptr);
    r.status = wait_status(pid);
    return r;
}

std::string last_output_line(const std::vector<std::string>& argv) {
    ProcessResult r = run_process(argv);
    std::string out = r.out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (auto nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
    if (r.status != 0 || out.empty()) {
        std::string cmd;
        for (size_t i = 0; i < argv.size() && i < 3; ++i) cmd += (i ? " " : "") + argv[i];
        std::string err = r.err;
        while (!err.empty() && err.back() == '\n') err.pop_back();
        if (auto nl = err.rfind('\n'); nl != std::string::npos) err = err.substr(nl + 1);
        throw Error("'" + cmd + "' failed (exit status " + std::to_string(r.status) + ")" + (err.empty() ? "" : ": " + err));
    }
    return out;
}

PipedProcess::PipedProcess(const std::vector<std::string>& argv) : program_(argv.empty() ? "" : argv[0]) {
    Pipe in;
    const int fds[3] = {in.fd[0], -1, -1};
    pid_ = spawn(argv, fds);
    in.close_end(0);
    in_ = fdopen(in.fd[1], "w");
    if (!in_) throw_errno("opening a pipe to " + program_);
    in.fd[1] = -1;
}

int PipedProcess::wait() {
    if (in_) fclose(in_), in_ = nullptr;
    if (pid_ < 0) return -1;
    int st = wait_status(pid_);
    pid_ = -1;
    return st;
}

PipedProcess::~PipedProcess() { wait(); }

}  // namespace profinfer
