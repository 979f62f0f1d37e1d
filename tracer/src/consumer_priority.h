#pragma once
// The recorder's own thread runs at SCHED_IDLE while it keeps up: on a machine whose
// CPUs the target's threads fill (two threads on two CPUs), every millisecond the ring
// buffer's reader and the SQLite writer take at normal priority is taken from a compute
// thread and stalls the others at the next barrier. At idle priority that work moves to
// the moments the target leaves a CPU free, and to the end of the run.
//
// A keeper thread at normal priority puts the recorder back at normal priority while
// something must not wait: the ring buffer over a sixteenth full (so nothing is lost), the
// target held at a loader stop, or a stop signal to handle; the recorder goes idle again
// itself once it has drained the buffer (settle()). The keeper sleeps until the kernel
// side wakes the ring buffer's readers (at a sixteenth full, on a loader stop, at most once
// a second while records flow) or a stop signal arrives: never on a timer, so an idle
// recording takes no CPU from the target.
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

namespace profinfer {

class ConsumerPriority {
public:
    // The share of the ring buffer waiting at which the kernel side wakes the readers
    // (TracerProgram's wakeup_bytes) and the keeper raises the recorder: the rest of the
    // buffer is the headroom for the time the raised recorder takes to get a CPU.
    static constexpr double kBoostAt = 1.0 / 16;
    enum class Mode { Idle, Normal };
    // RINGBUF_FD: the ring buffer map, SIZE its data size in bytes. URGENT: true while the
    // recorder has something to do now (called from the keeper thread).
    ConsumerPriority(Mode mode, int ringbuf_fd, size_t size, std::function<bool()> urgent);
    ~ConsumerPriority();
    ConsumerPriority(const ConsumerPriority&) = delete;
    ConsumerPriority& operator=(const ConsumerPriority&) = delete;

    // Normal priority from now on (the end of the run: catch up at full speed).
    void stay_normal();
    // Called by the recorder's thread after each drain: back to idle priority when the
    // buffer is nearly empty and nothing is urgent.
    void settle();
    // Times the keeper had to raise the recorder's priority.
    uint64_t boosts() const { return boosts_.load(); }
    // Bytes waiting in the ring buffer now.
    uint64_t backlog() const;

private:
    void keep();
    bool set_policy(bool idle) const;  // of the recorder's thread; false if refused
    void go_idle();                    // from the recorder's thread

    const pid_t tid_;
    const size_t size_;
    std::function<bool()> urgent_;
    void* consumer_page_ = nullptr;
    void* producer_page_ = nullptr;
    size_t page_ = 0;
    std::atomic<bool> idle_{false};
    std::atomic<uint64_t> boosts_{0};
    std::atomic<bool> for_good_{false};  // stay_normal() was called
    int ringbuf_fd_ = -1;
    int stop_fd_ = -1;       // an eventfd that ends the keeper
    std::thread keeper_;
};

}  // namespace profinfer
