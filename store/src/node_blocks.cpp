// The logical block of each node a kernel computed (llama.cpp's op-profiler request #9659:
// "the same mat_mul from attention or MLP"): view block_times, node_times' rows with
// block_layer and block. Decided per call, in C++ over the call's nodes in the order they
// ran, rather than as SQL windows: a window partitioned by call still sorts every node of
// the trace, once per window (seven of them), and SQLite 3.40 pushes no call = N into such a
// view — 140 s on a 10-minute full-level trace of the 1B (5.67 M nodes), super-linear.
#include <map>
#include <optional>
#include <vector>

#include "profinfer/store.h"

namespace profinfer::store {

namespace {

struct RanNode {
    int64_t graph_seq = 0, tensor = 0;
    std::optional<int64_t> layer;  // the name's "-N" suffix
    bool closes_attention = false;  // ffn_inp (sa_out in Gemma 2): the residual ADD after attention
    bool experts = false;           // MUL_MAT_ID
};

struct Block {
    std::optional<int64_t> layer;
    const char* name;
};

}  // namespace

// NODES: one call's nodes in the order they ran (graph, then first start, then tensor): a
// graph's nodes run one after another; a call may run several graphs — one per backend
// split or per ubatch, one per node under an eval callback.
// - A layer-suffixed node starts a run; one whose layer is below the previous such node's
//   starts a new pass over the layers (the next ubatch of a call that split its batch: a
//   server's 4 prompts of 300 tokens run 2 or 3 passes in one call).
// - block layer: the layer of the last layer-suffixed node at or before it in its pass
//   (llama.cpp leaves some nodes of a layer unnamed — FLASH_ATTN_EXT, the attention output
//   MatMul — or unsuffixed — Gemma 2's ffn_post_norm); none before the pass's first layer
//   (embeddings) and after its last layer-suffixed node (output norm, LM head).
// - block: attention from the layer's first node to the residual ADD that closes attention
//   (ffn_inp-L; sa_out-L in Gemma 2, after its post-attention norm) inclusive — norm, Q/K/V,
//   RoPE, KV-cache writes, KQ, softmax, KQV, output projection; then moe when the layer (in
//   this pass) has a MUL_MAT_ID node (router, experts, shared expert), else ffn; rest outside
//   the layers. A layer with no such ADD computed is attention whole: in a ubatch that asks
//   for no output llama.cpp computes the last layer's attention and skips the rest.
static std::vector<Block> blocks_of_call(const std::vector<RanNode>& nodes) {
    const size_t n = nodes.size();
    std::vector<int64_t> pass(n);
    std::vector<std::optional<int64_t>> run_layer(n);
    std::map<int64_t, size_t> last_layered;  // per pass: its last layer-suffixed node
    std::optional<int64_t> previous;
    int64_t p = 0;
    for (size_t i = 0; i < n; ++i) {
        if (nodes[i].layer) {
            if (previous && *nodes[i].layer < *previous) ++p;
            previous = nodes[i].layer;
            last_layered[p] = i;
        }
        pass[i] = p;
        run_layer[i] = previous;
    }
    struct Layer {
        std::optional<size_t> split;
        bool moe = false;
    };
    std::map<std::pair<int64_t, int64_t>, Layer> layers;  // (pass, block layer)
    std::vector<Block> out(n, Block{std::nullopt, "rest"});
    for (size_t i = 0; i < n; ++i) {
        const auto last = last_layered.find(pass[i]);
        if (!run_layer[i] || last == last_layered.end() || i > last->second) continue;
        out[i].layer = run_layer[i];
        auto& l = layers[{pass[i], *run_layer[i]}];
        if (nodes[i].closes_attention && nodes[i].layer == run_layer[i] && !l.split) l.split = i;
        l.moe = l.moe || nodes[i].experts;
    }
    for (size_t i = 0; i < n; ++i) {
        if (!out[i].layer) continue;
        const auto& l = layers[{pass[i], *out[i].layer}];
        out[i].name = !l.split || i <= *l.split ? "attention" : l.moe ? "moe" : "ffn";
    }
    return out;
}

void Database::keep_block_times() {
    if (block_times_kept_) return;
    // Read a call at a time: an index lookup where the recording kept node_spans; without it
    // node_times is a window over ops, computed once here first rather than once per call.
    if (!scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'node_spans'")) keep_node_times();
    exec("CREATE TEMP TABLE node_blocks (graph_seq INTEGER NOT NULL, tensor INTEGER NOT NULL, block_layer INTEGER, "
         "block TEXT NOT NULL, PRIMARY KEY (graph_seq, tensor)) WITHOUT ROWID");
    exec("SAVEPOINT node_blocks");
    {
        Statement calls(db_, "SELECT call FROM calls WHERE ops_traced ORDER BY call");
        Statement ran(db_,
                      "SELECT graph_seq, tensor, layer, base IN ('ffn_inp', 'sa_out'), op = 'MUL_MAT_ID' FROM node_times "
                      "WHERE call = ? ORDER BY graph_seq, start_ns, tensor");
        Statement keep(db_, "INSERT INTO temp.node_blocks VALUES (?, ?, ?, ?)");
        std::vector<RanNode> nodes;
        while (calls.step()) {
            nodes.clear();
            ran.reset();
            ran.bind(1, calls.column_int(0));
            while (ran.step()) {
                RanNode r{ran.column_int(0), ran.column_int(1), std::nullopt, ran.column_int(3) != 0, ran.column_int(4) != 0};
                if (!ran.column_is_null(2)) r.layer = ran.column_int(2);
                nodes.push_back(r);
            }
            const auto blocks = blocks_of_call(nodes);
            for (size_t i = 0; i < nodes.size(); ++i) {
                keep.bind(1, nodes[i].graph_seq).bind(2, nodes[i].tensor);
                if (blocks[i].layer)
                    keep.bind(3, *blocks[i].layer);
                else
                    keep.bind_null(3);
                keep.bind(4, std::string(blocks[i].name)).run();
            }
        }
    }
    exec("RELEASE node_blocks");
    exec("CREATE TEMP VIEW block_times AS SELECT t.*, b.block_layer, b.block FROM node_times t "
         "JOIN temp.node_blocks b ON b.graph_seq = t.graph_seq AND b.tensor = t.tensor");
    block_times_kept_ = true;
}

}  // namespace profinfer::store
