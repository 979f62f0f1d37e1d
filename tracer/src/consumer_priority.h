#pragma once
// The recorder's own thread runs at SCHED_IDLE while it keeps up: on a machine whose
// CPUs the target's threads fill (two threads on two CPUs), every millisecond the ring
// buffer's reader and the SQLite writer take at normal priority is taken from a compute
// thread and stalls the others at the next barrier. At idle priority that work moves to
// the moments the target leaves a CPU free, and to the end of the run.
//
// A keeper thread at normal priority (it wakes 50 times a second and reads two
// counters) puts the recorder back at normal priority while something must not wait:
// the ring buffer over an eighth full (so nothing is lost), the target held at a loader
// stop, or a stop signal to handle; idle again once the buffer is nearly empty.
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace profinfer {

class ConsumerPriority {
public:
    enum class Mode { Idle, Normal };
    // RINGBUF_FD: the ring buffer map, SIZE its data size in bytes. URGENT: true while the
    // recorder has something to do now (called from the keeper thread).
    ConsumerPriority(Mode mode, int ringbuf_fd, size_t size, std::function<bool()> urgent);
    ~ConsumerPriority();
    ConsumerPriority(const ConsumerPriority&) = delete;
    ConsumerPriority& operator=(const ConsumerPriority&) = delete;

    // Normal priority from now on (the end of the run: catch up at full speed).
    void stay_normal();
    // Times the keeper had to raise the recorder's priority.
    uint64_t boosts() const { return boosts_.load(); }
    // Bytes waiting in the ring buffer now.
    uint64_t backlog() const;

private:
    void keep();
    void set_idle(bool idle);

    const pid_t tid_;
    const size_t size_;
    std::function<bool()> urgent_;
    void* consumer_page_ = nullptr;
    void* producer_page_ = nullptr;
    size_t page_ = 0;
    bool idle_ = false;
    std::atomic<uint64_t> boosts_{0};
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread keeper_;
};

}  // namespace profinfer
