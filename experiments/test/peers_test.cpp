// The overhead study's peers (experiments/peers/): llama.cpp's eval callback and
// ggml_graph_dump_dot (evalcb_peer), and ONNX Runtime's profiler (ort_peer.js on the
// LLaMA-shaped ONNX model of ort_model.py). What the study's Table 7 rests on.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "test_support.h"

using namespace profinfer::test;
namespace fs = std::filesystem;

namespace {
nlohmann::json last_json_line(const std::string& out) {
    std::istringstream in(out);
    std::string line, last;
    while (std::getline(in, line))
        if (!line.empty() && line[0] == '{') last = line;
    return nlohmann::json::parse(last);
}
}  // namespace

// Every node of every decode call is timed, in order, without overlap (each node is a graph
// of its own); the dump of one graph holds a record per node.
TEST(Peers, EvalCallbackTimesEveryNodeOfEveryCall) {
    TempDir d;
    const auto csv = d / "nodes.csv";
    auto r = run({EVALCB_PEER_BIN, tiny_model("llama3.2-1b").string(), "--mode", "callback", "--tokens", "5",
                  "--nodes-csv", csv.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = last_json_line(r.out);
    EXPECT_EQ(j["tokens"], 5);
    EXPECT_GT(j["decode_tps"].get<double>(), 0);
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "call,index,name,op,start_ns,end_ns");
    std::map<int, int> per_call;
    long long last_end = 0;
    int rows = 0;
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
        ASSERT_EQ(f.size(), 6u) << line;
        const long long start = std::stoll(f[4]), end = std::stoll(f[5]);
        EXPECT_LE(start, end) << line;
        EXPECT_GE(start, last_end) << line;  // sequential
        last_end = end;
        ++per_call[std::stoi(f[0])];
        ++rows;
    }
    EXPECT_EQ(rows, j["nodes"].get<int>());
    ASSERT_EQ(per_call.size(), 5u);
    for (auto [call, n] : per_call) EXPECT_EQ(n, per_call.begin()->second) << "call " << call;

    const auto dot = d / "graph.dot";
    r = run({EVALCB_PEER_BIN, tiny_model("llama3.2-1b").string(), "--mode", "dump-dot", "--tokens", "4", "--dot",
             dot.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    j = last_json_line(r.out);
    const std::string text = read_file(dot);
    size_t records = 0;
    for (size_t p = text.find("shape = record"); p != std::string::npos; p = text.find("shape = record", p + 1)) ++records;
    EXPECT_GE(records, size_t(j["graph_nodes"].get<int>()));  // nodes, plus the leaves
    EXPECT_GE(j["graph_nodes"].get<int>(), per_call.begin()->second);
    EXPECT_GT(j["dump_dot_ms"].get<double>(), 0);
}

// ORT's profiler records operators on one thread only, whatever intraOpNumThreads is.
TEST(Peers, OnnxRuntimeProfilerRecordsOperatorsOnOneThread) {
    TempDir d;
    const auto model = d / "tiny.onnx";
    auto b = run({"/usr/bin/python3", PROFINFER_SOURCE_DIR "/experiments/peers/ort_model.py", "--card",
                  PROFINFER_SOURCE_DIR "/models/cards/llama3.2-1b.toml", "--tiny", "-o", model.string()});
    ASSERT_EQ(b.status, 0) << b.err;
    auto np = run({PROFINFER_SOURCE_DIR "/scripts/ort.sh", "node-path"});
    ASSERT_EQ(np.status, 0) << np.err;
    std::string node_path = np.out.substr(0, np.out.find('\n'));
    auto r = run({"node", PROFINFER_SOURCE_DIR "/experiments/peers/ort_peer.js", model.string(), "--profile", "--threads",
                  "2", "--tokens", "6", "--prompt", "8"},
                 {{"NODE_PATH", node_path}});
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = last_json_line(r.out);
    EXPECT_EQ(j["profiled_threads"], 1);
    // warm-up + prefill + 6 decode runs, the same operators each time
    EXPECT_GT(j["profiled_operator_events"].get<int>(), 0);
    EXPECT_EQ(j["profiled_operator_events"].get<int>() % 8, 0) << j.dump();
    auto plain = run({"node", PROFINFER_SOURCE_DIR "/experiments/peers/ort_peer.js", model.string(), "--tokens", "3"},
                     {{"NODE_PATH", node_path}});
    ASSERT_EQ(plain.status, 0) << plain.err;
    EXPECT_FALSE(last_json_line(plain.out).contains("profiled_threads"));
}

// The serving study's peer: llama-server on a synthesised model under its load. Random
// weights pick lone bytes >= 0x80 of the synthetic vocabulary, which are no UTF-8: the
// server failed such a request (HTTP 500, "does not match the expected Content-only
// format") — one of 16 in every run of the study on a tiny model. The peer bans those tokens,
// so every request is answered; a failure names the request and the server's words.
TEST(Peers, ServePeerAnswersEveryRequestOfARandomModel) {
    auto r = run({"python3", PROFINFER_SOURCE_DIR "/experiments/peers/serve_peer.py",
                  llama_debug().program("llama-server").string(), tiny_model("llama3.2-1b", "q4_0").string(), "--threads",
                  "2", "--clients", "2", "--requests", "32", "--predict", "16,32"});
    EXPECT_EQ(r.status, 0) << r.err;
    auto j = last_json_line(r.out);
    EXPECT_EQ(j["requests"], 32);
    EXPECT_EQ(j["failed"], 0) << r.err;
    EXPECT_GT(j["serve_tps"].get<double>(), 0);
    // Its decode share: a share of the server's own time, between prompt and decode.
    ASSERT_TRUE(j["decode_share_pct"].is_number()) << r.out;
    EXPECT_GT(j["decode_share_pct"].get<double>(), 0);
    EXPECT_LT(j["decode_share_pct"].get<double>(), 100);
}

// A load of fixed length (experiments/server_bounded.sh: a million requests, sent for
// --duration seconds): requests go out from its start. The generator made every prompt
// first, seconds of work: with a short duration nothing was ever sent.
TEST(Peers, ALoadOfFixedLengthSendsFromItsStart) {
    TempDir d;
    LlamaServer server(d.path(), tiny_model("llama3.2-1b"), 2, 2048);
    ASSERT_TRUE(server.listening()) << server.log();
    auto r = run({"python3", PROFINFER_SOURCE_DIR "/experiments/server_load.py", "--url", server.url(), "--clients", "2",
                  "--requests", "1000000", "--predict", "4,8", "--duration", "2", "--synthetic-vocab", "-o",
                  (d / "load.jsonl").string()});
    server.stop();
    EXPECT_EQ(r.status, 0) << r.err;
    const std::string rows = read_file(d / "load.jsonl");
    EXPECT_GE(std::count(rows.begin(), rows.end(), '\n'), 1) << r.err;
    EXPECT_EQ(rows.find("\"error\": \""), std::string::npos) << rows.substr(0, 2000);
}
