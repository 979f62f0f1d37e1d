#include "target_guardian.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "event_consumer.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/trace_tables.h"

namespace profinfer {

namespace {

int pidfd_open(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int pidfd, int sig) { return int(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

// The state letter of /proc/PID/stat ('T': stopped, 't': stopped by a tracer).
char state_of(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), {});
    auto close = s.rfind(')');
    return close != std::string::npos && close + 2 < s.size() ? s[close + 2] : 0;
}

struct Message {
    // 'n' the database is ours, 't' the target (its pidfd; the first is the launched command's
    // or the attached process's), 'c' the cgroup (text), 'b' the
    // .bss (with a descriptor), 'h' the map of held processes (its descriptor), 'r' the ring
    // buffer (its descriptor, --defer-mb), 's' started, 'd' dismissed
    char what;
    size_t size;
    TargetGuardian::StopCounts at;
    char text[256];
};

// The loader-stop counts in the BPF object's .bss, once the recorder sent it.
struct Stops {
    unsigned char* base = nullptr;
    int held_fd = -1;
    TargetGuardian::StopCounts at{};
    volatile uint64_t& at_offset(size_t o) const { return *reinterpret_cast<volatile uint64_t*>(base + o); }
    bool held() const {
        return base && __atomic_load_n(&at_offset(at.stops), __ATOMIC_ACQUIRE) != at_offset(at.resumes);
    }
    // A loader stop of ours holds the target: resume it and say so.
    bool release(int target_fd, bool by_guardian) const {
        if (!base) return false;
        const uint64_t stops = __atomic_load_n(&at_offset(at.stops), __ATOMIC_ACQUIRE);
        if (stops == at_offset(at.resumes)) return false;
        __atomic_store_n(&at_offset(at.resumes), stops, __ATOMIC_RELEASE);
        if (by_guardian) __atomic_fetch_add(&at_offset(at.guardian_resumes), 1, __ATOMIC_RELAXED);
        if (held_fd >= 0)
            for (const pid_t f : take_held_processes(held_fd)) kill(f, SIGCONT);
        pidfd_send_signal(target_fd, SIGCONT);
        return true;
    }
};

// What a recorder killed outright held for --defer-mb (RING_FD: the ring buffer, only then):
// its count of records held in memory, and the records it had not yet read from the ring
// buffer, by kind; the llama_decode calls of each in WHERE.
std::vector<std::pair<std::string, int64_t>> lost_with_recorder(const uint64_t* held, int ring_fd, std::string& where) {
    if (ring_fd < 0) return {};
    uint64_t by_kind[PI_EV_KIND_MAX] = {};
    for (size_t k = 0; k < PI_EV_KIND_MAX; ++k) by_kind[k] = __atomic_load_n(&held[k], __ATOMIC_RELAXED);
    const uint64_t calls_held = by_kind[PI_EV_TOKEN];
    {
        auto count = [](void* ctx, void* data, size_t size) {
            count_record(data, size, static_cast<uint64_t*>(ctx));
            return 0;
        };
        if (ring_buffer* rb = ring_buffer__new(ring_fd, count, by_kind, nullptr)) {
            ring_buffer__consume(rb);
            ring_buffer__free(rb);
        }
    }
    where = std::to_string(calls_held) + " held in memory, " + std::to_string(by_kind[PI_EV_TOKEN] - calls_held) +
            " not yet read from the ring buffer";
    std::vector<std::pair<std::string, int64_t>> lost{{"token_not_stored", int64_t(by_kind[PI_EV_TOKEN])}};
    for (size_t k = 1; k < PI_EV_KIND_MAX; ++k)
        if (by_kind[k] && k != PI_EV_LIBRARY && k != PI_EV_TOKEN) lost.emplace_back(std::string(store::kRecordKinds[k]) + "_not_stored", int64_t(by_kind[k]));
    return lost;
}

// Waits until the process of pidfd FD has ended.
void wait_for_end(int fd) {
    pollfd t{fd, POLLIN, 0};
    while (poll(&t, 1, -1) < 0 && errno == EINTR) {
    }
}

// BESIDE: the guardian is the launched command's parent's sibling, in its process group, which
// it keeps from being orphaned for as long as the command lives (TargetGuardian).
[[noreturn]] void guard(int sock, int recorder_fd, pid_t recorder, const std::string& db, const uint64_t* held,
                        bool beside) {
    // The terminal's ^C and ^Z reach the whole process group: the guardian stays for the end.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE}) signal(sig, SIG_IGN);
    Stops stops;
    int target_fd = -1, ring_fd = -1, first_target_fd = -1;
    std::string cgroup;
    bool ours = false, started = false;
    int stopped_polls = 0;  // consecutive polls that saw profinfer stopped
    bool recorder_stopped = false;
    for (;;) {
        pollfd p[2] = {{sock, POLLIN, 0}, {recorder_fd, POLLIN, 0}};
        // While profinfer is stopped, a hundred looks a second: each loader stop of the
        // target then waits ~10 ms, not the 1-2 s of five looks a second after two (a target
        // that dlopens every 50 ms ran 6 rounds in 9 s instead of ~150). While a loader stop
        // of ours holds the target, five; otherwise one a second at the stop counts and at
        // profinfer's state (a loader stop whose record was lost wakes no one else), and none
        // before they are known.
        if (poll(p, 2, !stops.base ? -1 : recorder_stopped ? 10 : stops.held() ? 200 : 1000) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[0].revents & POLLIN) {
            Message m{};
            char control[CMSG_SPACE(sizeof(int))] = {};
            iovec io{&m, sizeof m};
            msghdr mh{};
            mh.msg_iov = &io;
            mh.msg_iovlen = 1;
            mh.msg_control = control;
            mh.msg_controllen = sizeof control;
            ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;  // the recorder's end closed: it is dying
            if (m.what == 'd') {
                if (beside && first_target_fd >= 0) wait_for_end(first_target_fd);
                _exit(0);
            }
            if (m.what == 's') started = true;
            if (m.what == 'n') ours = true;
            if (m.what == 'c') cgroup.assign(m.text, strnlen(m.text, sizeof m.text));
            cmsghdr* c = CMSG_FIRSTHDR(&mh);
            if (m.what == 't' && c && c->cmsg_type == SCM_RIGHTS) {
                if (target_fd >= 0 && target_fd != first_target_fd) ::close(target_fd);
                std::memcpy(&target_fd, CMSG_DATA(c), sizeof target_fd);
                if (first_target_fd < 0) first_target_fd = target_fd;
            }
            if (m.what == 'b' && c && c->cmsg_type == SCM_RIGHTS) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
                void* base = mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                ::close(fd);  // the mapping keeps the map, and nothing else, alive
                if (base != MAP_FAILED) stops.base = static_cast<unsigned char*>(base), stops.at = m.at;
            }
            if (m.what == 'r' && c && c->cmsg_type == SCM_RIGHTS) {
                if (ring_fd >= 0) ::close(ring_fd);
                std::memcpy(&ring_fd, CMSG_DATA(c), sizeof ring_fd);
            }
            if (m.what == 'h' && c && c->cmsg_type == SCM_RIGHTS) {
                if (stops.held_fd >= 0) ::close(stops.held_fd);
                std::memcpy(&stops.held_fd, CMSG_DATA(c), sizeof stops.held_fd);  // a map: keeps no probe alive
            }
        } else if (p[0].revents & (POLLHUP | POLLERR)) {
            break;
        }
        if (p[1].revents & POLLIN) break;
        // profinfer stopped (^Z of `record --pid`, SIGSTOP, a debugger) must not freeze the
        // target at a loader stop for as long: seen stopped twice (not a passing stop), every
        // loader stop goes on at once until profinfer does.
        const char s = stops.base ? state_of(recorder) : 0;
        recorder_stopped = s == 'T' || s == 't';
        stopped_polls = recorder_stopped ? stopped_polls + 1 : 0;
        if (stopped_polls >= 2) stops.release(target_fd, true);
    }
    // The recorder is dying: its files (the BPF links) are closed before it is reported gone.
    pollfd p{recorder_fd, POLLIN, 0};
    while (poll(&p, 1, 10000) < 0 && errno == EINTR) {
    }
    stops.release(target_fd, true);
    if (started) {
        std::string where;
        const auto lost = lost_with_recorder(held, ring_fd, where);
        store::mark_recorder_died(db, lost, where);
    } else if (ours) {  // nothing ran traced and nothing was recorded: no database to block the retry
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((db + suffix).c_str());
    }
    if (!cgroup.empty() && target_fd >= 0) {  // removable once the command has exited
        wait_for_end(target_fd);
        for (int i = 0; i < 100 && ::rmdir(cgroup.c_str()) != 0 && errno == EBUSY; ++i) usleep(20000);
    }
    if (beside && first_target_fd >= 0) wait_for_end(first_target_fd);
    _exit(0);
}

}  // namespace

// Would profinfer's end orphan its process group — the launched command's? Where profinfer's
// parent is in another group of the same session (a job-control shell ran it as a job): the
// kernel then sends SIGHUP and SIGCONT to a group with a stopped member.
bool end_would_orphan_the_group() {
    const pid_t parent = getppid();
    const pid_t group = getpgid(parent), session = getsid(parent);
    return parent > 1 && group >= 0 && session >= 0 && group != getpgrp() && session == getsid(0);
}

TargetGuardian::TargetGuardian(const std::filesystem::path& db, bool launching) {
    int recorder_fd = pidfd_open(getpid());
    int sv[2] = {-1, -1};
    if (recorder_fd < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        int err = errno;
        if (recorder_fd >= 0) ::close(recorder_fd);
        errno = err;
        throw_errno("starting the guardian process");
    }
    const std::string db_path = std::filesystem::absolute(db).string();
    void* page = mmap(nullptr, sizeof(uint64_t) * PI_EV_KIND_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) throw_errno("starting the guardian process");
    held_ = static_cast<uint64_t*>(page);
    const pid_t recorder = getpid();
    // Beside a launched command whose group profinfer's end would orphan, the guardian is a
    // child of profinfer's parent (CLONE_PARENT; that parent reaps it, as a shell reaps every
    // child) in profinfer's group: the group keeps a member whose parent is outside it, so it
    // is never orphaned while the command lives — a command the user stopped stays stopped
    // when profinfer dies or ends, and one held at a loader stop of ours is not hung up before
    // the guardian resumes it. A raw clone is a fork without glibc's bookkeeping for other
    // threads: profinfer has none yet (the guardian is started first).
    beside_ = launching && end_would_orphan_the_group();
    guardian_ = beside_ ? pid_t(syscall(SYS_clone, CLONE_PARENT | SIGCHLD, nullptr, nullptr, nullptr, nullptr)) : fork();
    if (guardian_ < 0) throw_errno("starting the guardian process");
    if (guardian_ == 0) {
        // Keep nothing of profinfer's: a BPF link held here would keep probes alive.
        int keep[2] = {fcntl(sv[1], F_DUPFD, 64), fcntl(recorder_fd, F_DUPFD, 64)};
        for (int i = 0; i < 2; ++i) dup2(keep[i], 3 + i);
        syscall(SYS_close_range, 5, ~0U, 0);
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
        if (null > 4) close(null);
        guard(3, 4, recorder, db_path, held_, beside_);
    }
    ::close(sv[1]);
    ::close(recorder_fd);
    sock_ = sv[0];
}

void TargetGuardian::send(char what, int fd, size_t size, StopCounts at, const std::string& text) {
    Message m{what, size, at, {}};
    if (text.size() >= sizeof m.text) throw Error("telling the guardian process: " + text + " is too long");
    std::memcpy(m.text, text.data(), text.size());
    char control[CMSG_SPACE(sizeof(int))] = {};
    iovec io{&m, sizeof m};
    msghdr mh{};
    mh.msg_iov = &io;
    mh.msg_iovlen = 1;
    if (fd >= 0) {
        mh.msg_control = control;
        mh.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    while (sendmsg(sock_, &mh, MSG_NOSIGNAL) < 0)
        if (errno != EINTR) throw_errno("telling the guardian process");
}

void TargetGuardian::watch_stops(int bss_map_fd, size_t bss_size, StopCounts offsets, int held_map_fd) {
    send('h', held_map_fd);  // first: the guardian resumes from the counts only once it can take the held
    send('b', bss_map_fd, bss_size, offsets);
}

std::vector<pid_t> take_held_processes(int held_map_fd) {
    // Keys first, then the deletes: a walk that deleted as it went would restart at the
    // first key each time the one it stands on is gone. A key deleted by the other taker
    // meanwhile restarts the walk too: bounded, the rest is left for the next look.
    std::vector<uint32_t> keys;
    uint32_t key = 0;
    for (int n = 0; n < 4096; ++n) {
        if (bpf_map_get_next_key(held_map_fd, keys.empty() ? nullptr : &keys.back(), &key) != 0) break;
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) break;  // restarted
        keys.push_back(key);
    }
    std::vector<pid_t> taken;
    for (const uint32_t k : keys)
        if (bpf_map_delete_elem(held_map_fd, &k) == 0) taken.push_back(pid_t(k));
    return taken;
}

void TargetGuardian::started() { send('s'); }
void TargetGuardian::watch_ring(int ring_map_fd) { send('r', ring_map_fd); }
void TargetGuardian::created_database() { send('n'); }
void TargetGuardian::set_cgroup(const std::filesystem::path& cgroup) { send('c', -1, 0, {}, cgroup.string()); }

void TargetGuardian::set_target(pid_t target) {
    const int fd = int(syscall(SYS_pidfd_open, target, 0));
    if (fd < 0) throw_errno("watching process " + std::to_string(target));
    try {
        send('t', fd);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
}

TargetGuardian::~TargetGuardian() {
    if (sock_ >= 0) {
        try {
            send('d');
        } catch (...) {
        }
        ::close(sock_);
    }
    // Beside the command, the guardian stays for as long as the command lives, reaped by
    // profinfer's parent: nothing to wait for here.
    if (guardian_ > 0 && !beside_) waitpid(guardian_, nullptr, 0);
    if (held_) munmap(held_, sizeof(uint64_t) * PI_EV_KIND_MAX);
}

}  // namespace profinfer
