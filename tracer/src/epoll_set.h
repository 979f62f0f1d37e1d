#pragma once
// A set of file descriptors to sleep on (epoll): the recorder's threads wake when one of
// them has something — a ring buffer notification, a stop signal, a process that ended —
// and never on a timer.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

#include "profinfer/error.h"

namespace profinfer {

class EpollSet {
public:
    EpollSet() : fd_(epoll_create1(EPOLL_CLOEXEC)) {
        if (fd_ < 0) throw_errno("epoll_create1");
    }
    ~EpollSet() { ::close(fd_); }
    EpollSet(const EpollSet&) = delete;
    EpollSet& operator=(const EpollSet&) = delete;

    // EVENTS: EPOLLIN, with EPOLLET for a descriptor whose readiness is level but whose
    // wake-ups are what counts (a ring buffer another thread drains).
    void add(int fd, uint32_t events = EPOLLIN) {
        epoll_event e{};
        e.events = events;
        e.data.fd = fd;
        if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &e) != 0 && errno != EEXIST) throw_errno("epoll_ctl");
    }
    void remove(int fd) { epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr); }
    // Sleeps until one is ready (TIMEOUT_MS -1: no timeout); false on timeout or a signal.
    bool wait(int timeout_ms = -1) {
        epoll_event e[8];
        return epoll_wait(fd_, e, 8, timeout_ms) > 0;
    }

private:
    int fd_;
};

}  // namespace profinfer
