#include "profinfer/trace_graph.h"

#include <algorithm>
#include <map>

#include "profinfer/error.h"
#include "profinfer/ggml_types.h"

namespace profinfer {

Traffic Node::traffic() const {
    auto elems = [](const std::array<int64_t, 4>& ne) { return uint64_t(ne[0] * ne[1] * ne[2] * ne[3]); };
    auto src = [&](size_t i) -> const SourceRef* { return i < srcs.size() && srcs[i].type >= 0 ? &srcs[i] : nullptr; };
    auto whole = [&](const SourceRef* s) { return s ? ggml_bytes(s->type, elems(s->ne)) : 0; };
    const uint64_t dst = ggml_bytes(type, elems(ne));
    // Ops that only describe a tensor (ggml computes nothing for them) move nothing.
    if (op == "NONE" || op == "VIEW" || op == "RESHAPE" || op == "PERMUTE" || op == "TRANSPOSE") return {0, false};
    // GET_ROWS reads the rows it gathers (as many as it writes), not the whole table.
    if (op == "GET_ROWS") {
        const SourceRef* table = src(0);
        return {(table ? ggml_bytes(table->type, elems(ne)) : 0) + whole(src(1)) + dst, table == nullptr};
    }
    // SET_ROWS writes its source's rows into the destination (a KV cache): those rows, not the cache.
    if (op == "SET_ROWS") {
        const SourceRef* rows = src(0);
        return {whole(rows) + whole(src(1)) + (rows ? ggml_bytes(type, elems(rows->ne)) : 0), rows == nullptr};
    }
    // MUL_MAT_ID reads the experts its tokens use: dst [M, used, tokens] from src0 [K, M, experts].
    // One token: exactly `used` experts; more: at most min(experts, used × tokens) — an upper
    // bound, the ids being per token.
    if (op == "MUL_MAT_ID") {
        const SourceRef* w = src(0);
        if (!w) return {whole(src(1)) + dst, true};
        const uint64_t used = uint64_t(ne[1]), tokens = uint64_t(ne[2] * ne[3]);
        const uint64_t experts = std::min<uint64_t>(uint64_t(w->ne[2]), used * tokens);
        return {ggml_bytes(w->type, uint64_t(w->ne[0] * w->ne[1]) * experts) + whole(src(1)) + whole(src(2)) + dst,
                tokens > 1};
    }
    uint64_t b = dst;
    for (size_t i = 0; i < srcs.size(); ++i) b += whole(src(i));
    return {b, false};
}

uint64_t Node::bytes() const { return traffic().bytes; }

std::optional<int64_t> Node::counter(int slot) const {
    if (threads.empty()) return std::nullopt;
    int64_t sum = 0;
    for (const auto& t : threads) {
        if (!t.counters[slot]) return std::nullopt;
        sum += *t.counters[slot];
    }
    return sum;
}

TraceGraphs::TraceGraphs(store::Database& db) : db_(db), hog_(store::hog_window(db.meta())) {
    store::Statement st(db_.handle(), "SELECT phase, n_tokens, start_ns, end_ns FROM calls ORDER BY call");
    while (st.step())
        calls_.push_back({int(calls_.size()), st.column_text(0), st.column_int(1), st.column_int(2), st.column_int(3)});
}

bool TraceGraphs::inside_hog_window(int call) const {
    const DecodeCall& c = calls_.at(size_t(call));
    return hog_ && c.start_ns >= hog_->start_ns && c.end_ns <= hog_->stop_ns;
}

int TraceGraphs::default_call() const {
    std::vector<int> decode, in_hog;
    for (const auto& c : calls_)
        if (c.phase == "decode") {
            decode.push_back(c.index);
            if (inside_hog_window(c.index)) in_hog.push_back(c.index);
        }
    if (!in_hog.empty()) return in_hog[in_hog.size() / 2];
    if (!decode.empty()) return decode[decode.size() / 2];
    if (calls_.empty()) throw Error("the trace has no llama_decode calls");
    return calls_.back().index;
}

std::vector<Node> TraceGraphs::nodes(int call) const {
    if (call < 0 || call >= int(calls_.size()))
        throw Error("no llama_decode call " + std::to_string(call) + " (the trace has " + std::to_string(calls_.size()) +
                    ", numbered from 0)");
    // The call's CPU graphs as a literal list: node_times is then computed for them only.
    std::string graphs;
    {
        store::Statement st(db_.handle(), ("SELECT graph_seq FROM call_graphs WHERE api = 'cpu' AND call = " +
                                           std::to_string(call)).c_str());
        while (st.step()) graphs += (graphs.empty() ? "" : ",") + std::to_string(st.column_int(0));
        graphs = "(" + graphs + ")";
    }
    std::vector<Node> nodes;
    std::map<std::pair<int64_t, uint64_t>, int> index;  // (graph, tensor) → node
    std::map<int64_t, int> by_id;
    {
        store::Statement st(db_.handle(), ("SELECT n.id, n.graph_seq, n.tensor, n.name, n.op, n.type, n.ne0, n.ne1, n.ne2, n.ne3, "
                                           "r.view_src, n.base, n.layer, n.attention, n.matmul FROM call_nodes n "
                                           "JOIN nodes r ON r.id = n.id WHERE n.graph_seq IN " + graphs + " ORDER BY n.id").c_str());
        while (st.step()) {
            Node n;
            n.index = int(nodes.size());
            n.graph_seq = st.column_int(1);
            n.tensor = uint64_t(st.column_int(2));
            n.name = st.column_text(3);
            n.op = st.column_text(4);
            n.type = int(st.column_int(5));
            for (int d = 0; d < 4; ++d) n.ne[d] = st.column_int(6 + d);
            n.view_src = st.column_is_null(10) ? 0 : uint64_t(st.column_int(10));
            n.base = st.column_text(11);
            n.layer = st.column_is_null(12) ? -1 : int(st.column_int(12));
            n.attention = st.column_int(13) != 0;
            n.matmul = st.column_int(14) != 0;
            index[{n.graph_seq, n.tensor}] = n.index;
            by_id[st.column_int(0)] = n.index;
            nodes.push_back(std::move(n));
        }
    }
    {
        // Node times (view node_times), for these graphs only: named as a literal list the
        // constraint reaches inside the view's window; a join would compute it whole.
        store::Statement st(db_.handle(), ("SELECT graph_seq, tensor, start_ns, end_ns FROM node_times WHERE graph_seq IN " +
                                           graphs).c_str());
        while (st.step()) {
            auto it = index.find({st.column_int(0), uint64_t(st.column_int(1))});
            if (it == index.end()) continue;
            nodes[it->second].start_ns = st.column_int(2);
            nodes[it->second].end_ns = st.column_int(3);
        }
    }
    {
        store::Statement st(db_.handle(),
                            ("SELECT node_id, tensor, view_src, type, ne0, ne1, ne2, ne3 FROM node_srcs WHERE node_id IN "
                             "(SELECT id FROM nodes WHERE graph_seq IN " + graphs + ") ORDER BY node_id, slot").c_str());
        while (st.step()) {
            SourceRef s;
            s.tensor = uint64_t(st.column_int(1));
            s.view_src = st.column_is_null(2) ? 0 : uint64_t(st.column_int(2));
            s.type = st.column_is_null(3) ? -1 : int(st.column_int(3));
            for (int d = 0; d < 4; ++d) s.ne[d] = st.column_int(4 + d);
            nodes[by_id.at(st.column_int(0))].srcs.push_back(s);
        }
    }
    {
        store::Statement st(db_.handle(),
                            ("SELECT graph_seq, tensor, fused_tensor, ith, nth, tid, start_ns, compute_end_ns, end_ns, "
                             "start_cpu, end_cpu, " + store::counter_columns() + " FROM ops WHERE graph_seq IN " + graphs).c_str());
        while (st.step()) {
            auto it = index.find({st.column_int(0), uint64_t(st.column_int(1))});
            if (it == index.end()) continue;  // node record lost
            ThreadPart t;
            t.ith = int(st.column_int(3));
            t.nth = int(st.column_int(4));
            t.tid = st.column_int(5);
            t.start_ns = st.column_int(6);
            t.compute_end_ns = st.column_int(7);
            t.end_ns = st.column_int(8);
            t.start_cpu = int(st.column_int(9));
            t.end_cpu = int(st.column_int(10));
            for (int k = 0; k < kCounterSlots; ++k)
                if (!st.column_is_null(11 + k)) t.counters[k] = st.column_int(11 + k);
            Node& n = nodes[it->second];
            n.threads.push_back(t);
            if (!st.column_is_null(2)) {
                auto jt = index.find({st.column_int(0), uint64_t(st.column_int(2))});
                if (jt != index.end()) n.fused_with = jt->second, nodes[jt->second].fused_with = n.index;
            }
        }
    }
    for (auto& n : nodes)
        std::sort(n.threads.begin(), n.threads.end(), [](const ThreadPart& a, const ThreadPart& b) { return a.ith < b.ith; });
    return nodes;
}

}  // namespace profinfer
