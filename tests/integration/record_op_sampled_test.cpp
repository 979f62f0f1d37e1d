// --level op-sampled: operator time shares from CPU-clock samples, with no probe on any node.
#include <gtest/gtest.h>

#include <algorithm>

#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "kernel_tick.h"
#include "profinfer/sampled_ops.h"
#include "profinfer/stats.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

fs::path record_dump(const TempDir& d, const std::string& name, const std::vector<std::string>& level, int tokens,
                     const std::string& threads) {
    std::vector<std::string> argv{profinfer_bin(), "record", "-o", d / name};
    argv.insert(argv.end(), level.begin(), level.end());
    for (const std::string& a : {std::string("--"), graph_dump_bin().string(), tiny_model("llama3.2-1b").string(),
                                 std::string("Hello world"), std::to_string(tokens), threads, std::string("--no-callback")})
        argv.push_back(a);
    auto r = run(argv);
    EXPECT_EQ(r.status, 0) << r.err;
    return d / name;
}

}  // namespace

// The samples belong to the target's graphs and threads, no operator probe went in, and the
// op types the samples name are op types the exact operator level records on the same
// workload, the largest the same; each share's interval holds it, and the shares add up.
TEST(RecordOpSampled, SharesFromSamplesWithoutANodeProbe) {
    PROFINFER_REQUIRE_BPF();
    for (const std::string threads : {"1", "2"}) {
        SCOPED_TRACE(threads + " thread(s)");
        // Enough samples named by an operator, however fast the machine decodes.
        std::unique_ptr<TempDir> d;
        fs::path sampled;
        int tokens = 0;
        const std::string missing = grow_until_enough([&](int scale) -> std::string {
            d = std::make_unique<TempDir>();
            tokens = 200 * scale;
            sampled = record_dump(*d, "sampled.db", {"--level", "op-sampled", "--sample-hz", "4000"}, tokens, threads);
            int64_t named = 0;
            for (const auto& r : stats_table(*open_trace(sampled), "op-type").to_json())
                if (r["op"].get<std::string>().front() != '[') named += r["samples"].get<int64_t>();
            return named >= 300 ? "" : std::to_string(named) + " of 300 samples named by an operator from " +
                                            std::to_string(tokens) + " tokens";
        });
        ASSERT_EQ(missing, "");
        store::Database db(sampled, store::Database::Mode::ReadOnly);
        EXPECT_EQ(db.meta()[store::MetaKey::Level], "op-sampled");
        EXPECT_EQ(db.meta()[store::MetaKey::SampleScope], "target");  // the target's threads only, not every CPU
        EXPECT_EQ(db.scalar("SELECT count(*) FROM probes WHERE attached = 1 AND symbol GLOB '*compute_forward*'"), 0);
        EXPECT_EQ(db.scalar("SELECT count(*) FROM ops"), 0);
        EXPECT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
        // Every sample inside a CPU graph of the target, on one of its threads.
        EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples s WHERE NOT EXISTS (SELECT 1 FROM graphs g WHERE "
                            "g.seq = s.graph_seq AND g.api = 'cpu' AND s.ts_ns BETWEEN g.start_ns AND g.end_ns)"),
                  0);
        // A sample carries a caller only when it fell outside the code the trace names (libm, libc),
        // and the caller is in a named function of that code (the return address found on the stack).
        EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples s WHERE s.caller_ip IS NOT NULL AND (s.ip < 0 OR EXISTS "
                            "(SELECT 1 FROM code_ranges r WHERE r.lo = (SELECT max(lo) FROM code_ranges WHERE lo <= s.ip) "
                            "AND s.ip < r.hi) OR NOT EXISTS (SELECT 1 FROM code_ranges r WHERE r.lo = (SELECT max(lo) "
                            "FROM code_ranges WHERE lo <= s.caller_ip) AND s.caller_ip < r.hi AND r.function <> ''))"),
                  0);
        // With DWARF, the SwiGLU kernel the compiler inlined into ggml's GLU dispatch has code of its own.
        if (db.scalar("SELECT count(*) FROM libraries WHERE role = 'libggml-cpu' AND debug_info = 1"))
            EXPECT_GT(db.scalar("SELECT count(*) FROM code_ranges WHERE function GLOB 'ggml_compute_forward_swiglu*'"), 0);
        // The thread that calls llama_decode computes too; no more threads than ggml was given.
        EXPECT_GT(db.scalar("SELECT count(*) FROM cpu_samples WHERE tid = (SELECT min(tid) FROM tokens)"), 0);
        EXPECT_LE(db.scalar("SELECT count(DISTINCT tid) FROM cpu_samples"), std::stoi(threads));
        const auto t = stats_table(*open_trace(sampled), "op-type").to_json();
        double sum = 0;
        std::set<std::string> named;
        for (const auto& r : t) {
            SCOPED_TRACE(r.dump());
            EXPECT_EQ(r["estimate"], "sampled");
            sum += r["share_pct"].get<double>();
            if (r["op"].get<std::string>().front() == '[') continue;
            named.insert(r["op"].get<std::string>());
            EXPECT_LE(r["ci95_lo"].get<double>(), r["op_share_pct"].get<double>());
            EXPECT_GE(r["ci95_hi"].get<double>(), r["op_share_pct"].get<double>());
        }
        EXPECT_NEAR(sum, 100.0, 1e-6);
        // The other readers say what they show: info counts the samples, pprof's profile is the
        // samples' CPU time under operator > function, said to be estimated.
        const auto info = run({profinfer_bin(), "info", "--json", sampled.string()});
        ASSERT_EQ(info.status, 0) << info.err;
        EXPECT_EQ(nlohmann::json::parse(info.out)["cpu_samples"].get<int64_t>(), db.scalar("SELECT count(*) FROM cpu_samples"));
        const auto prof = run({profinfer_bin(), "export", "pprof", sampled.string(), "-o", (d->path() / "s.pb").string()});
        ASSERT_EQ(prof.status, 0) << prof.err;
        EXPECT_NE(prof.err.find("estimated from samples"), std::string::npos) << prof.err;
        EXPECT_GT(fs::file_size(d->path() / "s.pb"), 0u);
        const auto html = run({profinfer_bin(), "report", sampled.string(), "-o", (d->path() / "s.html").string()});
        ASSERT_EQ(html.status, 0) << html.err;
        EXPECT_NE(read_file(d->path() / "s.html").find("estimated from"), std::string::npos);
        // The exact operator level on the same workload: the op types there.
        const fs::path exact = record_dump(*d, "exact.db", {"--level", "op"}, tokens, threads);
        const auto e = stats_table(*open_trace(exact), "op-type").to_json();
        ASSERT_FALSE(e.empty());
        std::set<std::string> recorded;
        for (const auto& r : e) recorded.insert(r["op"].get<std::string>());
        // GLU: samples that fell in ggml's GLU dispatch itself and in none of its inlined kernels
        // cannot tell which kernel it ran (a clean-clone CI named it so; the exact level says
        // SWIGLU), and code the GLU kinds' inlined kernels share is named by one of them in the
        // DWARF (a clean-clone CI of ac9b25c named REGLU on a SwiGLU model): among the GLU kinds
        // the sampled level names the family, not the kind (docs/recording.md), so any GLU kind
        // recorded exactly matches any GLU kind sampled.
        auto is_glu = [](const std::string& r) { return r.find("GLU") != std::string::npos; };
        const bool glu_recorded = std::any_of(recorded.begin(), recorded.end(), is_glu);
        for (const auto& op : named)
            EXPECT_TRUE(recorded.count(op) || (is_glu(op) && glu_recorded)) << op << " is named by samples, never recorded exactly";
        // Rows come largest first: the operator with the most samples is the one with the most time.
        EXPECT_EQ(t.front()["op"], e.front()["op"]);
    }
}

// By default op-sampled samples on the kernel's tick where the kernel allows it (no timer of its
// own), and says why not where it does not. On the tick: the trace says so, its rate is the
// kernel's HZ, every sample lies in a CPU graph of the target, and the samples are about what
// the tick gives over the graphs' time — not fewer than a quarter (a thread the tick finds in a
// graph is sampled), not more than twice and a few (a sample of another timer's expiry, or one
// per expiry on every CPU, would exceed it).
TEST(RecordOpSampled, OnTheKernelsTickByDefault) {
    PROFINFER_REQUIRE_BPF();
    const KernelTick tick = KernelTick::find();
    std::unique_ptr<TempDir> d;
    fs::path db_path;
    double expected = 0;
    const std::string missing = grow_until_enough([&](int scale) -> std::string {
        d = std::make_unique<TempDir>();
        db_path = *d / "tick.db";
        auto r = run({profinfer_bin(), "record", "-o", db_path, "--level", "op-sampled", "--", graph_dump_bin().string(),
                      tiny_model("llama3.2-1b").string(), "Hello world", std::to_string(400 * scale), "1",
                      "--no-callback"});
        EXPECT_EQ(r.status, 0) << r.err;
        if (!tick.usable()) {
            EXPECT_NE(r.err.find("not on the kernel's tick: " + tick.why_not), std::string::npos) << r.err;
            return "";
        }
        EXPECT_EQ(r.err.find("not on the kernel's tick"), std::string::npos) << r.err;
        store::Database db(db_path, store::Database::Mode::ReadOnly);
        expected = double(db.scalar("SELECT coalesce(sum(end_ns - start_ns), 0) FROM graphs WHERE api = 'cpu'")) *
                   tick.hz / 1e9;
        return expected >= 40 ? "" : "the CPU graphs last " + std::to_string(expected) + " ticks, not 40";
    });
    ASSERT_EQ(missing, "");
    store::Database db(db_path, store::Database::Mode::ReadOnly);
    if (!tick.usable()) {
        EXPECT_EQ(db.meta()[store::MetaKey::SampleScope], "target");
        std::cout << "this kernel's tick cannot be sampled (" << tick.why_not << "): the timer was used, and said so\n";
        return;
    }
    EXPECT_EQ(db.meta()[store::MetaKey::SampleScope], "tick");
    EXPECT_EQ(db.meta()[store::MetaKey::SampleHz], std::to_string(tick.hz));
    EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples s WHERE NOT EXISTS (SELECT 1 FROM graphs g WHERE "
                        "g.seq = s.graph_seq AND g.api = 'cpu' AND s.ts_ns BETWEEN g.start_ns AND g.end_ns)"),
              0);
    const double samples = double(db.scalar("SELECT count(*) FROM cpu_samples"));
    EXPECT_GE(samples, expected / 4) << expected << " ticks' worth of graph time";
    EXPECT_LE(samples, 2 * expected + 5) << expected << " ticks' worth of graph time";
}

// Attached to a process already decoding on two threads: the sampler follows the threads it
// has (one event per thread, not per CPU, so that only the target pays for samples), and
// both ggml threads are sampled inside its graphs.
TEST(RecordOpSampled, AttachedSamplesTheThreadsTheTargetAlreadyHas) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    pid_t target = spawn({graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "100000", "2", "--no-callback"}, d / "out");
    ASSERT_TRUE(wait_until([&] { return lines_in(d / "out") >= 3; }, std::chrono::seconds(60)));
    const auto r = run({profinfer_bin(), "record", "--level", "op-sampled", "--sample-hz", "2000", "--duration", "3",
                        "-o", d / "run.db", "--pid", std::to_string(target)});
    std::vector<pid_t> tids;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(target) + "/task"))
        tids.push_back(pid_t(std::stoi(e.path().filename().string())));
    kill(target, SIGTERM);
    int st = 0;
    waitpid(target, &st, 0);
    ASSERT_EQ(r.status, 0) << r.err;
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.meta()[store::MetaKey::Status], "complete");
    EXPECT_EQ(db.meta()[store::MetaKey::SampleScope], "target");
    // Two threads each busy for most of 3 s at 2000 Hz: thousands of samples; 2 threads seen.
    EXPECT_EQ(db.scalar("SELECT count(DISTINCT tid) FROM cpu_samples"), 2);
    EXPECT_GT(db.scalar("SELECT count(*) FROM cpu_samples"), 100);
    // Every sample on a thread of the target.
    std::string threads = "-1";
    for (const auto& t : tids) threads += "," + std::to_string(t);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM cpu_samples WHERE tid NOT IN (" + threads + ")"), 0);
}

// profinfer estimate on an op-level recording: this machine's costs measured, the target's
// facts read from the trace as the trace holds them, a prediction per level in order.
TEST(Estimate, PredictsEachLevelFromATraceAndThisMachinesCosts) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const fs::path exact = record_dump(d, "exact.db", {"--level", "op"}, 16, "2");
    auto r = run({profinfer_bin(), "estimate", exact.string(), "--seconds", "0.5", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    store::Database db(exact, store::Database::Mode::ReadOnly);
    const double calls = double(db.scalar("SELECT count(*) FROM tokens WHERE n_tokens = 1"));
    const double ops = double(db.scalar("SELECT count(*) FROM ops o JOIN graphs g ON g.seq = o.graph_seq "
                                        "JOIN tokens t ON g.start_ns BETWEEN t.start_ns AND t.end_ns WHERE t.n_tokens = 1"));
    EXPECT_EQ(j["threads"].get<double>(), 2);
    EXPECT_NEAR(j["nodes_per_thread"].get<double>(), ops / calls / 2, 1e-9);
    EXPECT_GT(j["trap_ns"].get<double>(), 0);
    EXPECT_GE(j["hit_ns"].get<double>(), j["trap_ns"].get<double>() * 0.5);
    EXPECT_GE(j["cold_hit_ns"].get<double>(), j["hit_ns"].get<double>());  // floored at the hot hit
    EXPECT_GT(j["record_ns"].get<double>(), 0);
    // Storing a row takes the recorder's CPU: with none spare, each level costs at least what
    // it costs with one.
    for (const auto& l : j["levels"])
        EXPECT_GE(l["slowdown_pct"].get<double>(), l["spare_cpu_slowdown_pct"].get<double>()) << l["level"];
    ASSERT_EQ(j["levels"].size(), 5u);
    std::vector<std::string> names;
    for (const auto& l : j["levels"]) names.push_back(l["level"]);
    EXPECT_EQ(names, (std::vector<std::string>{"token", "graph", "op-sampled", "op", "full"}));
    EXPECT_LT(j["levels"][1]["slowdown_pct"].get<double>(), j["levels"][3]["slowdown_pct"].get<double>());
    // An op-sampled trace tells the graphs and the threads, not the nodes computed (a graph's
    // size counts views ggml never computes): the levels up to op-sampled, the table says why.
    // 64 calls at 4 kHz: the tiny model's graphs take a few ms in all, and both threads must
    // be sampled for the trace to tell its threads (16 calls at 2 kHz gave ~10 a thread).
    const fs::path sampled = record_dump(d, "sampled.db", {"--level", "op-sampled", "--sample-hz", "4000"}, 64, "2");
    r = run({profinfer_bin(), "estimate", sampled.string(), "--seconds", "0.3", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto s = nlohmann::json::parse(r.out);
    EXPECT_TRUE(s["nodes_per_thread"].is_null());
    EXPECT_EQ(s["graphs_per_call"].get<double>(), j["graphs_per_call"].get<double>());
    EXPECT_EQ(s["threads"].get<double>(), 2);
    ASSERT_EQ(s["levels"].size(), 3u);
    EXPECT_EQ(s["levels"][2]["level"], "op-sampled");
    EXPECT_GT(s["levels"][2]["slowdown_pct"].get<double>(), s["levels"][1]["slowdown_pct"].get<double>());
    // A token-level trace has no graphs: the token level alone is predicted, and the table says why.
    const fs::path token = record_dump(d, "token.db", {"--level", "token"}, 4, "1");
    r = run({profinfer_bin(), "estimate", token.string(), "--seconds", "0.3", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto t = nlohmann::json::parse(r.out);
    ASSERT_EQ(t["levels"].size(), 1u);
    EXPECT_EQ(t["levels"][0]["level"], "token");
    EXPECT_TRUE(t["nodes_per_thread"].is_null());
    r = run({profinfer_bin(), "estimate", token.string(), "--seconds", "0.3"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("does not tell its graphs"), std::string::npos) << r.out;
}

// --ablate attach (the duet's noprobe tracer: what being recorded costs without a
// probe): the recording runs as always — the loader watch, the libraries read, every probe
// attached — but into profinfer itself, so the target never traps and nothing of it is
// recorded; the same recording without the ablation records its calls and operators.
TEST(RecordAblations, AttachPutsNoProbeInTheTarget) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto record = [&](const std::string& name, const std::vector<std::string>& ablate) {
        std::vector<std::string> argv{profinfer_bin(), "record", "--level", "op", "-o", d / name};
        argv.insert(argv.end(), ablate.begin(), ablate.end());
        argv.insert(argv.end(), {"--", graph_dump_bin().string(), tiny_model("llama3.2-1b").string(), "Hello world", "4",
                                 "1", "--no-callback"});
        return run(argv);
    };
    auto r = record("ablated.db", {"--ablate", "attach"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("no probe in the target"), std::string::npos) << r.err;
    store::Database a(d / "ablated.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(a.meta()[store::MetaKey::Ablate], "attach");
    EXPECT_EQ(a.meta()[store::MetaKey::Status], "complete");
    EXPECT_GT(a.scalar("SELECT count(*) FROM probes WHERE symbol = 'llama_decode' AND attached = 1"), 0);
    EXPECT_EQ(a.scalar("SELECT count(*) FROM tokens"), 0);
    EXPECT_EQ(a.scalar("SELECT count(*) FROM ops"), 0);
    r = record("recorded.db", {});
    ASSERT_EQ(r.status, 0) << r.err;
    store::Database b(d / "recorded.db", store::Database::Mode::ReadOnly);
    EXPECT_GT(b.scalar("SELECT count(*) FROM tokens"), 0);
    EXPECT_GT(b.scalar("SELECT count(*) FROM ops"), 0);
}
