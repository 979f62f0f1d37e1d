#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "profinfer/events.h"

#include "profinfer/recorder.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "struct_layout.h"

namespace profinfer {

// The consumer side of the ring buffer: checks every record's size, validates what the
// probes read against the struct layout, and turns each record into the store's rows
// (store::TraceTables), written in batched transactions.
class TraceWriter {
public:
    TraceWriter(store::TraceTables& tables, const GgmlLayout& layout, SchedPeers peers);
    ~TraceWriter();

    // Writes one data record. Throws profinfer::Error when a record shows that the
    // struct layout is wrong (an op out of range, a non-printable tensor name).
    void write(const void* data, size_t size);
    void commit();
    void begin();
    // A failed store (a full disk): the transaction under way goes whole, so that what is in
    // the trace is exactly what was committed.
    void rollback() noexcept;

    uint64_t count(uint32_t kind) const {
        auto it = counts_.find(kind);
        return it == counts_.end() ? 0 : it->second;
    }
    uint64_t malformed() const { return malformed_; }
    // Operator records dropped as a second end of the same node on the same thread.
    uint64_t op_duplicates() const { return op_duplicates_; }
    // Counter slots (order of the op records' deltas) that had values and read 0 every time.
    std::vector<int> counter_slots_read_zero() const;
    // Scheduler counterparts whose identity was left out (--sched-peers).
    uint64_t peers_removed() const { return peers_removed_; }
    // The node_defs rows later graphs' nodes will point at (a tensor's details in force).
    std::vector<int64_t> node_defs_in_force() const {
        std::vector<int64_t> ids;
        ids.reserve(node_def_ids_.size());
        for (const auto& [tensor, id] : node_def_ids_) ids.push_back(id);
        return ids;
    }

private:
    struct Peer {
        int64_t tid, tgid;
        std::string comm;
    };
    Peer peer(uint32_t target_tgid, uint32_t tid, uint32_t tgid, const char* comm);
    store::TraceTables& tables_;
    const GgmlLayout& layout_;
    SchedPeers peers_;
    uint64_t peers_removed_ = 0;
    std::map<uint32_t, uint64_t> counts_;
    void write_ops(const pi_op_event& e);
    void write_node(const pi_node_event& e, const std::string& name);
    void note_node(uint64_t graph_seq, uint64_t tensor);
    void flush_graph_nodes(size_t at_least);
    std::unordered_map<uint64_t, std::string> node_names_;  // tensor → its last name sent (for experts rows)
    std::unordered_map<uint64_t, int64_t> node_def_ids_;     // tensor → node_defs row in force
    std::unordered_map<uint64_t, uint64_t> node_written_in_; // tensor → graph of its last graph_nodes row
    std::vector<store::GraphNodeRow> pending_graph_nodes_;
    uint64_t malformed_ = 0;
    struct LastOp {
        uint64_t graph_seq = 0, tensor = 0, start_ns = 0;
    };
    std::unordered_map<uint32_t, LastOp> last_op_;  // per thread, its last operator record kept
    uint64_t op_duplicates_ = 0;
    // A batch's sequence runs (PI_EV_BATCH), per thread, until its call's token record.
    struct PendingBatch {
        uint64_t start_ns = 0;
        std::vector<store::BatchSeqRow> runs;  // token_id filled when the call is written
    };
    std::unordered_map<uint32_t, PendingBatch> pending_batch_;
    void note_batch(const pi_batch_event& e);
    uint64_t counter_reads_[PI_MAX_COUNTERS] = {};  // op records with a value, per slot
    bool counter_nonzero_[PI_MAX_COUNTERS] = {};
};

}  // namespace profinfer
