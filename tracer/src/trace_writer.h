#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

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
    std::map<std::pair<uint64_t, uint64_t>, std::string> node_names_;  // (graph, tensor) → name, for experts
    uint64_t malformed_ = 0;
    bool in_tx_ = false;
};

}  // namespace profinfer
