#include "consumer_priority.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "epoll_set.h"
#include "profinfer/error.h"
#include "profinfer/stop_signals.h"

namespace profinfer {

namespace {
constexpr double kIdleBelow = 0.02;
}  // namespace

ConsumerPriority::ConsumerPriority(Mode mode, int ringbuf_fd, size_t size, std::function<bool()> urgent)
    : tid_(gettid()), size_(size), urgent_(std::move(urgent)), ringbuf_fd_(ringbuf_fd) {
    if (mode == Mode::Normal) return;
    // The ring buffer's first page holds the consumer position, the second the producer's
    // (what libbpf maps to read it): read-only here.
    page_ = size_t(sysconf(_SC_PAGESIZE));
    consumer_page_ = mmap(nullptr, page_, PROT_READ, MAP_SHARED, ringbuf_fd, 0);
    producer_page_ = mmap(nullptr, page_, PROT_READ, MAP_SHARED, ringbuf_fd, page_);
    if (consumer_page_ == MAP_FAILED || producer_page_ == MAP_FAILED) {
        if (consumer_page_ != MAP_FAILED) munmap(consumer_page_, page_);
        if (producer_page_ != MAP_FAILED) munmap(producer_page_, page_);
        consumer_page_ = producer_page_ = nullptr;
        return;  // stays at normal priority: safe, only dearer for the target
    }
    stop_fd_ = eventfd(0, EFD_CLOEXEC);
    if (stop_fd_ < 0) throw_errno("eventfd");
    // The keeper first: a thread inherits its creator's policy, and the keeper must keep
    // normal priority (created after the recorder's thread went idle, it was idle too, and
    // woke 1.3 s late with the buffer full). Then the recorder's thread goes idle.
    keeper_ = std::thread([this] { keep(); });
    go_idle();
}

ConsumerPriority::~ConsumerPriority() {
    stay_normal();
    if (consumer_page_) munmap(consumer_page_, page_);
    if (producer_page_) munmap(producer_page_, page_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
}

void ConsumerPriority::stay_normal() {
    for_good_ = true;
    if (keeper_.joinable()) {
        const uint64_t one = 1;
        if (::write(stop_fd_, &one, sizeof one) != sizeof one) throw_errno("stopping the priority keeper");
        keeper_.join();
    }
    if (idle_.exchange(false)) set_policy(false);
}

// No lock between the two threads: the recorder's thread takes itself to idle priority,
// and a lock it held there would wait for a free CPU with the keeper blocked behind it
// (measured: the keeper stalled 1.6 s, the buffer full, with a spinning process on every
// CPU). The keeper flips idle_ to false before it raises the priority; the recorder's
// thread reads it again after lowering its own, and raises it back if the keeper came in
// between: whichever order the two run in, idle_ false means normal priority.
void ConsumerPriority::settle() {
    if (!keeper_.joinable() || idle_ || for_good_) return;
    if (double(backlog()) / double(size_) >= kIdleBelow || urgent_()) return;
    go_idle();
}

void ConsumerPriority::go_idle() {
    idle_ = true;
    if (!set_policy(true)) idle_ = false;
    if (!idle_) set_policy(false);
}

uint64_t ConsumerPriority::backlog() const {
    if (!consumer_page_) return 0;
    const uint64_t cons = __atomic_load_n(static_cast<const uint64_t*>(consumer_page_), __ATOMIC_ACQUIRE);
    const uint64_t prod = __atomic_load_n(static_cast<const uint64_t*>(producer_page_), __ATOMIC_ACQUIRE);
    return prod > cons ? prod - cons : 0;
}

bool ConsumerPriority::set_policy(bool idle) const {
    sched_param sp{};
    // Per thread: the target (a child forked earlier) and the keeper keep their own policy.
    return sched_setscheduler(tid_, idle ? SCHED_IDLE : SCHED_OTHER, &sp) == 0;
}

void ConsumerPriority::keep() {
    // Edge-triggered: each wake-up of the ring buffer's readers once, however long the
    // recorder's thread takes to drain it; each stop signal once.
    EpollSet wake;
    wake.add(ringbuf_fd_, EPOLLIN | EPOLLET);
    if (stop_signals::fd() >= 0) wake.add(stop_signals::fd(), EPOLLIN | EPOLLET);
    wake.add(stop_fd_);
    for (;;) {
        wake.wait();
        if (for_good_) return;
        const bool urgent = double(backlog()) >= kBoostAt * double(size_) || urgent_();
        bool was_idle = true;
        if (urgent && idle_.compare_exchange_strong(was_idle, false) && set_policy(false)) ++boosts_;
    }
}

}  // namespace profinfer
