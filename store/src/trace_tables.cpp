#include "profinfer/trace_tables.h"

#include <sqlite3.h>

#include <filesystem>
#include <vector>

#include "profinfer/error.h"

namespace profinfer::store {

bool is_record_kind(const std::string& kind) {
    for (size_t k = 1; k < kRecordKinds.size(); ++k)
        if (kind == kRecordKinds[k]) return true;
    return false;
}

namespace {

// Rows of one table inserted N at a time: per-statement work (VDBE setup, cursors, the
// transaction check) is paid once per N rows. One statement per row count, prepared when
// first needed.
constexpr const char* kOpsHead =
    "INSERT INTO ops(graph_seq, tid, ith, nth, start_cpu, end_cpu, start_ns, compute_end_ns, end_ns, tensor, "
    "fused_tensor, barriers";

class MultiRowInsert {
public:
    MultiRowInsert(sqlite3* db, std::string head, int columns)
        : db_(db), head_(std::move(head)), columns_(columns), statements_(TraceTables::kMaxBatchRows + 1) {}
    int columns() const { return columns_; }
    Statement& rows(size_t n) {
        if (n == 0 || n >= statements_.size())
            throw Error("a batch of " + std::to_string(n) + " rows for: " + head_);
        if (!statements_[n]) {
            std::string row = "(?";
            for (int c = 1; c < columns_; ++c) row += ",?";
            row += ")";
            std::string sql = head_ + " VALUES ";
            for (size_t i = 0; i < n; ++i) sql += (i ? "," : "") + row;
            statements_[n] = std::make_unique<Statement>(db_, sql.c_str());
        }
        return *statements_[n];
    }

private:
    sqlite3* db_;
    std::string head_;
    int columns_;
    std::vector<std::unique_ptr<Statement>> statements_;
};

template <class T>
void bind_optional(Statement& s, int i, const std::optional<T>& v) {
    v ? void(s.bind(i, *v)) : void(s.bind_null(i));
}

}  // namespace

struct TraceTables::Statements {
    explicit Statements(sqlite3* db)
        : token(db, "INSERT INTO tokens(pid, tid, cpu, start_ns, end_ns, n_tokens, ret) VALUES (?,?,?,?,?,?,?)"),
          graph(db,
                "INSERT INTO graphs(seq, pid, tid, start_ns, end_ns, api, cgraph, backend, backend_guid, backend_name, "
                "n_nodes) VALUES (?,?,?,?,?,?,?,?,?,?,?)"),
          node(db,
               "INSERT INTO node_defs(graph_seq, ts_ns, tensor, op, op_code, name, type, ne0, ne1, ne2, ne3, flags, view_src) "
               "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          node_src(db,
                   "INSERT INTO node_def_srcs(def_id, slot, tensor, view_src, type, op_code, ne0, ne1, ne2, ne3) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?)"),
          ops_untraced(db, "INSERT INTO ops_untraced(token_id) VALUES (?)"),
          gpu(db, "INSERT INTO gpu_events(graph_seq, tid, kind, tensor, start_ns, end_ns, ret) VALUES (?,?,?,?,?,?,?)"),
          op_samples(db, "INSERT INTO op_samples(op_id, samples, wait_samples, barrier_state_samples) VALUES (?,?,?,?)"),
          expert(db, "INSERT INTO experts(graph_seq, tensor, name, token, slot, expert) VALUES (?,?,?,?,?,?)"),
          batch_seq(db, "INSERT INTO batch_seqs(token_id, seq, pos, n_tokens, outputs) VALUES (?,?,?,?,?)"),
          sw(db,
             "INSERT INTO sched_switch(ts_ns, cpu, prev_tid, prev_tgid, prev_comm, prev_state, next_tid, next_tgid, "
             "next_comm, preempt) VALUES (?,?,?,?,?,?,?,?,?,?)"),
          wake(db,
               "INSERT INTO sched_wakeup(ts_ns, cpu, tid, target_cpu, waker_tid, waker_tgid, waker_comm) "
               "VALUES (?,?,?,?,?,?,?)"),
          sample(db, "INSERT INTO cpu_samples(ts_ns, tid, cpu, graph_seq, ip, caller_ip) VALUES (?,?,?,?,?,?)"),
          code_range(db, "INSERT OR IGNORE INTO code_ranges(lo, hi, library, function) VALUES (?,?,?,?)"),
          probe(db, "INSERT INTO probes(symbol, library, kind, attached, reason) VALUES (?, ?, ?, ?, ?)"),
          library(db, "INSERT OR REPLACE INTO libraries(path, role, build_id, debug_info) VALUES (?, ?, ?, ?)"),
          counter(db, "INSERT INTO counters(idx, name, perf_type, config, available, reason) VALUES (?,?,?,?,?,?)"),
          qos(db, "INSERT INTO qos_events(ts_ns, action, tokens_per_s, start_ns) VALUES (?, ?, ?, ?)"),
          lost(db, "INSERT OR REPLACE INTO lost_events(kind, count) VALUES (?, ?)"),
          ops(db, std::string(kOpsHead) + ", " + counter_columns() + ")", 12 + kCounterSlots),
          ops_bare(db, std::string(kOpsHead) + ")", 12),
          graph_nodes(db, "INSERT INTO graph_nodes(graph_seq, tensor, def_id)", 3) {}
    Statement token, graph, node, node_src, ops_untraced, gpu, op_samples, expert, batch_seq, sw, wake, sample, code_range,
        probe, library, counter, qos, lost;
    // Rows with counters, and rows without (--level op: the counter columns stay NULL,
    // 6 binds a row fewer).
    MultiRowInsert ops, ops_bare, graph_nodes;
};

TraceTables::TraceTables(Database& db) : db_(db), st_(std::make_unique<Statements>(db.handle())) {}
TraceTables::~TraceTables() = default;

void TraceTables::begin() {
    if (!in_tx_) db_.exec("BEGIN"), in_tx_ = true;
}

void TraceTables::commit() {
    if (in_tx_) db_.exec("COMMIT"), in_tx_ = false;
}

void TraceTables::rollback() noexcept {
    if (in_tx_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr), in_tx_ = false;
}

std::string TraceTables::finish() {
    commit();
    return db_.finish();
}

int64_t TraceTables::live_bytes() {
    return (db_.scalar("PRAGMA page_count") - db_.scalar("PRAGMA freelist_count")) * db_.scalar("PRAGMA page_size");
}

namespace {
int64_t size_or_zero(const std::string& path) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path, ec);
    return ec ? 0 : int64_t(n);
}
}  // namespace

int64_t TraceTables::log_bytes() {
    return size_or_zero(db_.path().string() + "-wal") + size_or_zero(db_.path().string() + "-journal");
}

int64_t TraceTables::calls_recorded() { return db_.scalar("SELECT count(*) FROM tokens"); }

void TraceTables::checkpoint() {
    commit();
    sqlite3_wal_checkpoint_v2(db_.handle(), nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
}

int64_t TraceTables::drop_oldest_calls(int64_t n, const std::vector<int64_t>& keep_defs) {
    if (n <= 0) return 0;
    Statement first_kept(db_.handle(), "SELECT start_ns FROM tokens ORDER BY start_ns, id LIMIT 1 OFFSET ?");
    first_kept.bind(1, n);
    if (!first_kept.step()) return 0;  // fewer calls than that: keep them all
    const int64_t cut = first_kept.column_int(0);
    begin();
    // Graph numbers grow with their start (one counter, taken as a graph begins): the graphs
    // begun before the cut are those up to the last of them, and their records are all in
    // (they ended before the call kept began).
    Statement last(db_.handle(), "SELECT coalesce(max(seq), -1) FROM graphs WHERE start_ns < ?");
    last.bind(1, cut).step();
    const int64_t s = last.column_int(0);
    db_.exec("CREATE TEMP TABLE IF NOT EXISTS prune_keep_defs (id INTEGER PRIMARY KEY)");
    db_.exec("DELETE FROM prune_keep_defs");
    {
        Statement keep(db_.handle(), "INSERT OR IGNORE INTO prune_keep_defs(id) VALUES (?)");
        for (int64_t id : keep_defs) keep.bind(1, id).run();
    }
    const std::string seq = std::to_string(s), ts = std::to_string(cut);
    db_.exec("DELETE FROM op_samples WHERE op_id IN (SELECT id FROM ops WHERE graph_seq <= " + seq + ")");
    db_.exec("DELETE FROM ops WHERE graph_seq <= " + seq);
    db_.exec("DELETE FROM graph_nodes WHERE graph_seq <= " + seq);
    db_.exec("DELETE FROM experts WHERE graph_seq <= " + seq);
    db_.exec("DELETE FROM gpu_events WHERE graph_seq <= " + seq);
    db_.exec("DELETE FROM graphs WHERE seq <= " + seq);
    db_.exec("CREATE TEMP TABLE IF NOT EXISTS prune_defs (id INTEGER PRIMARY KEY)");
    db_.exec("DELETE FROM prune_defs");
    db_.exec("INSERT INTO prune_defs SELECT id FROM node_defs WHERE graph_seq <= " + seq +
             " AND id NOT IN (SELECT def_id FROM graph_nodes) AND id NOT IN (SELECT id FROM prune_keep_defs)");
    db_.exec("DELETE FROM node_def_srcs WHERE def_id IN (SELECT id FROM prune_defs)");
    db_.exec("DELETE FROM node_defs WHERE id IN (SELECT id FROM prune_defs)");
    db_.exec("DELETE FROM batch_seqs WHERE token_id IN (SELECT id FROM tokens WHERE start_ns < " + ts + ")");
    db_.exec("DELETE FROM ops_untraced WHERE token_id IN (SELECT id FROM tokens WHERE start_ns < " + ts + ")");
    const int64_t calls = db_.scalar("SELECT count(*) FROM tokens WHERE start_ns < " + ts);
    db_.exec("DELETE FROM tokens WHERE start_ns < " + ts);
    db_.exec("DELETE FROM sched_switch WHERE ts_ns < " + ts);
    db_.exec("DELETE FROM sched_wakeup WHERE ts_ns < " + ts);
    db_.exec("DELETE FROM cpu_samples WHERE ts_ns < " + ts);
    db_.exec("DELETE FROM qos_events WHERE ts_ns < " + ts);
    commit();
    return calls;
}

int64_t TraceTables::add(const TokenRow& r) {
    st_->token.bind(1, r.pid).bind(2, r.tid).bind(3, r.cpu).bind(4, r.start_ns).bind(5, r.end_ns);
    st_->token.bind(6, r.n_tokens).bind(7, r.ret).run();
    return sqlite3_last_insert_rowid(db_.handle());
}

void TraceTables::add_ops_untraced(int64_t token_id) { st_->ops_untraced.bind(1, token_id).run(); }

void TraceTables::add(const GraphRow& r) {
    auto& s = st_->graph;
    s.bind(1, r.seq).bind(2, r.pid).bind(3, r.tid).bind(4, r.start_ns).bind(5, r.end_ns).bind(6, r.api).bind(7, r.cgraph);
    bind_optional(s, 8, r.backend);
    bind_optional(s, 9, r.backend_guid);
    bind_optional(s, 10, r.backend_name);
    s.bind(11, r.n_nodes).run();
}

int64_t TraceTables::add_ops(const OpRow* rows, size_t n) {
    bool counters = false;
    for (size_t i = 0; i < n && !counters; ++i)
        for (const auto& c : rows[i].counters) counters |= c.has_value();
    auto& insert = counters ? st_->ops : st_->ops_bare;
    auto& s = insert.rows(n);
    for (size_t i = 0; i < n; ++i) {
        const OpRow& o = rows[i];
        const int b = int(i) * insert.columns();
        s.bind(b + 1, o.graph_seq).bind(b + 2, o.tid).bind(b + 3, o.ith).bind(b + 4, o.nth);
        s.bind(b + 5, o.start_cpu).bind(b + 6, o.end_cpu);
        s.bind(b + 7, o.start_ns).bind(b + 8, o.compute_end_ns).bind(b + 9, o.end_ns).bind(b + 10, o.tensor);
        bind_optional(s, b + 11, o.fused_tensor);
        s.bind(b + 12, o.barriers);
        if (counters)
            for (int c = 0; c < kCounterSlots; ++c) bind_optional(s, b + 13 + c, o.counters[c]);
    }
    s.run();
    // One statement's rows get consecutive rowids, the last one's reported.
    return sqlite3_last_insert_rowid(db_.handle()) - int64_t(n) + 1;
}

void TraceTables::add(const OpSamplesRow& r) {
    st_->op_samples.bind(1, r.op_id).bind(2, r.samples).bind(3, r.wait_samples).bind(4, r.barrier_state_samples).run();
}

int64_t TraceTables::add(const NodeDefRow& r) {
    auto& s = st_->node;
    s.bind(1, r.graph_seq).bind(2, r.ts_ns).bind(3, r.tensor).bind(4, r.op).bind(5, r.op_code).bind(6, r.name);
    s.bind(7, r.type);
    for (int d = 0; d < 4; ++d) s.bind(8 + d, r.ne[d]);
    s.bind(12, r.flags);
    bind_optional(s, 13, r.view_src);
    s.run();
    return sqlite3_last_insert_rowid(db_.handle());
}

void TraceTables::add(const NodeSrcRow& r) {
    auto& q = st_->node_src;
    q.bind(1, r.def_id).bind(2, r.slot).bind(3, r.tensor);
    if (r.shape) {
        bind_optional(q, 4, r.view_src);
        q.bind(5, r.type).bind(6, r.op_code);
        for (int d = 0; d < 4; ++d) q.bind(7 + d, r.ne[d]);
    } else {
        for (int c = 4; c <= 10; ++c) q.bind_null(c);
    }
    q.run();
}

void TraceTables::add_graph_nodes(const GraphNodeRow* rows, size_t n) {
    auto& s = st_->graph_nodes.rows(n);
    for (size_t i = 0; i < n; ++i)
        s.bind(int(3 * i + 1), rows[i].graph_seq).bind(int(3 * i + 2), rows[i].tensor).bind(int(3 * i + 3), rows[i].def_id);
    s.run();
}

void TraceTables::add(const GpuEventRow& r) {
    auto& s = st_->gpu;
    s.bind(1, r.graph_seq).bind(2, r.tid).bind(3, r.kind);
    bind_optional(s, 4, r.tensor);
    s.bind(5, r.start_ns).bind(6, r.end_ns).bind(7, r.ret).run();
}

void TraceTables::add(const ExpertRow& r) {
    auto& s = st_->expert;
    s.bind(1, r.graph_seq).bind(2, r.tensor);
    bind_optional(s, 3, r.name);
    s.bind(4, r.token).bind(5, r.slot).bind(6, r.expert).run();
}

void TraceTables::add(const BatchSeqRow& r) {
    st_->batch_seq.bind(1, r.token_id).bind(2, r.seq).bind(3, r.pos).bind(4, r.n_tokens).bind(5, r.outputs).run();
}

void TraceTables::add(const SchedSwitchRow& r) {
    auto& s = st_->sw;
    s.bind(1, r.ts_ns).bind(2, r.cpu).bind(3, r.prev_tid).bind(4, r.prev_tgid).bind(5, r.prev_comm).bind(6, r.prev_state);
    s.bind(7, r.next_tid).bind(8, r.next_tgid).bind(9, r.next_comm).bind(10, r.preempt).run();
}

void TraceTables::add(const SchedWakeupRow& r) {
    auto& s = st_->wake;
    s.bind(1, r.ts_ns).bind(2, r.cpu).bind(3, r.tid).bind(4, r.target_cpu).bind(5, r.waker_tid).bind(6, r.waker_tgid);
    s.bind(7, r.waker_comm).run();
}

void TraceTables::add(const CpuSampleRow& r) {
    auto& s = st_->sample.bind(1, r.ts_ns).bind(2, r.tid).bind(3, r.cpu).bind(4, r.graph_seq).bind(5, r.ip);
    (r.caller_ip ? s.bind(6, r.caller_ip) : s.bind_null(6)).run();
}

void TraceTables::add(const CodeRangeRow& r) {
    st_->code_range.bind(1, r.lo).bind(2, r.hi).bind(3, r.library).bind(4, r.function).run();
}

void TraceTables::add(const ProbeRow& r) {
    auto& s = st_->probe;
    s.bind(1, r.symbol).bind(2, r.library).bind(3, r.kind).bind(4, int64_t{r.attached});
    r.attached ? s.bind_null(5) : s.bind(5, r.reason);
    s.run();
}

void TraceTables::add(const LibraryRow& r) {
    st_->library.bind(1, r.path).bind(2, r.role).bind(3, r.build_id).bind(4, int64_t{r.debug_info}).run();
}

void TraceTables::add(const CounterRow& r) {
    auto& s = st_->counter;
    s.bind(1, r.idx).bind(2, r.name).bind(3, r.perf_type).bind(4, r.config).bind(5, int64_t{r.available});
    r.available ? s.bind_null(6) : s.bind(6, r.reason);
    s.run();
}

void TraceTables::add(const QosEventRow& r) {
    st_->qos.bind(1, r.ts_ns).bind(2, r.action).bind(3, r.tokens_per_s).bind(4, r.start_ns).run();
}

void TraceTables::set_lost(const std::string& kind, int64_t count) { st_->lost.bind(1, kind).bind(2, count).run(); }

// What the recorder would have written had it lived. Only a run still marked running
// is touched: the recorder may have finished its own bookkeeping before it died.
void mark_recorder_died(const std::filesystem::path& trace,
                        const std::vector<std::pair<std::string, int64_t>>& not_stored,
                        const std::string& where) noexcept try {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(trace.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        const std::string running =
            std::string("(SELECT value FROM meta WHERE key = '") + name(MetaKey::Status) + "') = 'running'";
        int64_t calls = 0, records = 0;
        std::string lost_rows;
        for (const auto& [kind, n] : not_stored) {  // kinds are ours (kRecordKinds), counts numbers
            if (kind == "token_not_stored") calls = n;
            records += n;
            if (n == 0) continue;
            lost_rows += "INSERT INTO lost_events(kind, count) SELECT '" + kind + "', " + std::to_string(n) + " WHERE " +
                         running + " ON CONFLICT(kind) DO UPDATE SET count = count + excluded.count;";
        }
        const std::string held =
            not_stored.empty()
                ? "'; the records it held in memory (--consumer hold or --defer-mb, up to ' || value || ' MB), not yet stored, were "
                  "lost with it'"
                : "'; the records it held in memory (--consumer hold or --defer-mb), not yet stored, were lost with it: " +
                      std::to_string(calls) + " llama_decode calls (" + std::to_string(records) +
                      " records in all, counted in lost_events" + (where.empty() ? "" : "; " + where) + ")'";
        const std::string sql = "BEGIN;" + lost_rows + "INSERT OR REPLACE INTO meta(key, value) SELECT '" +
                                name(MetaKey::Error) +
                                "', 'the recorder died during the recording (killed or crashed); the target went on "
                                "untraced' || coalesce((SELECT " + held + " FROM meta WHERE key = '" +
                                name(MetaKey::DeferMb) + "'), '') WHERE " + running + ";" +
                                "UPDATE meta SET value = 'incomplete' WHERE key = '" + name(MetaKey::Status) +
                                "' AND value = 'running';"
                                "COMMIT;";
        sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
        build_indexes(db);
    }
    sqlite3_close(db);
} catch (...) {
}

}  // namespace profinfer::store
