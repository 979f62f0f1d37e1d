// The derived quantities against facts that do not depend on how they are derived:
// operator time never exceeds the call it ran in (at every level, every architecture,
// the debug build and the stock release libraries), and a reader that leaves the first calls
// out sees the rest whole; an attached run counts exactly the
// calls it saw; a MatMul's FLOPs and bytes equal a hand computation from its shapes and
// weight type.
#include <gtest/gtest.h>

#include <signal.h>

#include <map>

#include "profinfer/machine_bench.h"
#include "profinfer/roofline.h"
#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "profinfer/trace_graph.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// Four threads on this two-CPU machine, as llama.cpp's default of 4 does on small boards:
// the threads reach each node at different times, which is what made consecutive
// op-level node times overlap.
constexpr const char* kThreads = "4";

struct Case {
    const char* card;
    const char* level;
    bool release;  // the stock @node-llama-cpp/linux-x64 libraries instead of the debug build
};

fs::path record_whole_graphs(const TempDir& d, const Case& c, const char* tokens) {
    const fs::path program = c.release ? graph_dump_release_bin() : graph_dump_bin();
    auto r = run({profinfer_bin(), "record", "--level", c.level, "-o", d / "run.db", "--", program, tiny_model(c.card),
                  "Hello world", tokens, kThreads, "--no-callback"});
    EXPECT_EQ(r.status, 0) << r.err;
    return d / "run.db";
}

class OperatorTime : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(OperatorTime, NeverExceedsItsCall) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const fs::path db_path = record_whole_graphs(d, GetParam(), "12");
    store::Database db(db_path, store::Database::Mode::ReadOnly);
    ASSERT_EQ(db.scalar("SELECT count(*) FROM calls"), 12);
    ASSERT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
    // Every computed kernel has a time.
    EXPECT_EQ(db.scalar("SELECT count(*) FROM node_times"),
              db.scalar("SELECT count(*) FROM (SELECT DISTINCT graph_seq, tensor FROM ops)"));
    EXPECT_EQ(db.scalar("SELECT count(*) FROM node_times WHERE dur_ns < 0"), 0);
    // Per call, through the view and through what every C++ view reads (TraceGraphs).
    EXPECT_EQ(db.scalar("SELECT count(*) FROM calls c WHERE (SELECT coalesce(sum(dur_ns), 0) FROM node_times t "
                        "WHERE t.call = c.call) > c.dur_ns"),
              0);
    auto trace_db = open_trace(db_path);
    TraceGraphs trace(*trace_db);
    for (const auto& call : trace.calls()) {
        double op_ms = 0;
        for (const auto& n : trace.nodes(call.index)) op_ms += n.time_ms();
        EXPECT_GT(op_ms, 0) << "call " << call.index;
        EXPECT_LE(op_ms, (call.end_ns - call.start_ns) / 1e6) << "call " << call.index;
    }
    // Within a graph nodes follow one another without overlapping.
    EXPECT_EQ(db.scalar("SELECT count(*) FROM (SELECT end_ns, lead(start_ns) OVER (PARTITION BY graph_seq "
                        "ORDER BY start_ns, tensor) AS next FROM node_times) WHERE next < end_ns"),
              0);
    // What the raw records would give without the cut: first start to last compute end.
    // At --level op this exceeds the call in most calls (reported, not asserted).
    RecordProperty("calls_where_uncut_node_times_exceed_the_call",
                   std::to_string(db.scalar(
                       "SELECT count(*) FROM calls c WHERE (SELECT sum(e - s) FROM (SELECT min(o.start_ns) AS s, "
                       "max(o.compute_end_ns) AS e FROM ops o JOIN call_graphs g ON g.graph_seq = o.graph_seq "
                       "WHERE g.call = c.call GROUP BY o.graph_seq, o.tensor)) > c.dur_ns")));
    // A reader that leaves the first two calls of each phase out (a run's warm-up:
    // Database::drop_first_calls; a phase of two calls or fewer keeps its last) sees the others,
    // numbered as before, with their graphs and nodes, and nothing of the dropped ones — which
    // are found here by hand from the call list.
    {
        store::Database warm(db_path, store::Database::Mode::ReadOnly);
        std::map<std::string, std::vector<int64_t>> by_phase;
        {
            store::Statement st(warm.handle(), "SELECT phase, call FROM calls ORDER BY call");
            while (st.step()) by_phase[st.column_text(0)].push_back(st.column_int(1));
        }
        std::string dropped;  // "c1, c2, …"
        size_t n_dropped = 0;
        for (const auto& [phase, calls] : by_phase)
            for (size_t i = 0; i < std::min<size_t>(2, calls.size() - 1); ++i)
                dropped += (dropped.empty() ? "" : ", ") + std::to_string(calls[i]), ++n_dropped;
        ASSERT_GT(n_dropped, 0u);
        const std::string in = " WHERE call IN (" + dropped + ")";
        const int64_t calls = warm.scalar("SELECT count(*) FROM calls"), nodes = warm.scalar("SELECT count(*) FROM node_times"),
                      of_dropped = warm.scalar("SELECT count(*) FROM node_times" + in);
        EXPECT_GT(of_dropped, 0);
        warm.drop_first_calls(2);
        EXPECT_EQ(warm.scalar("SELECT count(*) FROM calls"), calls - int64_t(n_dropped));
        EXPECT_EQ(warm.scalar("SELECT count(*) FROM calls" + in), 0);
        EXPECT_EQ(warm.scalar("SELECT count(DISTINCT phase) FROM calls"), int64_t(by_phase.size())) << "a phase went whole";
        EXPECT_EQ(warm.scalar("SELECT count(*) FROM node_times"), nodes - of_dropped);
        EXPECT_EQ(warm.scalar("SELECT count(*) FROM call_graphs" + in), 0);
        EXPECT_EQ(warm.scalar("SELECT count(*) FROM thread_parts" + in), 0);
    }
    // The command line says the same.
    auto r = run({profinfer_bin(), "stat", db_path, "--by", "token", "--format", "json"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const auto& row : nlohmann::json::parse(r.out)) {
        EXPECT_LE(row["op_ms"].get<double>(), row["ms"].get<double>()) << row.dump();
        EXPECT_LE(row["attention_ms"].get<double>(), row["op_ms"].get<double>()) << row.dump();
    }
}

namespace {
class AttachedRun : public ::testing::TestWithParam<Case> {};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    std::string n = std::string(info.param.card) + "_" + info.param.level + (info.param.release ? "_release" : "");
    for (auto& ch : n)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

const auto kEveryCase = ::testing::Values(
    Case{"llama3.2-1b", "op", false}, Case{"llama3.2-1b", "full", false}, Case{"qwen2.5-1.5b", "op", false},
    Case{"qwen2.5-1.5b", "full", false}, Case{"gemma2-2b", "op", false}, Case{"gemma2-2b", "full", false},
    Case{"qwen1.5-moe-a2.7b", "op", false}, Case{"qwen1.5-moe-a2.7b", "full", false}, Case{"llama3.2-1b", "op", true},
    Case{"llama3.2-1b", "full", true});
}  // namespace

// Attached while the target is decoding: the graph in flight when the probes went in,
// and the call it belongs to, are not counted; every call that is counted has all its
// nodes. The nodes per decode call come from llama.cpp's own eval callback.
TEST_P(AttachedRun, CountsExactlyTheCallsItSaw) {
    PROFINFER_REQUIRE_BPF();
    const Case c = GetParam();
    const fs::path program = c.release ? graph_dump_release_bin() : graph_dump_bin();
    TempDir d;
    size_t per_decode_call = 0;
    {
        auto dump = run({program, tiny_model(c.card), "Hello", "3", "2"});
        ASSERT_EQ(dump.status, 0) << dump.err;
        for (const auto& n : parse_graph_dump(dump.out)) per_decode_call += n.call == 1 && n.computed();
        ASSERT_GT(per_decode_call, 20u);
    }
    // A decode longer than any attach, ended by SIGUSR1 (the target stops after the call under
    // way and exits 0) once the recorder has stored enough calls: sized by what was recorded,
    // not by a machine's speed. A fixed 5000 calls took ~6 s here and ~6 min in an emulated
    // board (probes ~10x, floating point ~150x slower), where the whole count was recorded.
    pid_t target = spawn({program, tiny_model(c.card), "Hello", "100000", "2", "--no-callback"}, d / "out");
    ASSERT_TRUE(wait_until([&] { return read_file(d / "out").find("\"call\":2}") != std::string::npos; },
                           std::chrono::seconds(60)));
    // --consumer idle: stored as read, so that the trace shows how many calls are in (op and
    // full hold them by default while the two decode threads fill the CPUs).
    pid_t prof = spawn({profinfer_bin(), "record", "--level", c.level, "--consumer", "idle", "-o", d / "run.db", "--pid",
                        std::to_string(target)},
                       {}, d / "err");
    const bool enough = wait_until(
        [&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") >= 40; }, std::chrono::minutes(10));
    kill(target, SIGUSR1);
    const auto target_status = reap(target, std::chrono::seconds(120));
    const auto status = reap(prof, std::chrono::seconds(120));
    ASSERT_TRUE(enough) << "40 decode calls were not stored in 10 min: " << read_file(d / "err");
    ASSERT_EQ(target_status, 0);
    ASSERT_EQ(status, 0) << read_file(d / "err");
    auto s = RunSummary::load(*open_trace(d / "run.db"));
    EXPECT_EQ(s.prefill_calls, 0);
    ASSERT_GT(s.decode_calls, 20);
    // Calls that began while the operator probes were going in record no operator, and say
    // so (ops_untraced); every other call has all its nodes.
    const int64_t with_ops = s.decode_calls - s.ops_untraced_calls;
    EXPECT_GT(with_ops, 20);
    EXPECT_EQ(s.operators, with_ops * int64_t(per_decode_call));
    if (s.operators != with_ops * int64_t(per_decode_call)) {
        // Which calls are short, and where they sit in the run: what a rare miss needs to be found.
        store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
        const int64_t calls = db.scalar("SELECT count(*) FROM calls");
        store::Statement st(db.handle(),
                            "SELECT c.call, count(n.tensor), (SELECT count(*) FROM call_graphs g WHERE g.call = c.call), "
                            "c.dur_ns FROM calls c LEFT JOIN call_nodes n ON n.call = c.call WHERE c.ops_traced GROUP BY "
                            "c.call HAVING count(n.tensor) != ? LIMIT 20");
        st.bind(1, int64_t(per_decode_call));
        while (st.step())
            ADD_FAILURE() << "call " << st.column_int(0) << " of " << calls << ": " << st.column_int(1) << " nodes (not "
                          << per_decode_call << ") in " << st.column_int(2) << " graphs, " << st.column_int(3) / 1000
                          << " us; meta: " << nlohmann::json(db.meta().all()).dump();
    }
    EXPECT_FALSE(s.ttft_ms.has_value());  // no prefill was recorded
    EXPECT_EQ(s.thread_slots, 2);
    // Statistics count the same nodes.
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM call_nodes"), s.operators);
    auto t = run({profinfer_bin(), "stat", d / "run.db", "--by", "op-type", "--format", "json"});
    ASSERT_EQ(t.status, 0) << t.err;
    int64_t counted = 0;
    for (const auto& row : nlohmann::json::parse(t.out)) counted += row["count"].get<int64_t>();
    EXPECT_EQ(counted, db.scalar("SELECT count(*) FROM node_times"));
    RecordProperty("nodes_outside_calls", std::to_string(s.outside_calls));
}

INSTANTIATE_TEST_SUITE_P(Architectures, AttachedRun, kEveryCase, case_name);
INSTANTIATE_TEST_SUITE_P(Architectures, OperatorTime, kEveryCase, case_name);

namespace {

// Bytes of N elements of a weight type, by hand from ggml's block formats: f32 4 bytes,
// f16/bf16 2, q8_0 32 elements in 34 bytes (f16 scale + 32 int8), q4_0 32 in 18 (f16
// scale + 16 bytes of nibbles), q4_1 32 in 20 (f16 scale and min + nibbles).
double hand_bytes(const std::string& type, double n) {
    static const std::map<std::string, std::pair<double, double>> per_block = {
        {"f32", {1, 4}}, {"f16", {1, 2}}, {"bf16", {1, 2}}, {"q8_0", {32, 34}}, {"q4_0", {32, 18}}, {"q4_1", {32, 20}}};
    auto [elems, bytes] = per_block.at(type);
    return n / elems * bytes;
}

class MatMulByWeightType : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

}  // namespace

TEST_P(MatMulByWeightType, FlopsAndBytesMatchAHandComputation) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const std::string type = std::get<0>(GetParam());
    const fs::path program = std::get<1>(GetParam()) ? graph_dump_release_bin() : graph_dump_bin();
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", program,
                  tiny_model("llama3.2-1b", type), "Hello", "4", "2", "--no-callback"});
    ASSERT_EQ(r.status, 0) << r.err;
    // The FFN up projection: weight [K, M] of TYPE times the f32 activations [K, 1].
    int64_t K = 0, M = 0, N = 0;
    {
        store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
        store::Statement st(db.handle(),
                            "SELECT s0.ne0, s0.ne1, s1.ne1 FROM nodes n JOIN node_srcs s0 ON s0.node_id = n.id AND s0.slot = 0 "
                            "JOIN node_srcs s1 ON s1.node_id = n.id AND s1.slot = 1 JOIN graphs g ON g.seq = n.graph_seq "
                            "WHERE n.op = 'MUL_MAT' AND n.name = 'ffn_up-0' ORDER BY g.start_ns DESC LIMIT 1");
        ASSERT_TRUE(st.step()) << "no ffn_up-0 MatMul recorded";
        K = st.column_int(0), M = st.column_int(1), N = st.column_int(2);
    }
    ASSERT_EQ(N, 1);  // a decode call
    // Bandwidth no operator approaches, and a different peak per kind of arithmetic: the
    // roof of the MatMul is the peak of its weight type's kind.
    MachineBench machine;
    const std::map<std::string, double> peaks = {{"f32", 11}, {"f16", 22}, {"bf16", 33}, {"int8", 44}};
    machine.roofs = {{1, 1e9, 11, peaks}, {64, 1e9, 11, peaks}};
    const std::string kind = type == "f32" || type == "f16" || type == "bf16" ? type : "int8";
    bool found = false;
    for (const auto& row : roofline_table(*open_trace(d / "run.db"), machine).to_json()) {
        if (row["name"] != "ffn_up" || row["op"] != "MUL_MAT") continue;
        found = true;
        const double flops = 2.0 * K * M * N;
        const double bytes = hand_bytes(type, double(K) * M) + 4.0 * K * N + 4.0 * M * N;  // weight, src1 f32, dst f32
        EXPECT_DOUBLE_EQ(row["flops"].get<double>(), flops) << row.dump();
        EXPECT_DOUBLE_EQ(row["bytes"].get<double>(), bytes) << row.dump();
        EXPECT_NEAR(row["flops_per_byte"].get<double>(), flops / bytes, 1e-12) << row.dump();
        EXPECT_EQ(row["roof_kind"], kind) << row.dump();
        EXPECT_DOUBLE_EQ(row["roof_gflops"].get<double>(), peaks.at(kind)) << row.dump();
    }
    EXPECT_TRUE(found);
}

INSTANTIATE_TEST_SUITE_P(Types, MatMulByWeightType,
                         ::testing::Combine(::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_release" : "");
                         });
