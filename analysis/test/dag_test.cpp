// ProfDAG on recordings of each tiny architecture by the real tracer (tests/golden).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "profinfer/dag.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// The committed full-level recordings (tests/golden): no eBPF needed to test the analysis.
fs::path recording(const std::string& card) { return golden_trace(card + "-full"); }

const Node* find(const Dag& d, const std::string& op, const std::string& name) {
    for (const auto& n : d.nodes)
        if (n.op == op && n.name == name) return &n;
    return nullptr;
}

bool edge(const Dag& d, const Node* a, const Node* b) {
    if (!a || !b) return false;
    for (auto [x, y] : d.edges)
        if (x == a->index && y == b->index) return true;
    return false;
}

class DagOf : public ::testing::TestWithParam<const char*> {};

}  // namespace

TEST_P(DagOf, IsAcyclicWithOneProducerPerSource) {
    auto trace_db = open_trace(recording(GetParam()));
    TraceGraphs trace(*trace_db);
    Dag d = Dag::build(trace, trace.default_call());
    ASSERT_GT(d.nodes.size(), 30u);
    EXPECT_TRUE(d.acyclic());
    EXPECT_EQ(d.ambiguous_sources(), 0);
    // Every node but the input embedding lookup consumes some other operator's output.
    int roots = 0;
    std::vector<int> indeg(d.nodes.size());
    for (auto [a, b] : d.edges) ++indeg[b];
    for (size_t i = 0; i < d.nodes.size(); ++i) roots += indeg[i] == 0 && d.nodes[i].op != "GET_ROWS";
    EXPECT_EQ(roots, 0);
    // Times are positive where a kernel ran; the fused partner carries none of its own.
    for (const auto& n : d.nodes) {
        if (n.threads.empty())
            EXPECT_GE(n.fused_with, 0) << n.name;
        else
            EXPECT_GT(n.time_ms(), 0) << n.name;
    }
    // The layer/block filter keeps a connected slice of one layer.
    Dag attn = d.filtered(1, "attn");
    ASSERT_GT(attn.nodes.size(), 5u);
    for (const auto& n : attn.nodes) EXPECT_TRUE(n.layer == 1 || n.layer == -1) << n.name;
    EXPECT_FALSE(attn.edges.empty());
}

// Paper Fig. 3/4: the attention block has the same boundaries in every architecture, from
// the attention norm to the residual ADD closing it (Gemma 2 names it sa_out, after its
// post-attention norm; the others ffn_inp), so Gemma's extra operators show as extra nodes
// rather than as the whole FFN block running on.
TEST(Dag, AttentionBlockRunsFromTheNormToTheResidualAddInEveryArchitecture) {
    std::map<std::string, size_t> size;
    for (const char* card : {"llama3.2-1b", "qwen2.5-1.5b", "gemma2-2b", "qwen1.5-moe-a2.7b"}) {
        SCOPED_TRACE(card);
        auto trace_db = open_trace(recording(card));
        TraceGraphs trace(*trace_db);
        const Dag attn = Dag::build(trace, trace.default_call()).filtered(1, "attn");
        ASSERT_FALSE(attn.nodes.empty());
        EXPECT_EQ(attn.nodes.front().op, "RMS_NORM");
        EXPECT_EQ(attn.nodes.back().op, "ADD");
        EXPECT_EQ(attn.nodes.back().name, std::string(card) == "gemma2-2b" ? "sa_out-1" : "ffn_inp-1");
        for (size_t i = 0; i + 1 < attn.nodes.size(); ++i)  // no FFN node inside
            EXPECT_NE(attn.nodes[i].name.rfind("ffn_", 0), 0u) << attn.nodes[i].name;
        size[card] = attn.nodes.size();
        // The FFN block begins where attention ends.
        const Dag ffn = Dag::build(trace, trace.default_call()).filtered(1, "ffn");
        ASSERT_FALSE(ffn.nodes.empty());
        EXPECT_EQ(ffn.nodes.front().name, attn.nodes.back().name);
    }
    EXPECT_GT(size["gemma2-2b"], size["llama3.2-1b"]);
}

TEST(Dag, Qwen2HasBiasAddsAfterTheQkvMatmuls) {
    auto trace_db = open_trace(recording("qwen2.5-1.5b"));
    TraceGraphs trace(*trace_db);
    Dag d = Dag::build(trace, trace.default_call());
    for (const char* t : {"Qcur-0", "Kcur-0", "Vcur-0"}) {
        SCOPED_TRACE(t);
        EXPECT_TRUE(edge(d, find(d, "MUL_MAT", t), find(d, "ADD", t)));
    }
    auto llama_db = open_trace(recording("llama3.2-1b"));
    TraceGraphs llama(*llama_db);
    Dag l = Dag::build(llama, llama.default_call());
    EXPECT_EQ(find(l, "ADD", "Qcur-0"), nullptr);
    EXPECT_NE(find(l, "MUL_MAT", "Qcur-0"), nullptr);
}

TEST(Dag, WritesDotJsonAndSvg) {
    TempDir d;
    for (const char* out : {"a.dot", "a.json", "a.svg"}) {
        auto r = run({profinfer_bin(), "dag", recording("gemma2-2b"), "--layer", "0", "--block", "ffn", "--color",
                      "bandwidth", "-o", d / out});
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_GT(fs::file_size(d / out), 200u) << out;
    }
    auto j = nlohmann::json::parse(std::ifstream(d / "a.json"));
    bool post_norm = false;
    for (const auto& n : j["nodes"]) post_norm |= n["name"] == "ffn_post_norm";
    EXPECT_TRUE(post_norm);  // gemma2's extra norm is in its FFN block
    auto bad = run({profinfer_bin(), "dag", recording("gemma2-2b"), "-o", d / "a.png"});
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find(".dot, .svg or .json"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Architectures, DagOf,
                         ::testing::Values("llama3.2-1b", "qwen2.5-1.5b", "gemma2-2b", "qwen1.5-moe-a2.7b"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (auto& c : n)
                                 if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                             return n;
                         });

// Every analysis command on a recording of every tiny architecture.
TEST_P(DagOf, EveryAnalysisCommandWorks) {
    TempDir d;
    const fs::path db = recording(GetParam());
    const std::vector<std::vector<std::string>> commands = {
        {"info", db, "--json"},
        {"dag", db, "-o", d / "dag.json"},
        {"timeline", db, "-o", d / "trace.json"},
        {"stat", db, "--by", "op-type"},
        {"stat", db, "--by", "op", "--format", "csv"},
        {"stat", db, "--by", "token", "--format", "json"},
        {"stat", db, "--by", "thread"},
        {"stat", db, "--by", "expert"},
        {"report", db, "-o", d / "report.html", "--machine", d / "none.json"},
    };
    for (auto args : commands) {
        args.insert(args.begin(), profinfer_bin());
        auto r = run(args);
        EXPECT_EQ(r.status, 0) << args[1] << ": " << r.err;
    }
    EXPECT_GT(fs::file_size(d / "dag.json"), 1000u);
    EXPECT_GT(fs::file_size(d / "trace.json"), 10000u);
    EXPECT_GT(fs::file_size(d / "report.html"), 10000u);
}
