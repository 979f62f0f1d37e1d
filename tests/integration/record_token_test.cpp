// profinfer record on the real llama.cpp: token level, launch mode.
#include <array>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

TEST(RecordToken, LlamaSimpleSixteenTokens) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "run.db", "--", llama_debug().program("llama-simple"), "-m",
                  tiny_model("llama3.2-1b"), "-n", "16", "Hello world"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto s = RunSummary::load(*open_trace(d / "run.db"));
    EXPECT_EQ(s.meta[store::MetaKey::Status], "complete");
    EXPECT_EQ(s.prefill_calls, 1);
    EXPECT_EQ(s.decode_calls, 15);
    EXPECT_TRUE(s.health.losses.empty());
    EXPECT_TRUE(s.missing_probes.empty());
    EXPECT_GT(s.ttft_ms.value_or(0), 0);
    EXPECT_GT(s.median_tpot_ms.value_or(0), 0);

    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode' AND n_tokens = 1"), 15);
    EXPECT_GT(db.scalar("SELECT n_tokens FROM calls WHERE phase = 'prefill'"), 1);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens WHERE end_ns <= start_ns OR ret != 0"), 0);
    // Calls do not overlap and come in order.
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens a JOIN tokens b ON b.id = a.id + 1 WHERE b.start_ns < a.end_ns"), 0);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM libraries WHERE role = 'libllama' AND length(build_id) = 40"), 1);

    auto info = run({profinfer_bin(), "info", "--json", d / "run.db"});
    ASSERT_EQ(info.status, 0) << info.err;
    auto j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["decode_calls"], 15);
    EXPECT_EQ(j["prefill_calls"], 1);
    EXPECT_EQ(j["lost_events"], 0);
}

TEST(RecordToken, NonLlamaProcessFailsClearly) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "run.db", "--", "/bin/true"});
    expect_one_line_failure(r, "never loaded libllama");
    // Nothing was recorded, so nothing is left that would block a retry with the same -o.
    EXPECT_FALSE(fs::exists(d / "run.db"));
    EXPECT_FALSE(fs::exists(d / "run.db-wal"));
}

TEST(RecordToken, WrongPidAndMissingCommandFailClearly) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "a.db", "--pid", "999999999"});
    expect_one_line_failure(r, "no process with pid 999999999");

    r = run({profinfer_bin(), "record", "-o", d / "b.db", "--", "/no/such/program"});
    expect_one_line_failure(r, "cannot run /no/such/program");
}

TEST(RecordToken, RefusesToOverwriteADatabase) {
    TempDir d;
    { store::Database db(d / "x.db", store::Database::Mode::Create); }
    auto r = run({profinfer_bin(), "record", "-o", d / "x.db", "--", "/bin/true"});
    EXPECT_NE(r.status, 0);
    expect_one_line_failure(r, "already exists");
    // An empty file and a symlink, dangling or not, are refused alike: never followed.
    std::ofstream(d / "empty.db").close();
    expect_one_line_failure(run({profinfer_bin(), "record", "-o", d / "empty.db", "--", "/bin/true"}), "already exists");
    fs::create_symlink(d / "elsewhere.db", d / "dangling.db");
    expect_one_line_failure(run({profinfer_bin(), "record", "-o", d / "dangling.db", "--", "/bin/true"}),
                            "already exists (as a symlink)");
    EXPECT_FALSE(fs::exists(d / "elsewhere.db"));
}

// Each token of a batch is read in a loop: by bpf_loop (5.17 on), whose callback the verifier
// checks once, or, on older kernels, unrolled — a bounded loop the verifier walks once per
// possible token (0.7 s of CPU at every start on Linux 6.18). Both record the same rows for the
// same run (llama-parallel's batches are fixed by its seed).
TEST(RecordToken, BatchesReadByBpfLoopAndUnrolledAgree) {
    PROFINFER_REQUIRE_BPF();
    auto rows = [](const std::string& features) {
        TempDir d;
        auto r = run({profinfer_bin(), "record", "--level", "token", "-o", d / "run.db", "--",
                      llama_debug().program("llama-parallel"), "-m", tiny_model("llama3.2-1b"), "-np", "4", "-ns", "8",
                      "-n", "12", "-t", "2", "--seed", "7"},
                     {{"PROFINFER_KERNEL_FEATURES", features}});
        EXPECT_EQ(r.status, 0) << r.err;
        store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
        std::vector<std::array<int64_t, 4>> out;
        store::Statement st(db.handle(), "SELECT seq, pos, n_tokens, outputs FROM batch_seqs ORDER BY token_id, seq, pos");
        while (st.step()) out.push_back({st.column_int(0), st.column_int(1), st.column_int(2), st.column_int(3)});
        return std::pair{out, db.meta()[store::MetaKey::KernelFallbacks]};
    };
    const auto [unrolled, old_fallbacks] = rows("old");
    const auto [looped, fallbacks] = rows("probe");
    EXPECT_NE(old_fallbacks.find("loop"), std::string::npos);
    if (fallbacks.find("loop") != std::string::npos) GTEST_SKIP() << "this kernel has no bpf_loop: one path only";
    EXPECT_GE(looped.size(), 8u);  // every request's prompt at least
    EXPECT_EQ(looped, unrolled);
}

// Requests from batches (stat --by request): llama.cpp's own parallel-clients example serves
// 8 requests from 4 sequences in shared batches (continuous batching) and prints, per
// request, its client, its prompt tokens and its decoded tokens. Each appears once, with the
// prompt it printed exactly; its generated (sampled) tokens are the ones it decoded plus the
// last, which ends it undecoded. Operator time apportioned to requests adds up to the
// operator time of the calls that served them. A program without sequence ids (llama-simple,
// llama_batch_get_one) has no requests.
TEST(RecordToken, RequestsOfParallelClientsMatchTheirOwnCounts) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", llama_debug().program("llama-parallel"),
                  "-m", tiny_model("llama3.2-1b"), "-np", "4", "-ns", "8", "-n", "12", "-t", "2", "--seed", "7"});
    ASSERT_EQ(r.status, 0) << r.err;
    // Each request's start: "Client   0, seq    4, junk =    0, prompt = 1585, started decoding"
    // and end: "Client   2, seq   6/  8, prompt 1575 t, response   12 t, ..." (ANSI colours
    // around). The example's asynchronous log can lose its last lines at exit (so can it
    // untraced: 4 of 8 end lines printed once in 3 plain runs here); the starts come seconds
    // before the end and every one must be there.
    std::map<int, std::vector<int>> started;                  // client → prompts in order
    std::map<int, std::vector<std::pair<int, int>>> ended;    // client → (prompt, response)
    std::regex start(R"(Client\s+(\d+), seq\s+\d+, junk =\s+\d+, prompt = (\d+), started decoding)");
    std::regex end(R"(Client\s+(\d+), seq\s+\d+/\s*\d+, prompt\s+(\d+) t, response\s+(\d+) t)");
    int n_started = 0, n_ended = 0;
    for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), start); it != std::sregex_iterator(); ++it, ++n_started)
        started[std::stoi((*it)[1])].push_back(std::stoi((*it)[2]));
    for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), end); it != std::sregex_iterator(); ++it, ++n_ended)
        ended[std::stoi((*it)[1])].push_back({std::stoi((*it)[2]), std::stoi((*it)[3])});
    ASSERT_EQ(n_started, 8) << r.err;
    ASSERT_GE(n_ended, 4) << r.err;

    auto stat = run({profinfer_bin(), "stat", d / "run.db", "--by", "request", "--format", "json"});
    ASSERT_EQ(stat.status, 0) << stat.err;
    auto rows = nlohmann::json::parse(stat.out);
    ASSERT_EQ(rows.size(), 8u) << stat.out;
    std::map<int, size_t> seen;  // client → requests matched so far
    double op_ms = 0;
    int responses_compared = 0;
    for (const auto& q : rows) {
        const int client = q["seq"].get<int>() - 1;  // the example gives client c sequence c + 1
        ASSERT_TRUE(started.count(client)) << q.dump();
        const size_t k = seen[client]++;
        ASSERT_LT(k, started[client].size()) << q.dump();
        EXPECT_EQ(q["prompt_tokens"].get<int>(), started[client][k]) << q.dump();
        if (k < ended[client].size()) {
            EXPECT_EQ(q["prompt_tokens"].get<int>(), ended[client][k].first) << q.dump();
            EXPECT_EQ(q["generated"].get<int>(), ended[client][k].second + 1) << q.dump();
            ++responses_compared;
        }
        EXPECT_GT(q["ttft_ms"].get<double>(), 0) << q.dump();
        EXPECT_GT(q["decode_ms"].get<double>(), 0) << q.dump();
        EXPECT_GT(q["tpot_median_ms"].get<double>(), 0) << q.dump();
        op_ms += q["op_ms"].get<double>();
    }
    EXPECT_EQ(responses_compared, n_ended);
    // The timeline: a track per sequence, each request a slice with its prompt and decode inside.
    auto tl = run({profinfer_bin(), "timeline", d / "run.db", "-o", d / "trace.json"});
    ASSERT_EQ(tl.status, 0) << tl.err;
    auto trace = nlohmann::json::parse(read_file(d / "trace.json"));
    const auto& events = trace.is_object() ? trace["traceEvents"] : trace;
    std::map<std::string, int> parts;
    std::set<int64_t> tracks;
    for (const auto& e : events)
        if (e.value("cat", "") == "request") {
            const std::string name = e["name"];
            ++parts[name.rfind("request ", 0) == 0 ? "request" : name];
            tracks.insert(e["tid"].get<int64_t>());
        }
    EXPECT_EQ(parts["request"], 8);
    EXPECT_EQ(parts["prompt"], 8);
    EXPECT_EQ(parts["decode"], 8);
    EXPECT_EQ(tracks.size(), 4u);

    // Its calls hold up to 2048 tokens, computed as 4 ubatches: 4 passes over the layers in
    // one call, the last layer of a ubatch without outputs cut after its attention; each node
    // in its own layer's block (FLASH_ATTN_EXT went to the FFN of the first pass while blocks
    // were split per call).
    expect_blocks_tile_each_call(d / "run.db", 2, false, "llama-parallel");
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    const double served_ms = db.scalar("SELECT sum(dur_ns) FROM node_times WHERE call IN (SELECT call FROM request_calls)") / 1e6;
    EXPECT_NEAR(op_ms, served_ms, served_ms * 1e-6 + 0.01);

    TempDir s;
    auto simple = run({profinfer_bin(), "record", "-o", s / "run.db", "--", llama_debug().program("llama-simple"), "-m",
                       tiny_model("llama3.2-1b"), "-n", "4", "Hello world"});
    ASSERT_EQ(simple.status, 0) << simple.err;
    EXPECT_EQ(scalar_or_zero(s / "run.db", "SELECT count(*) FROM batch_seqs"), 0);
    EXPECT_EQ(scalar_or_zero(s / "run.db", "SELECT count(*) FROM calls"), 4);
    auto none = run({profinfer_bin(), "stat", s / "run.db", "--by", "request"});
    EXPECT_EQ(none.status, 0) << none.err;
    EXPECT_NE(none.err.find("no requests: this recording's llama_decode batches carry no sequence ids"), std::string::npos)
        << none.err;
}

// llama-server under concurrent requests (issue: profile a live server): 4 clients, the
// recorder attached mid-load until it has seen enough answers. Every request sent after the
// recording began and answered before it ended appears in stat --by request with the
// prompt and generated tokens the server itself reports (timings.prompt_n, predicted_n)
// — compared as multisets, as the server's requests carry no sequence id — and no request
// fails (--synthetic-vocab: a lone byte of the synthetic vocabulary, which batching can make
// the argmax, fails a request in the server). Both clocks are CLOCK_MONOTONIC (the load generator's and the probes').
TEST(RecordToken, ServerRequestsMatchTheServersOwnTimings) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    LlamaServer server(d.path(), tiny_model("llama3.2-1b"), 4, 4096);
    ASSERT_TRUE(server.listening()) << server.log();
    const std::string load = std::string(PROFINFER_SOURCE_DIR) + "/experiments/server_load.py";
    pid_t client = spawn({"python3", load, "--url", server.url(), "--clients", "4",
                          "--requests", "1000", "--predict", "8,32", "--seed", "5", "--think-ms", "750", "--synthetic-vocab",
                          "--stop-file", (d / "enough").string(), "-o", (d / "load.jsonl").string()},
                         {}, d / "load.err");
    auto answers = [&] {
        const std::string done = read_file(d / "load.jsonl");
        return std::count(done.begin(), done.end(), '\n');
    };
    // Mid-load: a few answers in. Each client waits 750 ms between its requests; the load goes
    // on until the test has what it compares (the stop file).
    ASSERT_TRUE(wait_until([&] { return answers() >= 4; }, std::chrono::seconds(120)));
    // Recorded from its first stored call until 20 more answers came (at least 8 of them sent
    // and answered inside the recording, those in flight at either end aside), then stopped as
    // a user stops an attach; the load stops sending then. A fixed 20-s recording held 6 of
    // them beside another virtual board, and counting answers from the recorder's start left 4
    // in a 5.10 board (attaching takes seconds there).
    pid_t rec = spawn({profinfer_bin(), "record", "--level", "op", "--pid", std::to_string(server.pid()), "-o",
                       (d / "run.db").string()},
                      {}, d / "record.err");
    EXPECT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 0; },
                           std::chrono::minutes(10)))
        << read_file(d / "record.err");
    const auto attached = answers();
    EXPECT_TRUE(wait_until([&] { return answers() >= attached + 20; }, std::chrono::minutes(20)));
    kill(rec, SIGINT);
    const auto rec_status = reap(rec, std::chrono::seconds(120));
    std::ofstream(d / "enough") << "";
    int st = 0;
    waitpid(client, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << read_file(d / "load.err");
    server.stop();
    ASSERT_EQ(rec_status, std::optional<int>(0)) << read_file(d / "record.err");

    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    const int64_t first = db.scalar("SELECT min(start_ns) FROM calls"), last = db.scalar("SELECT max(end_ns) FROM calls");
    std::multiset<std::pair<int64_t, int64_t>> server_side, ours;
    int64_t first_sent = INT64_MAX;
    int lines = 0;
    std::istringstream in(read_file(d / "load.jsonl"));
    for (std::string line; std::getline(in, line); ++lines) {
        auto j = nlohmann::json::parse(line);
        ASSERT_TRUE(j["error"].is_null()) << line;
        if (j["sent_ns"].get<int64_t>() <= first || j["received_ns"].get<int64_t>() >= last) continue;
        server_side.insert({j["timings"]["prompt_n"].get<int64_t>(), j["timings"]["predicted_n"].get<int64_t>()});
        first_sent = std::min(first_sent, j["sent_ns"].get<int64_t>());
    }
    ASSERT_GE(server_side.size(), 8u) << "too few requests inside the recording to compare";
    std::cout << server_side.size() << " of " << lines << " requests inside the recording compared\n";
    struct Ours {
        int64_t prompt, generated, start_ns;
        double ttft_ms, decode_ms;
    };
    std::vector<Ours> recorded;
    store::Statement q(db.handle(), "SELECT prompt_tokens, generated, start_ns, ttft_ns, decode_ns FROM requests");
    while (q.step())
        if (q.column_int(2) > first_sent && q.column_int(2) < last) {
            ours.insert({q.column_int(0), q.column_int(1)});
            recorded.push_back({q.column_int(0), q.column_int(1), q.column_int(2), q.column_int(3) / 1e6, q.column_int(4) / 1e6});
        }
    // Ours may hold requests still running when the recording ended: those are not compared.
    for (const auto& r : server_side) {
        auto it = ours.find(r);
        EXPECT_NE(it, ours.end()) << "no recorded request with prompt_n " << r.first << ", predicted_n " << r.second;
        if (it != ours.end()) ours.erase(it);
    }
    // Times: each request against the recorded one with its counts that began while it was
    // in flight. The server times the prompt from before it builds the batch that starts it
    // to after it sampled the first token (prompt_ms), and the decode from that sample to the
    // last (predicted_ms); we time from the start of the first call holding the prompt to the
    // end of the call computing its first output, and from there to the end of the call
    // computing its last. Each end of a server's window lies within the server's work between
    // two calls (batch building, sampling: the gaps between llama_decode calls, recorded), so
    // ours agree within 10 % plus twice the longest such gap that begins during the request —
    // the one after its last call included: the server times its last token after that call,
    // and a server thread preempted there (a busy machine: 3.7 ms in a CI run beside a build)
    // shows as that gap, which ended after our window.
    store::Statement gaps(db.handle(),
                   "SELECT coalesce(max(next_start - end_ns), 0) FROM (SELECT end_ns, lead(start_ns) OVER (ORDER BY "
                   "start_ns) AS next_start FROM calls) WHERE end_ns >= ? AND end_ns <= ?");
    int timed = 0;
    std::istringstream again(read_file(d / "load.jsonl"));
    for (std::string line; std::getline(again, line);) {
        auto j = nlohmann::json::parse(line);
        if (j["sent_ns"].get<int64_t>() <= first || j["received_ns"].get<int64_t>() >= last) continue;
        const auto& t = j["timings"];
        std::vector<const Ours*> match;
        for (const auto& o : recorded)
            if (o.prompt == t["prompt_n"].get<int64_t>() && o.generated == t["predicted_n"].get<int64_t>() &&
                o.start_ns >= j["sent_ns"].get<int64_t>() && o.start_ns <= j["received_ns"].get<int64_t>())
                match.push_back(&o);
        if (match.size() != 1) continue;  // two alike in flight at once: which is which is unknown
        gaps.bind(1, match[0]->start_ns).bind(2, match[0]->start_ns + int64_t((match[0]->ttft_ms + match[0]->decode_ms) * 1e6));
        ASSERT_TRUE(gaps.step());
        const double gap_ms = gaps.column_int(0) / 1e6;
        gaps.reset();
        const double prompt_ms = t["prompt_ms"].get<double>(), predicted_ms = t["predicted_ms"].get<double>();
        EXPECT_NEAR(match[0]->ttft_ms, prompt_ms, 0.1 * prompt_ms + 2 * gap_ms) << line;
        EXPECT_NEAR(match[0]->decode_ms, predicted_ms, 0.1 * predicted_ms + 2 * gap_ms) << line;
        std::cout << "request " << j["request"] << ": ttft " << match[0]->ttft_ms << " ms (server " << prompt_ms
                  << "), decode " << match[0]->decode_ms << " ms (server " << predicted_ms << "); longest gap between calls "
                  << gap_ms << " ms\n";
        ++timed;
    }
    EXPECT_GE(timed, int(server_side.size()) / 2) << "too few requests told apart to compare their times";
}

// What the server answers does not change under tracing: the serving study's peer (llama-server,
// 4 clients, 16 requests at temperature 0) untraced and recorded at --level op from the
// server's start give the same digest of every answer; the recording holds all 16 requests,
// with the server's own prompt and generated counts (the peer's answers carry none: the
// counts are compared as totals).
TEST(RecordToken, TracingDoesNotChangeWhatTheServerWrites) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const std::vector<std::string> peer = {"python3", std::string(PROFINFER_SOURCE_DIR) + "/experiments/peers/serve_peer.py",
                                           llama_debug().program("llama-server").string(),
                                           tiny_model("llama3.2-1b").string(), "--clients", "4", "--requests", "16"};
    auto plain = run(peer);
    ASSERT_EQ(plain.status, 0) << plain.err;
    std::vector<std::string> traced_argv = {profinfer_bin(), "record", "--level", "op", "-o", (d / "run.db").string(), "--"};
    traced_argv.insert(traced_argv.end(), peer.begin(), peer.end());
    auto traced = run(traced_argv);
    ASSERT_EQ(traced.status, 0) << traced.err;
    auto a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(traced.out);
    EXPECT_EQ(a["failed"], 0);
    EXPECT_EQ(b["failed"], 0);
    EXPECT_EQ(a["content_sha256"], b["content_sha256"]) << "the traced server answered differently";
    EXPECT_EQ(scalar_or_zero(d / "run.db", "SELECT count(*) FROM requests"), 16);
}
