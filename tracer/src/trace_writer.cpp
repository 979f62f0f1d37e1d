#include "trace_writer.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/store.h"

namespace profinfer {

static_assert(PI_MAX_COUNTERS == store::kCounterSlots, "the ops table has a column per counter slot");

static_assert(PI_EV_KIND_MAX == store::kRecordKinds.size(), "one record kind name per event kind");
static_assert(PI_OP_BATCH <= store::TraceTables::kMaxBatchRows, "an op record's entries go in one statement");

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

TraceWriter::TraceWriter(store::TraceTables& tables, const GgmlLayout& layout, SchedPeers peers)
    : tables_(tables), layout_(layout), peers_(peers) {}

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

void TraceWriter::begin() { tables_.begin(); }

void TraceWriter::commit() {
    flush_graph_nodes(0);
    tables_.commit();
}

void TraceWriter::rollback() noexcept {
    pending_graph_nodes_.clear();
    tables_.rollback();
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
    pending_graph_nodes_.push_back({i64(graph_seq), i64(tensor), def->second});
    flush_graph_nodes(store::TraceTables::kMaxBatchRows);
}

// Writes the pending graph_nodes rows once there are at least AT_LEAST of them.
void TraceWriter::flush_graph_nodes(size_t at_least) {
    auto& pending = pending_graph_nodes_;
    if (pending.empty() || pending.size() < at_least) return;
    begin();
    tables_.add_graph_nodes(pending.data(), pending.size());
    pending.clear();
}

std::vector<int> TraceWriter::counter_slots_read_zero() const {
    std::vector<int> out;
    for (int c = 0; c < PI_MAX_COUNTERS; ++c)
        if (counter_reads_[c] && !counter_nonzero_[c]) out.push_back(c);
    return out;
}

void TraceWriter::write_ops(const pi_op_event& e) {
    store::OpRow rows[PI_OP_BATCH];
    const pi_op_entry* kept[PI_OP_BATCH];
    uint32_t n = 0;
    for (uint32_t i = 0; i < e.n; ++i) {
        const pi_op_entry& o = e.ops[i];
        // A thread's last node of a graph can be ended twice: by the graph's return on
        // thread 0's CPU and, at the same moment, by its own exit or next node on its CPU
        // (both see it under way; an emulator's stalled vCPUs widen that window to ms).
        // The second record repeats the first's thread, node and start: it is dropped.
        auto& last = last_op_[e.h.tid];
        if (last.start_ns == o.start_ns && last.tensor == o.tensor && last.graph_seq == o.graph_seq) {
            ++op_duplicates_;
            continue;
        }
        last = {o.graph_seq, o.tensor, o.start_ns};
        note_node(o.graph_seq, o.tensor);
        if (o.fused_tensor) note_node(o.graph_seq, o.fused_tensor);
        kept[n] = &o;
        store::OpRow& r = rows[n++];
        r = {i64(o.graph_seq), int64_t{e.h.tid}, int64_t{o.ith}, int64_t{o.nth}, int64_t{o.start_cpu}, int64_t{o.end_cpu},
             i64(o.start_ns), i64(o.compute_end_ns), i64(o.end_ns), i64(o.tensor), std::nullopt, int64_t{o.barriers}, {}};
        if (o.fused_tensor) r.fused_tensor = i64(o.fused_tensor);
        for (int c = 0; c < PI_MAX_COUNTERS; ++c)
            if (o.counters[c] != ~0ULL) {
                r.counters[c] = i64(o.counters[c]);
                ++counter_reads_[c];
                counter_nonzero_[c] |= o.counters[c] != 0;
            }
    }
    if (!n) return;
    const int64_t first_id = tables_.add_ops(rows, n);
    for (uint32_t i = 0; i < n; ++i)
        if (const pi_op_entry& o = *kept[i]; o.samples)
            tables_.add(store::OpSamplesRow{first_id + int64_t(i), int64_t{o.samples}, int64_t{o.wait_samples},
                                            int64_t{o.barrier_state_samples}});
}

// The kernel side sends a node's details once per tensor and change; they are stored once
// (node_defs, node_def_srcs), and each graph that runs the node gets a narrow graph_nodes
// row pointing at them (note_node), so a reused graph costs 3 integers per node.
void TraceWriter::write_node(const pi_node_event& e, const std::string& name) {
    store::NodeDefRow def{i64(e.graph_seq), i64(e.ts_ns), i64(e.dst.addr), layout_.op_name(e.dst.op, e.op_param0),
                          int64_t{e.dst.op}, name, int64_t{e.dst.type}, {}, int64_t{e.flags}, std::nullopt};
    for (int d = 0; d < 4; ++d) def.ne[d] = int64_t{e.dst.ne[d]};
    if (e.dst.view_src) def.view_src = i64(e.dst.view_src);
    const int64_t def_id = tables_.add(def);
    for (int i = 0; i < PI_MAX_SRC && e.src[i]; ++i) {
        store::NodeSrcRow src{def_id, int64_t{i}, i64(e.src[i]), i < PI_DETAIL_SRC, std::nullopt, 0, 0, {}};
        if (src.shape) {
            const auto& sh = e.src_shape[i];
            if (sh.view_src) src.view_src = i64(sh.view_src);
            src.type = int64_t{sh.type};
            src.op_code = int64_t{sh.op};
            for (int d = 0; d < 4; ++d) src.ne[d] = int64_t{sh.ne[d]};
        }
        tables_.add(src);
    }
    node_def_ids_[e.dst.addr] = def_id;
    // Its graph runs it with these details; where another thread's records of this graph
    // came first (a row with the earlier details), that row stays: one row per node and graph.
    note_node(e.graph_seq, e.dst.addr);
}

// Runs of one sequence's tokens at consecutive positions, in batch order: what batch_seqs
// stores (a decode step of 4 sequences: 4 rows; a prompt chunk: 1).
void TraceWriter::note_batch(const pi_batch_event& e) {
    PendingBatch& p = pending_batch_[e.h.tid];
    p.start_ns = e.start_ns;
    p.runs.clear();
    for (uint32_t i = 0; i < e.n_read; ++i) {
        const int64_t seq = e.tok[i].seq, pos = e.tok[i].pos_out & ~PI_BATCH_OUTPUT;
        const int64_t out = (e.tok[i].pos_out & PI_BATCH_OUTPUT) ? 1 : 0;
        if (!p.runs.empty() && p.runs.back().seq == seq && p.runs.back().pos + p.runs.back().n_tokens == pos) {
            ++p.runs.back().n_tokens;
            p.runs.back().outputs += out;
        } else {
            p.runs.push_back({0, seq, pos, 1, out});
        }
    }
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
            const int64_t id = tables_.add(store::TokenRow{e->h.pid, e->h.tid, e->h.cpu, i64(e->start_ns), i64(e->end_ns),
                                                            e->n_tokens, e->ret});
            if (e->h.reserved & PI_TOKEN_OPS_OFF) tables_.add_ops_untraced(id);
            if (auto b = pending_batch_.find(e->h.tid); b != pending_batch_.end()) {
                if (b->second.start_ns == e->start_ns)
                    for (auto r : b->second.runs) tables_.add((r.token_id = id, r));
                pending_batch_.erase(b);
            }
            break;
        }
        case PI_EV_SAMPLE: {
            auto* e = as<pi_sample_event>(data, size, malformed_);
            if (!e) return;
            tables_.add(store::CpuSampleRow{i64(e->ts_ns), e->h.tid, e->h.cpu, i64(e->graph_seq), i64(e->ip), i64(e->caller)});
            break;
        }
        case PI_EV_BATCH: {
            const auto* e = static_cast<const pi_batch_event*>(data);
            const size_t head = offsetof(pi_batch_event, tok);
            if (size < head || e->n_read > PI_MAX_BATCH_READ || e->n_tokens < 0 || e->n_read > uint32_t(e->n_tokens) ||
                size != head + e->n_read * sizeof(pi_batch_token))
                return void(++malformed_);
            note_batch(*e);
            break;
        }
        case PI_EV_GRAPH: {
            auto* e = as<pi_graph_event>(data, size, malformed_);
            if (!e) return;
            store::GraphRow g{i64(e->graph_seq), e->h.pid, e->h.tid, i64(e->start_ns), i64(e->end_ns),
                              e->api == 1 ? "backend" : "cpu", i64(e->cgraph), std::nullopt, std::nullopt,
                              std::string("CPU"), int64_t{e->n_nodes}};
            if (e->api == 1) {
                g.backend = i64(e->backend);
                g.backend_guid = hex(e->guid, 16);
                std::string name = backend_name_of_guid(e->guid);
                g.backend_name = name.empty() ? std::nullopt : std::optional<std::string>(name);
            }
            tables_.add(g);
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
            tables_.add(store::GpuEventRow{i64(e->graph_seq), e->h.tid, kinds[e->kind],
                                           e->tensor ? std::optional<int64_t>(i64(e->tensor)) : std::nullopt,
                                           i64(e->start_ns), i64(e->end_ns), int64_t{e->ret}});
            break;
        }
        case PI_EV_EXPERTS: {
            auto* e = as<pi_experts_event>(data, size, malformed_);
            if (!e) return;
            if (e->n_used <= 0 || e->n_ids < 0) return void(++malformed_);  // no k: nothing to index by
            note_node(e->graph_seq, e->tensor);
            auto known = node_names_.find(e->tensor);
            std::optional<std::string> name;
            if (known != node_names_.end() && !known->second.empty()) name = known->second;
            for (int i = 0; i < e->n_ids && i < PI_MAX_EXPERT_IDS; ++i)
                tables_.add(store::ExpertRow{i64(e->graph_seq), i64(e->tensor), name, int64_t{i / e->n_used},
                                             int64_t{i % e->n_used}, int64_t{e->ids[i]}});
            break;
        }
        case PI_EV_SWITCH: {
            auto* e = as<pi_switch_event>(data, size, malformed_);
            if (!e) return;
            Peer prev = peer(h->pid, e->prev_tid, e->prev_tgid, e->prev_comm);
            Peer next = peer(h->pid, e->next_tid, e->next_tgid, e->next_comm);
            tables_.add(store::SchedSwitchRow{i64(e->ts_ns), e->h.cpu, prev.tid, prev.tgid, prev.comm,
                                              int64_t{e->prev_state}, next.tid, next.tgid, next.comm,
                                              int64_t{e->preempt}});
            break;
        }
        case PI_EV_WAKEUP: {
            auto* e = as<pi_wakeup_event>(data, size, malformed_);
            if (!e) return;
            Peer waker = peer(h->pid, e->waker_tid, e->waker_tgid, e->waker_comm);
            tables_.add(store::SchedWakeupRow{i64(e->ts_ns), e->h.cpu, e->h.tid, int64_t{e->target_cpu}, waker.tid,
                                              waker.tgid, waker.comm});
            break;
        }
        default:
            return void(++malformed_);
    }
    ++counts_[h->kind];
}

}  // namespace profinfer
