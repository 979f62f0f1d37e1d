#pragma once
// The ring buffer's reader: every record goes to the TraceWriter; loader stops and decode
// speeds go to the operator gate (QoS or budget), if any. Its one failure — a record it
// cannot store (a full disk, a layout that reads garbage) — comes out of drain() as
// profinfer::Error; what happens to the target then is the recorder's decision.
#include <cstddef>
#include <functional>
#include <optional>

#include "probe_attacher.h"
#include "operator_gate.h"
#include "trace_writer.h"

struct ring_buffer;

namespace profinfer {

class EventConsumer {
public:
    // GATE: nullptr when the operator probes are never switched.
    EventConsumer(int ringbuf_fd, TraceWriter& writer, OperatorGate* gate, const ProbeAttacher& probes);
    ~EventConsumer();
    EventConsumer(const EventConsumer&) = delete;
    EventConsumer& operator=(const EventConsumer&) = delete;

    // Stores what the kernel side has handed over (with or without a wake-up), without
    // waiting: the recorder sleeps on the ring buffer's descriptor (ringbuf_fd) itself.
    void drain();
    // drain() stops after every BYTES of records to call BETWEEN, then goes on (record
    // --max-db-mb: the trace is bounded within a drain, however much the buffer holds).
    void pause_every(size_t bytes, std::function<void()> between) {
        pause_bytes_ = bytes;
        between_ = std::move(between);
    }
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
    std::function<void()> between_;
};

}  // namespace profinfer
