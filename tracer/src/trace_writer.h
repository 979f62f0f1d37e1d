#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "profinfer/events.h"

#include "profinfer/recorder.h"
#include "profinfer/store.h"
#include "struct_layout.h"

namespace profinfer {

// The consumer side of the ring buffer: checks every record's size, validates what the
// probes read against the struct layout, and writes rows in batched transactions.
class TraceWriter {
public:
    TraceWriter(store::Database& db, const GgmlLayout& layout, SchedPeers peers);
    ~TraceWriter();

    // Writes one data record. Throws profinfer::Error when a record shows that the
    // struct layout is wrong (an op out of range, a non-printable tensor name).
    void write(const void* data, size_t size);
    void commit();
    void begin();

    uint64_t count(uint32_t kind) const {
        auto it = counts_.find(kind);
        return it == counts_.end() ? 0 : it->second;
    }
    uint64_t malformed() const { return malformed_; }
    // Rows written to `nodes`: one per node and graph, whether its details came with this
    // graph or were repeated from an earlier one.
    uint64_t node_rows() const { return node_rows_; }
    // Scheduler counterparts whose identity was left out (--sched-peers).
    uint64_t peers_removed() const { return peers_removed_; }

private:
    struct Statements;
    struct Peer {
        int64_t tid, tgid;
        std::string comm;
    };
    Peer peer(uint32_t target_tgid, uint32_t tid, uint32_t tgid, const char* comm);
    store::Database& db_;
    const GgmlLayout& layout_;
    SchedPeers peers_;
    uint64_t peers_removed_ = 0;
    std::unique_ptr<Statements> st_;
    std::map<uint32_t, uint64_t> counts_;
    void write_op(const pi_op_entry& e, uint32_t tid);
    void ensure_node(uint64_t graph_seq, uint64_t tensor, uint64_t ts_ns);
    void write_node(const pi_node_event& e, uint64_t graph_seq, uint64_t ts_ns);
    std::unordered_map<uint64_t, pi_node_event> node_defs_;   // tensor → its last details sent
    std::unordered_map<uint64_t, uint64_t> node_written_in_;  // tensor → graph of its last row
    uint64_t node_rows_ = 0;
    uint64_t malformed_ = 0;
    bool in_tx_ = false;
};

}  // namespace profinfer
