#include "trace_writer.h"

#include <cstring>
#include <vector>

#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/store.h"

namespace profinfer {

static_assert(PI_MAX_COUNTERS == store::kCounterSlots, "the ops table has a column per counter slot");

// Rows of one table inserted N at a time: per-statement work (VDBE setup, cursors, the
// transaction check) is paid once per N rows. One statement per row count up to MAX,
// prepared when first needed.
class MultiRowInsert {
public:
    MultiRowInsert(sqlite3* db, std::string head, int columns, size_t max_rows)
        : db_(db), head_(std::move(head)), columns_(columns), statements_(max_rows + 1) {}
    int columns() const { return columns_; }
    size_t max_rows() const { return statements_.size() - 1; }
    store::Statement& rows(size_t n) {
        if (!statements_[n]) {
            std::string row = "(?";
            for (int c = 1; c < columns_; ++c) row += ",?";
            row += ")";
            std::string sql = head_ + " VALUES ";
            for (size_t i = 0; i < n; ++i) sql += (i ? "," : "") + row;
            statements_[n] = std::make_unique<store::Statement>(db_, sql.c_str());
        }
        return *statements_[n];
    }

private:
    sqlite3* db_;
    std::string head_;
    int columns_;
    std::vector<std::unique_ptr<store::Statement>> statements_;
};

struct TraceWriter::Statements {
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
          sw(db,
             "INSERT INTO sched_switch(ts_ns, cpu, prev_tid, prev_tgid, prev_comm, prev_state, next_tid, next_tgid, "
             "next_comm, preempt) VALUES (?,?,?,?,?,?,?,?,?,?)"),
          wake(db,
               "INSERT INTO sched_wakeup(ts_ns, cpu, tid, target_cpu, waker_tid, waker_tgid, waker_comm) "
               "VALUES (?,?,?,?,?,?,?)"),
          ops(db,
              "INSERT INTO ops(graph_seq, tid, ith, nth, start_cpu, end_cpu, start_ns, compute_end_ns, end_ns, tensor, "
              "fused_tensor, barriers, " + store::counter_columns() + ")",
              12 + PI_MAX_COUNTERS, PI_OP_BATCH),
          graph_nodes(db, "INSERT INTO graph_nodes(graph_seq, tensor, def_id)", 3, 64) {}
    store::Statement token, graph, node, node_src, ops_untraced, gpu, op_samples, expert, sw, wake;
    MultiRowInsert ops;          // an op record's entries, one statement
    MultiRowInsert graph_nodes;  // pending (graph, node) rows, flushed in batches
};

namespace {

int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

std::string bounded(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

bool printable(const std::string& s) {
    for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e) return false;
    return true;
}

std::string hex(const uint8_t* p, size_t n) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
    return s;
}

template <class T>
const T* as(const void* data, size_t size, uint64_t& malformed) {
    if (size != sizeof(T)) return ++malformed, nullptr;
    return static_cast<const T*>(data);
}

}  // namespace

TraceWriter::TraceWriter(store::Database& db, const GgmlLayout& layout, SchedPeers peers)
    : db_(db), layout_(layout), peers_(peers), st_(std::make_unique<Statements>(db.handle())) {}

// The other side of a scheduler event is somebody else's thread: keep of it what the
// user allowed. The idle task (tgid 0) is nobody's.
TraceWriter::Peer TraceWriter::peer(uint32_t target_tgid, uint32_t tid, uint32_t tgid, const char* comm) {
    Peer p{int64_t{tid}, int64_t{tgid}, bounded(comm, PI_COMM_LEN)};
    if (tgid == target_tgid || tgid == 0 || peers_ == SchedPeers::Full) return p;
    ++peers_removed_;
    p.tid = p.tgid = -1;
    if (peers_ == SchedPeers::None) p.comm.clear();
    return p;
}

TraceWriter::~TraceWriter() = default;

void TraceWriter::begin() {
    if (!in_tx_) db_.exec("BEGIN"), in_tx_ = true;
}

void TraceWriter::commit() {
    flush_graph_nodes(0);
    if (in_tx_) db_.exec("COMMIT"), in_tx_ = false;
}

// The graph's records name TENSOR: the first time in this graph, it gets a graph_nodes row
// pointing at the tensor's details in force (none if they were lost: a lost node).
void TraceWriter::note_node(uint64_t graph_seq, uint64_t tensor) {
    auto [written, fresh] = node_written_in_.try_emplace(tensor, graph_seq);
    if (!fresh) {
        if (written->second == graph_seq) return;
        written->second = graph_seq;
    }
    auto def = node_def_ids_.find(tensor);
    if (def == node_def_ids_.end()) return;
    pending_graph_nodes_.push_back({graph_seq, tensor, def->second});
    flush_graph_nodes(st_->graph_nodes.max_rows());
}

// Writes the pending graph_nodes rows once there are at least AT_LEAST of them.
void TraceWriter::flush_graph_nodes(size_t at_least) {
    auto& pending = pending_graph_nodes_;
    if (pending.empty() || pending.size() < at_least) return;
    begin();
    auto& s = st_->graph_nodes.rows(pending.size());
    for (size_t i = 0; i < pending.size(); ++i)
        s.bind(int(3 * i + 1), i64(pending[i].graph_seq)).bind(int(3 * i + 2), i64(pending[i].tensor)).bind(int(3 * i + 3), pending[i].def_id);
    s.run();
    pending.clear();
}

void TraceWriter::write_ops(const pi_op_event& e) {
    auto& s = st_->ops.rows(e.n);
    for (uint32_t i = 0; i < e.n; ++i) {
        const pi_op_entry& o = e.ops[i];
        note_node(o.graph_seq, o.tensor);
        if (o.fused_tensor) note_node(o.graph_seq, o.fused_tensor);
        const int b = int(i) * st_->ops.columns();
        s.bind(b + 1, i64(o.graph_seq)).bind(b + 2, int64_t{e.h.tid}).bind(b + 3, int64_t{o.ith}).bind(b + 4, int64_t{o.nth});
        s.bind(b + 5, int64_t{o.start_cpu}).bind(b + 6, int64_t{o.end_cpu});
        s.bind(b + 7, i64(o.start_ns)).bind(b + 8, i64(o.compute_end_ns)).bind(b + 9, i64(o.end_ns));
        s.bind(b + 10, i64(o.tensor));
        o.fused_tensor ? s.bind(b + 11, i64(o.fused_tensor)) : s.bind_null(b + 11);
        s.bind(b + 12, int64_t{o.barriers});
        for (int c = 0; c < PI_MAX_COUNTERS; ++c)
            o.counters[c] == ~0ULL ? s.bind_null(b + 13 + c) : s.bind(b + 13 + c, i64(o.counters[c]));
    }
    s.run();
    // One statement's rows get consecutive rowids, the last one's reported.
    const int64_t first_id = sqlite3_last_insert_rowid(db_.handle()) - int64_t(e.n) + 1;
    for (uint32_t i = 0; i < e.n; ++i)
        if (const pi_op_entry& o = e.ops[i]; o.samples)
            st_->op_samples.bind(1, first_id + int64_t(i))
                .bind(2, int64_t{o.samples})
                .bind(3, int64_t{o.wait_samples})
                .bind(4, int64_t{o.barrier_state_samples})
                .run();
}

// The kernel side sends a node's details once per tensor and change; they are stored once
// (node_defs, node_def_srcs), and each graph that runs the node gets a narrow graph_nodes
// row pointing at them (note_node), so a reused graph costs 3 integers per node.
void TraceWriter::write_node(const pi_node_event& e, const std::string& name) {
    auto& s = st_->node;
    s.bind(1, i64(e.graph_seq)).bind(2, i64(e.ts_ns)).bind(3, i64(e.dst.addr)).bind(4, layout_.op_name(e.dst.op, e.op_param0));
    s.bind(5, int64_t{e.dst.op}).bind(6, name).bind(7, int64_t{e.dst.type});
    for (int d = 0; d < 4; ++d) s.bind(8 + d, int64_t{e.dst.ne[d]});
    s.bind(12, int64_t{e.flags});
    e.dst.view_src ? s.bind(13, i64(e.dst.view_src)) : s.bind_null(13);
    s.run();
    const int64_t def_id = sqlite3_last_insert_rowid(db_.handle());
    for (int i = 0; i < PI_MAX_SRC && e.src[i]; ++i) {
        auto& q = st_->node_src;
        q.bind(1, def_id).bind(2, int64_t{i}).bind(3, i64(e.src[i]));
        if (i < PI_DETAIL_SRC) {
            const auto& sh = e.src_shape[i];
            sh.view_src ? q.bind(4, i64(sh.view_src)) : q.bind_null(4);
            q.bind(5, int64_t{sh.type}).bind(6, int64_t{sh.op});
            for (int d = 0; d < 4; ++d) q.bind(7 + d, int64_t{sh.ne[d]});
        } else {
            for (int c = 4; c <= 10; ++c) q.bind_null(c);
        }
        q.run();
    }
    node_def_ids_[e.dst.addr] = def_id;
    // Its graph runs it with these details; where another thread's records of this graph
    // came first (a row with the earlier details), that row stays: one row per node and graph.
    note_node(e.graph_seq, e.dst.addr);
}

void TraceWriter::write(const void* data, size_t size) {
    if (size < sizeof(pi_event_header)) return void(++malformed_);
    const auto* h = static_cast<const pi_event_header*>(data);
    if (h->size != size) return void(++malformed_);
    begin();
    switch (h->kind) {
        case PI_EV_TOKEN: {
            auto* e = as<pi_token_event>(data, size, malformed_);
            if (!e) return;
            auto& s = st_->token;
            s.bind(1, int64_t{e->h.pid}).bind(2, int64_t{e->h.tid}).bind(3, int64_t{e->h.cpu});
            s.bind(4, i64(e->start_ns)).bind(5, i64(e->end_ns)).bind(6, int64_t{e->n_tokens}).bind(7, int64_t{e->ret}).run();
            if (e->h.reserved & PI_TOKEN_OPS_OFF)
                st_->ops_untraced.bind(1, int64_t{sqlite3_last_insert_rowid(db_.handle())}).run();
            break;
        }
        case PI_EV_GRAPH: {
            auto* e = as<pi_graph_event>(data, size, malformed_);
            if (!e) return;
            auto& s = st_->graph;
            s.bind(1, i64(e->graph_seq)).bind(2, int64_t{e->h.pid}).bind(3, int64_t{e->h.tid});
            s.bind(4, i64(e->start_ns)).bind(5, i64(e->end_ns)).bind(6, std::string(e->api == 1 ? "backend" : "cpu"));
            s.bind(7, i64(e->cgraph));
            if (e->api == 1) {
                s.bind(8, i64(e->backend)).bind(9, hex(e->guid, 16));
                std::string name = backend_name_of_guid(e->guid);
                name.empty() ? s.bind_null(10) : s.bind(10, name);
            } else {
                s.bind_null(8).bind_null(9).bind(10, std::string("CPU"));
            }
            s.bind(11, int64_t{e->n_nodes}).run();
            break;
        }
        case PI_EV_OP: {
            auto* e = as<pi_op_event>(data, size, malformed_);
            if (!e) return;
            if (e->n > PI_OP_BATCH) return void(++malformed_);
            if (e->n) write_ops(*e);
            counts_[h->kind] += e->n;
            return;
        }
        case PI_EV_NODE: {
            auto* e = as<pi_node_event>(data, size, malformed_);
            if (!e) return;
            const std::string name = bounded(e->name, sizeof e->name);
            if (layout_.op_name(e->dst.op, e->op_param0).empty() || !printable(name))
                throw Error("operator records do not match the struct layout (" + layout_.source + "): op " +
                            std::to_string(e->dst.op) + (printable(name) ? "" : ", non-printable tensor name") +
                            "; this llama.cpp is not the pinned version — use a build with debug info");
            node_names_[e->dst.addr] = name;
            write_node(*e, name);
            break;
        }
        case PI_EV_GPU: {
            auto* e = as<pi_gpu_event>(data, size, malformed_);
            if (!e) return;
            static const char* const kinds[] = {"", "dispatch", "submit", "fence_wait", "synchronize"};
            if (e->kind < PI_GPU_DISPATCH || e->kind > PI_GPU_SYNC) return void(++malformed_);
            if (e->tensor && e->graph_seq) note_node(e->graph_seq, e->tensor);
            auto& s = st_->gpu;
            s.bind(1, i64(e->graph_seq)).bind(2, int64_t{e->h.tid}).bind(3, std::string(kinds[e->kind]));
            e->tensor ? s.bind(4, i64(e->tensor)) : s.bind_null(4);
            s.bind(5, i64(e->start_ns)).bind(6, i64(e->end_ns)).bind(7, int64_t{e->ret}).run();
            break;
        }
        case PI_EV_EXPERTS: {
            auto* e = as<pi_experts_event>(data, size, malformed_);
            if (!e) return;
            if (e->n_used <= 0 || e->n_ids < 0) return void(++malformed_);  // no k: nothing to index by
            note_node(e->graph_seq, e->tensor);
            auto known = node_names_.find(e->tensor);
            const std::string& name = known == node_names_.end() ? std::string() : known->second;
            for (int i = 0; i < e->n_ids && i < PI_MAX_EXPERT_IDS; ++i) {
                auto& s = st_->expert;
                s.bind(1, i64(e->graph_seq)).bind(2, i64(e->tensor));
                name.empty() ? s.bind_null(3) : s.bind(3, name);
                s.bind(4, int64_t{i / e->n_used}).bind(5, int64_t{i % e->n_used}).bind(6, int64_t{e->ids[i]}).run();
            }
            break;
        }
        case PI_EV_SWITCH: {
            auto* e = as<pi_switch_event>(data, size, malformed_);
            if (!e) return;
            Peer prev = peer(h->pid, e->prev_tid, e->prev_tgid, e->prev_comm);
            Peer next = peer(h->pid, e->next_tid, e->next_tgid, e->next_comm);
            auto& s = st_->sw;
            s.bind(1, i64(e->ts_ns)).bind(2, int64_t{e->h.cpu}).bind(3, prev.tid).bind(4, prev.tgid);
            s.bind(5, prev.comm).bind(6, int64_t{e->prev_state});
            s.bind(7, next.tid).bind(8, next.tgid).bind(9, next.comm);
            s.bind(10, int64_t{e->preempt}).run();
            break;
        }
        case PI_EV_WAKEUP: {
            auto* e = as<pi_wakeup_event>(data, size, malformed_);
            if (!e) return;
            Peer waker = peer(h->pid, e->waker_tid, e->waker_tgid, e->waker_comm);
            auto& s = st_->wake;
            s.bind(1, i64(e->ts_ns)).bind(2, int64_t{e->h.cpu}).bind(3, int64_t{e->h.tid}).bind(4, int64_t{e->target_cpu});
            s.bind(5, waker.tid).bind(6, waker.tgid).bind(7, waker.comm);
            s.run();
            break;
        }
        default:
            return void(++malformed_);
    }
    ++counts_[h->kind];
}

}  // namespace profinfer
