#include "target_guardian.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "profinfer/error.h"

namespace profinfer {

namespace {

int pidfd_open(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int pidfd, int sig) { return int(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

// What the recorder would have written had it lived. Only a run still marked running
// is touched: the recorder may have finished its own bookkeeping before it died.
void mark_incomplete(const char* db_path) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_exec(db,
                     "BEGIN;"
                     "INSERT OR REPLACE INTO meta(key, value) SELECT 'error', 'the recorder died during the recording "
                     "(killed or crashed); the target was resumed untraced' WHERE (SELECT value FROM meta WHERE "
                     "key = 'status') = 'running';"
                     "UPDATE meta SET value = 'incomplete' WHERE key = 'status' AND value = 'running';"
                     "COMMIT;",
                     nullptr, nullptr, nullptr);
    }
    sqlite3_close(db);
}

[[noreturn]] void guard(int dismiss_fd, int recorder_fd, int target_fd, const std::string& db) {
    // The terminal's ^C reaches the whole process group: the guardian stays for the end.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE}) signal(sig, SIG_IGN);
    char c = 0;
    ssize_t n;
    while ((n = read(dismiss_fd, &c, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1 && c == 'd') _exit(0);
    // The recorder is dying: its files (the BPF links) are closed before it is reported gone.
    pollfd p{recorder_fd, POLLIN, 0};
    while (poll(&p, 1, 10000) < 0 && errno == EINTR) {
    }
    pidfd_send_signal(target_fd, SIGCONT);
    mark_incomplete(db.c_str());
    _exit(0);
}

}  // namespace

TargetGuardian::TargetGuardian(pid_t target, const std::filesystem::path& db) {
    int target_fd = pidfd_open(target);
    if (target_fd < 0) throw_errno("watching process " + std::to_string(target));
    int recorder_fd = pidfd_open(getpid());
    if (recorder_fd < 0) {
        int err = errno;
        ::close(target_fd);
        errno = err;
        throw_errno("watching profinfer itself");
    }
    int dismiss[2];
    if (pipe(dismiss) != 0) throw_errno("creating a pipe");
    const std::string db_path = std::filesystem::absolute(db).string();
    guardian_ = fork();
    if (guardian_ < 0) throw_errno("starting the guardian process");
    if (guardian_ == 0) {
        // Keep nothing of profinfer's: a BPF link held here would keep probes alive.
        int keep[3] = {fcntl(dismiss[0], F_DUPFD, 64), fcntl(recorder_fd, F_DUPFD, 64), fcntl(target_fd, F_DUPFD, 64)};
        for (int i = 0; i < 3; ++i) dup2(keep[i], 3 + i);
        syscall(SYS_close_range, 6, ~0U, 0);
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
        if (null > 5) close(null);
        guard(3, 4, 5, db_path);
    }
    ::close(dismiss[0]);
    ::close(recorder_fd);
    ::close(target_fd);
    dismiss_fd_ = dismiss[1];
}

TargetGuardian::~TargetGuardian() {
    if (dismiss_fd_ >= 0) {
        (void)!::write(dismiss_fd_, "d", 1);
        ::close(dismiss_fd_);
    }
    if (guardian_ > 0) waitpid(guardian_, nullptr, 0);
}

}  // namespace profinfer
