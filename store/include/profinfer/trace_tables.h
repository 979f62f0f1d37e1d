#pragma once
// The write side of the trace store: one typed row per table of schema.sql, and the one
// class that inserts them. The tracer turns its event records into these rows; no SQL
// text is written outside store/.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "profinfer/meta_keys.h"
#include "profinfer/store.h"

namespace profinfer::store {

// Record kinds, indexed by the event header's kind (tracer/include/profinfer/events.h
// PI_EV_*; the tracer checks the two agree): the lost_events kinds that are whole records.
// Index 0 is no kind.
inline constexpr std::array<const char*, 12> kRecordKinds = {
    "", "token", "library", "graph", "op", "node", "experts", "sched_switch", "sched_wakeup", "gpu", "batch", "sample"};
bool is_record_kind(const std::string& kind);

struct TokenRow {
    int64_t pid, tid, cpu, start_ns, end_ns, n_tokens, ret;
};
struct GraphRow {
    int64_t seq, pid, tid, start_ns, end_ns;
    std::string api;  // cpu, backend
    int64_t cgraph;
    std::optional<int64_t> backend;
    std::optional<std::string> backend_guid, backend_name;
    int64_t n_nodes;
};
struct OpRow {
    int64_t graph_seq, tid, ith, nth, start_cpu, end_cpu, start_ns, compute_end_ns, end_ns, tensor;
    std::optional<int64_t> fused_tensor;
    int64_t barriers;
    std::array<std::optional<int64_t>, kCounterSlots> counters;
};
struct OpSamplesRow {
    int64_t op_id, samples, wait_samples, barrier_state_samples;
};
struct NodeDefRow {
    int64_t graph_seq, ts_ns, tensor;
    std::string op;
    int64_t op_code;
    std::string name;
    int64_t type;
    std::array<int64_t, 4> ne;
    int64_t flags;
    std::optional<int64_t> view_src;
};
// A source of a node; its shape only when the probe read it (`shape` false: NULLs).
struct NodeSrcRow {
    int64_t def_id, slot, tensor;
    bool shape;
    std::optional<int64_t> view_src;
    int64_t type, op_code;
    std::array<int64_t, 4> ne;
};
struct GraphNodeRow {
    int64_t graph_seq, tensor, def_id;
};
struct GpuEventRow {
    int64_t graph_seq, tid;
    std::string kind;  // dispatch, submit, fence_wait, synchronize
    std::optional<int64_t> tensor;
    int64_t start_ns, end_ns, ret;
};
struct BatchSeqRow {
    int64_t token_id, seq, pos, n_tokens, outputs;
};
struct ExpertRow {
    int64_t graph_seq, tensor;
    std::optional<std::string> name;
    int64_t token, slot, expert;
};
struct SchedSwitchRow {
    int64_t ts_ns, cpu, prev_tid, prev_tgid;
    std::string prev_comm;
    int64_t prev_state, next_tid, next_tgid;
    std::string next_comm;
    int64_t preempt;
};
struct SchedWakeupRow {
    int64_t ts_ns, cpu, tid, target_cpu, waker_tid, waker_tgid;
    std::string waker_comm;
};
struct CpuSampleRow {
    int64_t ts_ns, tid, cpu, graph_seq, ip;
    int64_t caller_ip = 0;  // 0: none (stored as NULL)
};
struct CodeRangeRow {
    int64_t lo, hi;
    std::string library, function;
};
struct ProbeRow {
    std::string symbol, library, kind;
    bool attached;
    std::string reason;  // stored only when not attached
};
struct LibraryRow {
    std::string path, role, build_id;
    bool debug_info;
};
struct CounterRow {
    int64_t idx;
    std::string name;
    int64_t perf_type, config;
    bool available;
    std::string reason;  // stored only when unavailable
};
struct QosEventRow {
    int64_t ts_ns;
    std::string action;  // attach, detach
    double tokens_per_s;
    int64_t start_ns;
};

class TraceTables {
public:
    // Rows of one statement at most, for the tables written in batches (ops, graph_nodes).
    static constexpr size_t kMaxBatchRows = 64;

    explicit TraceTables(Database& db);
    ~TraceTables();
    TraceTables(const TraceTables&) = delete;
    TraceTables& operator=(const TraceTables&) = delete;

    // Rows go in transactions: begin() opens one if none is open, commit() ends it.
    void begin();
    void commit();
    // A transaction is open: rows written that a reader cannot see yet.
    bool uncommitted() const { return in_tx_; }
    void rollback() noexcept;  // the transaction under way, if any, undone

    int64_t add(const TokenRow& r);  // its id
    void add_ops_untraced(int64_t token_id);
    void add(const GraphRow& r);
    // N rows in one statement (N ≤ kMaxBatchRows); returns the first one's id, the rest follow.
    int64_t add_ops(const OpRow* rows, size_t n);
    void add(const OpSamplesRow& r);
    int64_t add(const NodeDefRow& r);  // its id
    void add(const NodeSrcRow& r);
    void add_graph_nodes(const GraphNodeRow* rows, size_t n);  // N ≤ kMaxBatchRows
    void add(const GpuEventRow& r);
    void add(const ExpertRow& r);
    void add(const BatchSeqRow& r);
    void add(const SchedSwitchRow& r);
    void add(const SchedWakeupRow& r);
    void add(const CpuSampleRow& r);
    void add(const CodeRangeRow& r);
    void add(const ProbeRow& r);
    void add(const LibraryRow& r);  // replaces the row of the same path
    void add(const CounterRow& r);
    void add(const QosEventRow& r);
    void set_lost(const std::string& kind, int64_t count);  // replaces the kind's count
    void set_meta(MetaKey key, const std::string& value) { db_.set_meta(key, value); }

    // Bounding a long recording (record --max-db-mb). Bytes of the database's pages in use
    // (freed pages are reused before the file grows), and of its log file on disk.
    int64_t live_bytes();
    int64_t log_bytes();  // the write-ahead log (or rollback journal) file
    int64_t calls_recorded();  // llama_decode calls in the trace
    // Copies the write-ahead log into the database and truncates it (no-op without one).
    void checkpoint();
    // The recording is over: what is open committed, the trace made one file (Database::finish:
    // "" or what is still beside it).
    std::string finish();
    // Deletes the N oldest llama_decode calls whole (N < the calls recorded: the newest is
    // always kept) with everything recorded before the first call kept: its graphs, their
    // operators, nodes, experts, GPU events, batches' sequences, scheduler and QoS events.
    // A node_defs row survives while a graph kept points at it or it is in KEEP_DEFS (the
    // writer's details in force for later graphs). Commits. Returns the calls deleted.
    int64_t drop_oldest_calls(int64_t n, const std::vector<int64_t>& keep_defs);

private:
    struct Statements;
    Database& db_;
    std::unique_ptr<Statements> st_;
    bool in_tx_ = false;
};

// The recorder died during its recording (TargetGuardian, in a process of its own): a
// trace still marked running is marked incomplete with the reason. Never throws.
// NOT_STORED: records the recorder held for --defer-mb, by lost_events kind
// (`<kind>_not_stored`), counted lost and named in the error, with WHERE they were.
void mark_recorder_died(const std::filesystem::path& trace,
                        const std::vector<std::pair<std::string, int64_t>>& not_stored = {},
                        const std::string& where = {}) noexcept;

}  // namespace profinfer::store
