#include "event_consumer.h"

#include <chrono>

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "profinfer/error.h"
#include "profinfer/events.h"

namespace profinfer {

void count_record(const void* data, size_t size, uint64_t* by_kind) {
    if (size < sizeof(pi_event_header)) return;
    pi_event_header h;
    std::memcpy(&h, data, sizeof h);
    if (h.kind >= PI_EV_KIND_MAX) return;
    uint64_t count = 1;
    if (h.kind == PI_EV_OP && size >= sizeof(pi_op_event)) {
        pi_op_event ev;
        std::memcpy(&ev, data, sizeof ev);
        count = ev.n;
    }
    by_kind[h.kind] += count;
}

void EventConsumer::add_held(const void* data, size_t size, bool remove) {
    if (!held_) return;
    uint64_t by_kind[PI_EV_KIND_MAX] = {};
    count_record(data, size, by_kind);
    for (size_t k = 0; k < PI_EV_KIND_MAX; ++k)
        if (by_kind[k]) __atomic_fetch_add(&held_[k], remove ? -by_kind[k] : by_kind[k], __ATOMIC_RELAXED);
}

EventConsumer::EventConsumer(int ringbuf_fd, TraceWriter& writer, OperatorGate* gate, const ProbeAttacher& probes)
    : writer_(writer), gate_(gate), probes_(probes) {
    rb_ = ring_buffer__new(ringbuf_fd, &EventConsumer::on_event, this, nullptr);
    if (!rb_) throw_errno("creating the ring buffer consumer");
}

EventConsumer::~EventConsumer() { ring_buffer__free(rb_); }

int EventConsumer::on_event(void* self, void* data, size_t size) {
    return static_cast<EventConsumer*>(self)->handle(data, size);
}

namespace {
// A record held for --defer-mb: an 8-byte slot with its size, then its bytes padded to a
// multiple of 8 — every record starts 8-byte aligned, as the ring buffer hands them over
// (the writer reads them through their structs: UBSan found a node record at an address
// 4 mod 8 when the size took 4 bytes).
constexpr size_t kHeldHead = 8;
size_t held_stride(uint32_t n) { return kHeldHead + ((size_t(n) + 7) & ~size_t(7)); }
}  // namespace

int EventConsumer::handle(const void* data, size_t size) {
    const auto* h = static_cast<const pi_event_header*>(data);
    if (size >= sizeof(pi_event_header) && h->kind == PI_EV_LIBRARY) {
        library_changed_ = true;
        return 0;
    }
    if (defer_cap_) {
        if (deferred_.capacity() < defer_cap_) deferred_.reserve(defer_cap_ + (1 << 16));
        const uint32_t n = uint32_t(size);
        const auto* b = static_cast<const unsigned char*>(data);
        const size_t at = deferred_.size();
        deferred_.resize(at + held_stride(n));
        std::memcpy(deferred_.data() + at, &n, sizeof n);
        std::memcpy(deferred_.data() + at + kHeldHead, b, size);
        add_held(data, size, false);
    } else {
        try {
            writer_.write(data, size);
        } catch (const Error& e) {
            error_ = e.what();
            return -1;  // stops ring_buffer__consume
        }
    }
    if (gate_ && size == sizeof(pi_token_event) && h->kind == PI_EV_TOKEN) {
        auto* t = static_cast<const pi_token_event*>(data);
        if (t->n_tokens == 1) {
            // A switch the gate asked for is applied after this poll: until then the gate is
            // told the state it asked for, so that it does not count a window twice (a
            // budget that detached, then saw the rest of the poll's calls as attached and
            // traced, ended "tracing every call" with the probes out).
            const bool attached = gate_action_ ? *gate_action_ == OperatorGate::Action::Attach : probes_.ops_attached();
            auto action = gate_->on_decode(t->end_ns - t->start_ns, t->end_ns, attached, !(t->h.reserved & PI_TOKEN_OPS_OFF));
            // The opposite of a switch still pending cancels it: the probes stay as they are,
            // which is what the gate now believes (a budget that asked to detach and, its
            // credit still covering a window, to attach again in the same poll would
            // otherwise leave them attached with a second "attach" logged and no detach).
            if (action != OperatorGate::Action::None)
                gate_action_ = gate_action_ && *gate_action_ != action ? std::nullopt : std::optional(action);
        }
    }
    if (!defer_cap_ && pause_bytes_ && (since_pause_ += size) >= pause_bytes_) {
        since_pause_ = 0;
        paused_ = true;
        return -EAGAIN;
    }
    // A slice of work, then back to the recorder's loop: a ring buffer never found empty (a
    // target that records as fast as they are stored) would keep drain() from returning, and
    // with it --duration, stop signals and the commits.
    if ((++since_clock_ & 255) == 0 && std::chrono::steady_clock::now() >= slice_end_) {
        yielded_ = true;
        return -EAGAIN;
    }
    return 0;
}

void EventConsumer::flush() { store_held(std::chrono::steady_clock::time_point::max()); }

bool EventConsumer::store_held(std::chrono::steady_clock::time_point until) {
    // Stored or not (a failure stops the recording), never stored twice: what is done goes
    // out of the hold as it leaves this function, however it leaves it.
    struct Done {
        EventConsumer& c;
        size_t& at;
        bool failed = false;
        ~Done() {
            if (failed || at >= c.deferred_.size()) {
                c.deferred_.clear();
                c.held_from_ = 0;
                if (c.held_)  // stored, or counted in not_stored by the recorder itself
                    for (size_t k = 0; k < PI_EV_KIND_MAX; ++k) __atomic_store_n(&c.held_[k], 0, __ATOMIC_RELAXED);
                return;
            }
            c.held_from_ = at;
            if (c.held_from_ > c.deferred_.size() / 2) {  // the stored front given back, now and then
                c.deferred_.erase(c.deferred_.begin(), c.deferred_.begin() + std::ptrdiff_t(c.held_from_));
                c.held_from_ = 0;
            }
        }
    };
    // Small steps: on a nearly full disk what fits is kept (a 400 KB tmpfs kept 0 calls when
    // everything went in one transaction, and still 0 in 256-KB steps); a commit in the
    // write-ahead log costs no sync.
    constexpr size_t kStoreEvery = 32 << 10;
    size_t at = held_from_, at_stored = held_from_, since_stored = 0;
    Done done{*this, at_stored};
    const bool timed = until != std::chrono::steady_clock::time_point::max();
    unsigned since_clock = 0;
    try {
        while (at + kHeldHead <= deferred_.size()) {
            uint32_t n;
            std::memcpy(&n, deferred_.data() + at, sizeof n);
            writer_.write(deferred_.data() + at + kHeldHead, n);
            at += held_stride(n);
            if (pause_bytes_ && (since_pause_ += n) >= pause_bytes_) {
                since_pause_ = 0;
                between_();
            }
            const bool step = (since_stored += n) >= kStoreEvery;
            const bool out_of_time = timed && (++since_clock & 255) == 0 && std::chrono::steady_clock::now() >= until;
            if ((stored_ && step) || out_of_time) {
                since_stored = 0;
                if (stored_) stored_();
                for (size_t k = at_stored; k < at;) {  // no longer held: stored for good
                    uint32_t m;
                    std::memcpy(&m, deferred_.data() + k, sizeof m);
                    add_held(deferred_.data() + k + kHeldHead, m, true);
                    k += held_stride(m);
                }
                at_stored = at;
                if (out_of_time) return at < deferred_.size();
            }
        }
        if (stored_ && since_stored) stored_();  // the tail too: nothing counted held is stored uncommitted
        at_stored = at;
        return false;
    } catch (const Error& e) {
        // From the last step stored on: that step's transaction goes whole (a full disk may or
        // may not have rolled it back), and its records are counted, by kind, as lost.
        done.failed = true;
        writer_.rollback();
        uint64_t records = 0;
        for (size_t k = at_stored; k + kHeldHead <= deferred_.size();) {
            uint32_t n;
            std::memcpy(&n, deferred_.data() + k, sizeof n);
            if (k + kHeldHead + n <= deferred_.size()) count_record(deferred_.data() + k + kHeldHead, n, not_stored_.data());
            k += held_stride(n);
            ++records;
        }
        throw Error(std::string(e.what()) + " while storing the records held in memory; " + std::to_string(records) +
                    " records not stored (counted lost), " + std::to_string(not_stored_[PI_EV_TOKEN]) +
                    " of them llama_decode calls");
    }
}

void EventConsumer::raise_if_failed() {
    if (!error_.empty()) throw Error(error_);
}

bool EventConsumer::drain() {
    raise_if_failed();
    slice_end_ = std::chrono::steady_clock::now() + kSlice;
    for (;;) {
        yielded_ = false;
        // A negative return from the callback stops ring_buffer__consume after that record,
        // which it has consumed: a pause loses nothing.
        const int n = ring_buffer__consume(rb_);
        raise_if_failed();
        if (paused_) {
            paused_ = false;
            between_();
            continue;
        }
        if (n < 0 && n != -EINTR && !yielded_) throw Error(std::string("reading the ring buffer: ") + std::strerror(-n));
        if (defer_cap_ && held_bytes() >= defer_cap_) {
            ++deferred_flushes_;
            flush();
        }
        return yielded_;
    }
}

bool EventConsumer::take_library_changed() {
    bool changed = library_changed_;
    library_changed_ = false;
    return changed;
}

std::optional<OperatorGate::Action> EventConsumer::take_gate_action() {
    auto a = gate_action_;
    gate_action_.reset();
    return a;
}

}  // namespace profinfer
