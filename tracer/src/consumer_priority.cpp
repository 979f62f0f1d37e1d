#include "consumer_priority.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profinfer/error.h"

namespace profinfer {

namespace {
constexpr double kBoostAbove = 0.125;  // of the ring buffer
constexpr double kIdleBelow = 0.02;
constexpr auto kPeriod = std::chrono::milliseconds(20);
}  // namespace

ConsumerPriority::ConsumerPriority(Mode mode, int ringbuf_fd, size_t size, std::function<bool()> urgent)
    : tid_(gettid()), size_(size), urgent_(std::move(urgent)) {
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
    // The keeper lowers the recorder's thread itself (only it touches the policy until it
    // is joined); it was created at normal priority, which it keeps.
    keeper_ = std::thread([this] { keep(); });
}

ConsumerPriority::~ConsumerPriority() {
    stay_normal();
    if (consumer_page_) munmap(consumer_page_, page_);
    if (producer_page_) munmap(producer_page_, page_);
}

void ConsumerPriority::stay_normal() {
    if (keeper_.joinable()) {
        {
            std::lock_guard lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        keeper_.join();
    }
    if (idle_) set_idle(false);
}

uint64_t ConsumerPriority::backlog() const {
    if (!consumer_page_) return 0;
    const uint64_t cons = __atomic_load_n(static_cast<const uint64_t*>(consumer_page_), __ATOMIC_ACQUIRE);
    const uint64_t prod = __atomic_load_n(static_cast<const uint64_t*>(producer_page_), __ATOMIC_ACQUIRE);
    return prod > cons ? prod - cons : 0;
}

void ConsumerPriority::set_idle(bool idle) {
    sched_param sp{};
    // Per thread: the target (a child forked earlier) and the keeper keep their own policy.
    if (sched_setscheduler(tid_, idle ? SCHED_IDLE : SCHED_OTHER, &sp) == 0) idle_ = idle;
}

void ConsumerPriority::keep() {
    set_idle(true);
    std::unique_lock lock(m_);
    while (!cv_.wait_for(lock, kPeriod, [this] { return stop_; })) {
        const double fill = double(backlog()) / double(size_);
        const bool urgent = fill > kBoostAbove || urgent_();
        if (idle_ && urgent) {
            set_idle(false);
            if (!idle_) ++boosts_;
        } else if (!idle_ && !urgent && fill < kIdleBelow) {
            set_idle(true);
        }
    }
}

}  // namespace profinfer
