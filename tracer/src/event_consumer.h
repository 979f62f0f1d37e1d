#pragma once
// The ring buffer's reader: every record goes to the TraceWriter; loader stops and decode
// speeds go to the operator gate (QoS or budget), if any. Its one failure — a record it
// cannot store (a full disk, a layout that reads garbage) — comes out of drain() as
// profinfer::Error; what happens to the target then is the recorder's decision.
#include <cstddef>
#include <array>
#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "probe_attacher.h"
#include "operator_gate.h"
#include "trace_writer.h"

struct ring_buffer;

namespace profinfer {

// Adds the record DATA (SIZE bytes) to BY_KIND (PI_EV_KIND_MAX counters): one per record,
// operator records one per node, as lost_events counts them.
void count_record(const void* data, size_t size, uint64_t* by_kind);

class EventConsumer {
public:
    // GATE: nullptr when the operator probes are never switched.
    EventConsumer(int ringbuf_fd, TraceWriter& writer, OperatorGate* gate, const ProbeAttacher& probes);
    ~EventConsumer();
    EventConsumer(const EventConsumer&) = delete;
    EventConsumer& operator=(const EventConsumer&) = delete;

    // Stores what the kernel side has handed over (with or without a wake-up), without
    // waiting: the recorder sleeps on the ring buffer's descriptor (ringbuf_fd) itself.
    // Returns after kSlice of work at most: true when it stopped there with records left (the
    // caller calls again before it sleeps: no wake-up comes for records already there).
    bool drain();
    static constexpr std::chrono::milliseconds kSlice{100};
    // drain() stops after every BYTES of records to call BETWEEN, then goes on (record
    // --max-db-mb: the trace is bounded within a drain, however much the buffer holds).
    void pause_every(size_t bytes, std::function<void()> between) {
        pause_bytes_ = bytes;
        between_ = std::move(between);
    }
    // --defer-mb: records are held in memory (loader stops and the gate's decode speeds are
    // still seen at once) and stored by flush(), or by drain() once BYTES are held.
    void defer_up_to(size_t bytes) { defer_cap_ = bytes; }
    // Stores every held record, in order (pausing as pause_every says), calling STORED after
    // every few MB so that what is stored stays stored if a later write fails (a full disk
    // rolls back the transaction under way). On a failure the records not stored are counted
    // (not_stored) and profinfer::Error says so, naming the trace.
    void flush();
    // Stores held records, in order, until UNTIL or none is left (committing as flush() does
    // whatever it stored): true when some are left. --consumer hold, while a CPU sits idle.
    bool store_held(std::chrono::steady_clock::time_point until);
    // Bytes of records held now (--defer-mb, --consumer hold).
    size_t held_bytes() const { return deferred_.size() - held_from_; }
    void on_stored(std::function<void()> stored) { stored_ = std::move(stored); }
    // --defer-mb: the records held, by kind (count_record), kept in HELD (PI_EV_KIND_MAX
    // counters in a page the guardian shares: a recorder killed outright leaves them there).
    void count_held_in(uint64_t* held) { held_ = held; }
    // Times drain() found BYTES held and stored them.
    int64_t deferred_flushes() const { return deferred_flushes_; }
    // Records held for --defer-mb that a failed store left out, by record kind (operator
    // records counted per node, as lost_events does).
    const std::array<uint64_t, PI_EV_KIND_MAX>& not_stored() const { return not_stored_; }
    // A loader stop was reported since the last call (the target waits, stopped).
    bool take_library_changed();
    // What the operator gate decided since the last call.
    std::optional<OperatorGate::Action> take_gate_action();

private:
    static int on_event(void* self, void* data, size_t size);
    int handle(const void* data, size_t size);
    void raise_if_failed();

    ring_buffer* rb_ = nullptr;
    TraceWriter& writer_;
    OperatorGate* gate_;
    const ProbeAttacher& probes_;
    std::string error_;
    bool library_changed_ = false;
    std::optional<OperatorGate::Action> gate_action_;
    size_t pause_bytes_ = 0, since_pause_ = 0;
    bool paused_ = false;
    bool yielded_ = false;  // drain() stopped at the end of its slice
    unsigned since_clock_ = 0;
    std::chrono::steady_clock::time_point slice_end_;
    std::function<void()> between_;
    size_t defer_cap_ = 0;
    size_t held_from_ = 0;                 // deferred_'s front already stored (store_held)
    std::vector<unsigned char> deferred_;  // records held: each an 8-byte slot with its size, then its bytes (padded to 8)
    int64_t deferred_flushes_ = 0;
    std::function<void()> stored_;
    std::array<uint64_t, PI_EV_KIND_MAX> not_stored_{};
    uint64_t* held_ = nullptr;
    void add_held(const void* data, size_t size, bool remove);
};

}  // namespace profinfer
