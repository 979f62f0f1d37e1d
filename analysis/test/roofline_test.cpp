// Roofline verdicts from a real recording against machines with known roofs.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "profinfer/dag.h"
#include "profinfer/ggml_types.h"
#include "profinfer/roofline.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {
fs::path recording() { return golden_trace("llama3.2-1b-full"); }
MachineBench machine(double gbs, double gflops) {
    MachineBench m;
    m.roofs = {{1, gbs, gflops}, {64, gbs, gflops}};
    return m;
}
std::set<std::string> verdicts(const Table& t, const char* op = nullptr) {
    std::set<std::string> v;
    for (const auto& r : t.rows)
        if (!op || r[1] == op) v.insert(r.back().get<std::string>());  // verdict: the last column
    return v;
}
}  // namespace

TEST(Roofline, MatMulFlopsFromShapes) {
    auto trace_db = open_trace(recording());
    TraceGraphs trace(*trace_db);
    int checked = 0;
    for (const auto& n : trace.nodes(trace.default_call()))
        if (n.op == "MUL_MAT") {
            // dst [M, N]: 2·K·M·N with K the shared dimension of src0 [K, M] and src1 [K, N]
            ASSERT_GE(n.srcs.size(), 2u);
            EXPECT_EQ(n.srcs[0].ne[0], n.srcs[1].ne[0]) << n.name;
            EXPECT_DOUBLE_EQ(node_flops(n), 2.0 * n.srcs[0].ne[0] * n.srcs[0].ne[1] * n.srcs[1].ne[1] * n.srcs[1].ne[2]) << n.name;
            EXPECT_GT(n.bytes(), 0u);
            ++checked;
        }
    EXPECT_GE(checked, 7);  // per layer: q, k, v, out, gate, up, down; plus the output head
}

// Bytes are what an operator moves, counted by hand from the shapes on every golden
// architecture's decode step: GET_ROWS the rows it gathers (not the embedding table),
// SET_ROWS the rows it writes (not the KV cache it writes into), MUL_MAT_ID the experts one
// token uses (not all of them), views nothing; everything else its sources and destination.
TEST(Roofline, BytesAreWhatTheOperatorMoves) {
    auto row_bytes = [](int type, int64_t elems) { return double(ggml_bytes(uint32_t(type), uint64_t(elems))); };
    auto all = [&](const SourceRef& s) { return row_bytes(s.type, s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3]); };
    std::map<std::string, int> seen;
    for (const char* arch : {"llama3.2-1b-full", "qwen2.5-1.5b-full", "gemma2-2b-full", "qwen1.5-moe-a2.7b-full"}) {
        auto trace_db = open_trace(golden_trace(arch));
        TraceGraphs trace(*trace_db);
        for (const auto& n : trace.nodes(trace.default_call())) {
            const double dst = row_bytes(n.type, n.ne[0] * n.ne[1] * n.ne[2] * n.ne[3]);
            const Traffic t = n.traffic();
            if (n.op == "GET_ROWS") {
                // dst [ne0, rows]: as many rows read from the table, plus the row ids.
                EXPECT_EQ(double(t.bytes), row_bytes(n.srcs[0].type, n.ne[0] * n.ne[1] * n.ne[2]) + all(n.srcs[1]) + dst) << n.name;
                if (n.name == "embd") {
                    EXPECT_LT(double(t.bytes), all(n.srcs[0])) << "the whole embedding table";
                }
            } else if (n.op == "SET_ROWS") {
                EXPECT_EQ(double(t.bytes), all(n.srcs[0]) + all(n.srcs[1]) + row_bytes(n.type, n.srcs[0].ne[0] * n.srcs[0].ne[1]))
                    << n.name;
                EXPECT_LT(double(t.bytes), dst) << n.name << ": the KV cache it writes into";
            } else if (n.op == "MUL_MAT_ID") {
                ASSERT_EQ(n.ne[2], 1) << "a decode step has one token";
                const auto& w = n.srcs[0];  // [K, M, experts]; dst [M, used, tokens]
                EXPECT_EQ(double(t.bytes), row_bytes(w.type, w.ne[0] * w.ne[1] * n.ne[1]) + all(n.srcs[1]) + all(n.srcs[2]) + dst)
                    << n.name;
                EXPECT_LT(n.ne[1], w.ne[2]);
            } else if (n.op == "VIEW" || n.op == "RESHAPE" || n.op == "PERMUTE" || n.op == "TRANSPOSE") {
                EXPECT_EQ(t.bytes, 0u) << n.name;
            } else {
                double b = dst;
                for (const auto& s : n.srcs) b += s.type >= 0 ? all(s) : 0;
                EXPECT_EQ(double(t.bytes), b) << n.name;
            }
            EXPECT_FALSE(t.estimate) << n.op << " " << n.name << ": one token's bytes are known";
            ++seen[n.op];
        }
    }
    for (const char* op : {"GET_ROWS", "SET_ROWS", "MUL_MAT_ID", "MUL_MAT"}) EXPECT_GT(seen[op], 0) << op;
    // A prompt of several tokens: which experts they share is not in the shapes, so
    // MUL_MAT_ID's bytes are an upper bound, and say so (the last layer's see one token: llama.cpp
    // computes only the last token's output there — exact again).
    auto moe_db = open_trace(golden_trace("qwen1.5-moe-a2.7b-full"));
    TraceGraphs moe(*moe_db);
    int prompt_ids = 0;
    for (const auto& c : moe.calls())
        if (c.n_tokens > 1)
            for (const auto& n : moe.nodes(c.index))
                if (n.op == "MUL_MAT_ID") {
                    EXPECT_EQ(n.traffic().estimate, n.ne[2] * n.ne[3] > 1) << n.name;
                    prompt_ids += n.ne[2] * n.ne[3] > 1;
                }
    EXPECT_GT(prompt_ids, 0);
}

TEST(Roofline, VerdictsFollowTheMachine) {
    // Roofs no operator can approach: everything is overhead.
    EXPECT_EQ(verdicts(roofline_table(*open_trace(recording()), machine(1e9, 1e9))), std::set<std::string>{"overhead-dominated"});
    // Tiny bandwidth, huge peak: anything that moves data is memory-bound.
    EXPECT_EQ(verdicts(roofline_table(*open_trace(recording()), machine(1e-6, 1e6)), "MUL_MAT"), std::set<std::string>{"memory-bound"});
    // Huge bandwidth, tiny peak: arithmetic is the limit.
    EXPECT_EQ(verdicts(roofline_table(*open_trace(recording()), machine(1e6, 1e-6)), "MUL_MAT"), std::set<std::string>{"compute-bound"});
}

TEST(Roofline, BenchMachineWritesRoofsAndStatUsesThem) {
    TempDir d;
    auto b = run({profinfer_bin(), "bench-machine", "--quick", "--threads", "1", "-o", d / "m.json"});
    ASSERT_EQ(b.status, 0) << b.err;
    auto m = MachineBench::load(d / "m.json");
    ASSERT_EQ(m.roofs.size(), 1u);
    // Rates were measured (not what they are: an emulated arm64 build under qemu-user
    // reaches 0.4 G ops/s, real machines hundreds).
    EXPECT_GT(m.roofs[0].triad_gbs, 0.01);
    EXPECT_GT(m.roofs[0].peak_gflops, 0.01);
    // A peak per kind of arithmetic, f32 among them, each on the widest unit it names.
    EXPECT_EQ(m.roofs[0].peak_gops.at("f32"), m.roofs[0].peak_gflops);
    for (const auto& [kind, g] : m.roofs[0].peak_gops) EXPECT_GT(g, 0.01) << kind;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        EXPECT_EQ(m.roofs[0].peak_gops.count("int8"), 1u);
    }
    if (__builtin_cpu_supports("avx512f")) {
        EXPECT_NE(m.isa.find("f32: avx512f"), std::string::npos) << m.isa;
    }
#endif
    auto s = run({profinfer_bin(), "stat", recording(), "--by", "roofline", "--machine", d / "m.json", "--format", "json"});
    ASSERT_EQ(s.status, 0) << s.err;
    auto j = nlohmann::json::parse(s.out);
    ASSERT_FALSE(j.empty());
    for (const auto& r : j) {
        const std::string v = r["verdict"];
        EXPECT_TRUE(v == "memory-bound" || v == "compute-bound" || v == "overhead-dominated") << v;
    }
    auto missing = run({profinfer_bin(), "stat", recording(), "--by", "roofline", "--machine", d / "none.json"});
    EXPECT_NE(missing.status, 0);
    EXPECT_NE(missing.err.find("bench-machine"), std::string::npos) << missing.err;
}

// On a board with a DRAM counter (l3d_cache_refill, 64 B per event) the roofline also
// reports measured traffic. No PMU here: a software counter recorded in its slot stands in,
// relabelled as the board's counter — the analysis only reads the database.
TEST(Roofline, CounterTrafficFromADramCounter) {
    PROFINFER_REQUIRE_BPF();  // it records the trace it reads
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "--counters", "minor-faults", "-o", d / "c.db", "--",
                  llama_debug().program("llama-simple"), "-m", tiny_model("llama3.2-1b"), "-n", "8", "Hello"});
    ASSERT_EQ(r.status, 0) << r.err;
    r = run({"sqlite3", d / "c.db", "UPDATE counters SET name = 'l3d_cache_refill' WHERE idx = 0"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto t = roofline_table(*open_trace(d / "c.db"), machine(10, 10));
    auto trace_db = open_trace(d / "c.db");
    TraceGraphs trace(*trace_db);
    // Expected for the first row's operator: Σ counter × 64 B over its decode-call nodes / Σ time.
    const auto rows = t.to_json();
    const std::string name = rows.at(0)["name"], op = rows.at(0)["op"];
    double bytes = 0, seconds = 0;
    bool known = true;
    for (const auto& c : trace.calls()) {
        if (c.phase != "decode") continue;
        for (const auto& n : trace.nodes(c.index)) {
            if (n.threads.empty() || n.base != name || n.op != op) continue;
            auto v = n.counter(0);
            known &= v.has_value();
            bytes += v.value_or(0) * 64.0;
            seconds += n.time_ms() / 1e3;
        }
    }
    const auto& counter_gbs = rows.at(0)["counter_gbs"];
    if (known) {
        ASSERT_TRUE(counter_gbs.is_number());
        EXPECT_NEAR(counter_gbs.get<double>(), bytes / seconds / 1e9, 1e-9);
    } else {
        EXPECT_TRUE(counter_gbs.is_null());
    }
    // Without such a counter the column stays empty.
    for (const auto& row : roofline_table(*open_trace(recording()), machine(10, 10)).to_json()) EXPECT_TRUE(row["counter_gbs"].is_null());
}
