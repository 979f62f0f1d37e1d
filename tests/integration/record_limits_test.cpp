// The recorder at its limits: many threads on few cores, a deliberately tiny ring
// buffer (losses counted exactly), expert ids beyond what one record holds, a thread
// map smaller than the number of threads a run starts, what scheduler events keep of
// other processes, and the QoS controller detaching and re-attaching.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>
#include <regex>

#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

struct Recorded {
    RunResult result;
    fs::path db;
};

Recorded record(const TempDir& d, const std::vector<std::string>& options, const std::vector<std::string>& command,
                const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv{profinfer_bin(), "record", "-o", d / "run.db"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return {run(argv, env), d / "run.db"};
}

int64_t count(const fs::path& db, const std::string& sql) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    return d.scalar(sql);
}

int64_t lost(const fs::path& db, const std::string& kind) {
    return count(db, "SELECT coalesce(sum(count), 0) FROM lost_events WHERE kind = '" + kind + "'");
}


}  // namespace

// 16 threads on 2 cores at --level full with the default buffer: nothing lost, every
// node once per thread.
TEST(RecordLimits, SixteenThreadsOnTwoCoresLoseNothing) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto rec = record(d, {"--level", "full"}, {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "8", "16"});
    ASSERT_EQ(rec.result.status, 0) << rec.result.err;
    EXPECT_EQ(count(rec.db, "SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
    expect_calls_match_dump(rec.result, rec.db, 8, 16);
}

// The recorder reads and writes at SCHED_IDLE by default. With a spinning process on every
// CPU it gets no idle time at all: the keeper must raise it before the ring buffer
// overflows (a 2 MiB buffer fills within the run), so nothing is lost; at normal priority
// it is never raised.
TEST(RecordLimits, IdleConsumerIsRaisedBeforeAnythingIsLost) {
    PROFINFER_REQUIRE_BPF();
    CpuHogs hogs;
    // Recorded once per consumer; the idle one's decode grows until the buffer came close
    // enough to full that the keeper raised it (a fast machine can finish 400 tokens first).
    auto recorded = [&](const char* consumer, int tokens) -> int64_t {
        TempDir d;
        auto rec = record(d, {"--level", "op", "--buffer-mb", "2", "--consumer", consumer},
                          {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", std::to_string(tokens), "2",
                           "--no-callback"});
        EXPECT_EQ(rec.result.status, 0) << rec.result.err;
        if (rec.result.status != 0) return -2;
        store::Database db(rec.db, store::Database::Mode::ReadOnly);
        auto meta = db.meta();
        EXPECT_EQ(meta[store::MetaKey::Consumer], consumer);
        EXPECT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0) << consumer;
        EXPECT_EQ(db.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'"), tokens - 1) << consumer;
        const int64_t boosts = meta.has(store::MetaKey::ConsumerBoosts) ? std::stoll(meta[store::MetaKey::ConsumerBoosts]) : -1;
        RecordProperty(std::string(consumer) + "_boosts", std::to_string(boosts));
        RecordProperty(std::string(consumer) + "_tokens", std::to_string(tokens));
        return boosts;
    };
    const std::string missing = grow_until_enough([&](int scale) -> std::string {
        const int64_t boosts = recorded("idle", 400 * scale);
        if (HasFailure()) return "";  // already failed on what it checks: no need to go on
        return boosts > 0 ? "" : "never raised although starved (" + std::to_string(400 * scale) + " tokens)";
    });
    EXPECT_EQ(missing, "");
    EXPECT_EQ(recorded("normal", 400), 0);
}

// A recording of a target that does nothing takes nothing from it: the recorder's threads
// sleep until the kernel side has something for them (a loader stop, an eighth of the
// buffer, the first record after a second without a wake-up) or a process ends — never on
// a timer (its keeper woke 50 times a second and its loop 20 before: >= 210 wake-ups in
// these 3 s). Three seconds of a loaded model waiting, as a server between requests; then
// 4 calls, which still all arrive. The bound counts wake-ups the program's loader stops
// and its 4 calls cause (20), and at most a few a second for the records' once-a-second
// hand-over and the sleeps of attaching, which last longer where the machine is slower (an
// emulated board takes ~10 s over this run): a timer would be ~70 a second.
TEST(RecordLimits, AnIdleTargetDoesNotWakeTheRecorder) {
    PROFINFER_REQUIRE_BPF();
    for (const char* consumer : {"idle", "normal"}) {
        TempDir d;
        const auto began = std::chrono::steady_clock::now();
        auto rec = record(d, {"--level", "op", "--consumer", consumer},
                          {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "4", "2", "--idle-ms", "3000"});
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        ASSERT_EQ(rec.result.status, 0) << rec.result.err;
        store::Database db(rec.db, store::Database::Mode::ReadOnly);
        auto meta = db.meta();
        // A sleep until a page is read in is no wake-up by an event: on a virtual board's 9p
        // share (no page cache kept) reading the libraries' DWARF at the loader stops faults
        // on ~1,100 pages in every run — 1,163 "wake-ups" there before they were told apart.
        const int64_t switches = meta.integer(store::MetaKey::RecorderWakeups);
        const int64_t faults = meta.integer(store::MetaKey::RecorderMajorFaults);
        ASSERT_GE(faults, 0);
        const int64_t wakeups = switches - faults;
        EXPECT_LT(wakeups, 20 + 3 * seconds) << consumer << " over " << seconds << " s: " << switches << " voluntary switches, " << faults << " major faults";
        EXPECT_GE(switches, 1) << consumer;  // the loader stops at least
        EXPECT_EQ(db.scalar("SELECT count(*) FROM calls"), 4) << consumer;
        EXPECT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0) << consumer;
        RecordProperty(std::string(consumer) + "_wakeups", std::to_string(wakeups));
        RecordProperty(std::string(consumer) + "_major_faults", std::to_string(faults));
        RecordProperty(std::string(consumer) + "_cpu_ms", meta[store::MetaKey::RecorderCpuMs]);
    }
}

// A 4 KiB ring buffer loses records, and every one is counted: recorded + lost equals
// what a lossless recording of the same deterministic run holds.
TEST(RecordLimits, TinyBufferLossesAreCountedExactly) {
    PROFINFER_REQUIRE_BPF();
    const std::vector<std::string> cmd{llama_debug().program("llama-completion"), "-m", tiny_model("llama3.2-1b"), "-n",
                                       "64", "-t", "8", "-p", "Hello", "-no-cnv", "--temp", "0"};
    TempDir ref_dir;
    auto ref = record(ref_dir, {"--level", "op"}, cmd);
    ASSERT_EQ(ref.result.status, 0) << ref.result.err;
    ASSERT_EQ(count(ref.db, "SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
    const int64_t ops = count(ref.db, "SELECT count(*) FROM ops"), nodes = count(ref.db, "SELECT count(*) FROM nodes");
    // Losses depend on how the consumer is scheduled: a few tries until some happen.
    for (int attempt = 0; attempt < 6; ++attempt) {
        TempDir d;
        auto rec = record(d, {"--level", "op", "--buffer-kb", "4"}, cmd);
        ASSERT_EQ(rec.result.status, 0) << rec.result.err;
        if (lost(rec.db, "op") == 0) continue;
        EXPECT_EQ(count(rec.db, "SELECT count(*) FROM ops") + lost(rec.db, "op"), ops);
        // A node's details are sent once and repeated by the consumer for every graph with
        // a record of it: only a lost details record can leave a recorded node without its row.
        EXPECT_LE(count(rec.db, "SELECT count(*) FROM nodes"), nodes);
        EXPECT_LE(count(rec.db, "SELECT count(*) FROM (SELECT DISTINCT graph_seq, tensor FROM ops) o WHERE NOT EXISTS "
                                "(SELECT 1 FROM nodes n WHERE n.graph_seq = o.graph_seq AND n.tensor = o.tensor)"),
                  lost(rec.db, "node"));
        store::Database db(rec.db, store::Database::Mode::ReadOnly);
        EXPECT_EQ(db.meta()[store::MetaKey::Status], "incomplete");
        EXPECT_NE(rec.result.err.find("events were lost"), std::string::npos) << rec.result.err;
        return;
    }
    FAIL() << "a 4 KiB buffer lost no operator record in 6 runs: the count could not be checked";
}

// A prompt longer than one record's expert ids: the ids left out are counted exactly.
TEST(RecordLimits, ExpertIdsBeyondARecordAreCounted) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const std::string prompt(40, 'x');  // 41 tokens with BOS; k = 2 → 82 ids per node
    auto rec = record(d, {"--level", "full"}, {graph_dump_bin(), tiny_model("qwen1.5-moe-a2.7b"), prompt, "3", "2"});
    ASSERT_EQ(rec.result.status, 0) << rec.result.err;
    int64_t expected = 0;
    for (const auto& n : parse_graph_dump(rec.result.out)) {
        if (n.op != "MUL_MAT_ID") continue;
        int64_t ids = 0;
        for (const auto& tok : n.ids) ids += int64_t(tok.size());
        expected += std::max<int64_t>(0, ids - 64);
    }
    ASSERT_GT(expected, 0);
    EXPECT_EQ(lost(rec.db, "expert_ids_truncated"), expected);
}

// The release libraries start a worker thread per graph: with room for 4 threads only,
// slots freed at thread exit keep every node of every thread.
TEST(RecordLimits, ThreadSlotsAreFreedWhenThreadsExit) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto rec = record(d, {"--level", "op"}, {graph_dump_release_bin(), tiny_model("llama3.2-1b"), "Hello world", "16", "2"},
                      {{"PROFINFER_THREAD_SLOTS", "4"}});
    ASSERT_EQ(rec.result.status, 0) << rec.result.err;
    EXPECT_GT(count(rec.db, "SELECT count(DISTINCT tid) FROM ops"), 8) << "expected a new worker thread per graph";
    EXPECT_EQ(lost(rec.db, "thread_slots_full"), 0);
    expect_calls_match_dump(rec.result, rec.db, 16, 2);
}

// The DB is the owner's alone; other processes' threads keep what --sched-peers allows.
TEST(RecordLimits, SchedulerPeersKeepOnlyWhatTheUserAllows) {
    PROFINFER_REQUIRE_BPF();
    struct Peers {
        int64_t foreign_ids, removed, removed_with_comm;
    };
    auto peers = [](const char* mode, int tokens) {
        TempDir d;
        auto rec = record(d, {"--level", "full", "--sched-peers", mode},
                          {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", std::to_string(tokens), "2", "--no-callback"});
        EXPECT_EQ(rec.result.status, 0) << rec.result.err;
        struct stat st{};
        stat(rec.db.c_str(), &st);
        EXPECT_EQ(st.st_mode & 077, 0u) << "the trace DB is readable by others";
        const std::string t = "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'pid')";
        return Peers{
            count(rec.db, "SELECT count(*) FROM sched_switch WHERE (prev_tgid > 0 AND prev_tgid != " + t +
                              ") OR (next_tgid > 0 AND next_tgid != " + t + ")"),
            count(rec.db, "SELECT count(*) FROM sched_switch WHERE prev_tgid = -1 OR next_tgid = -1"),
            count(rec.db, "SELECT count(*) FROM sched_switch WHERE (prev_tgid = -1 AND prev_comm != '') OR "
                          "(next_tgid = -1 AND next_comm != '')")};
    };
    // Other processes' threads must have run on the target's CPUs for there to be anything to
    // check: each mode's decode grows until its recording holds some (found, or removed).
    auto until_peers = [&](const char* mode) {
        Peers p{};
        const std::string missing = grow_until_enough([&](int scale) -> std::string {
            p = peers(mode, 64 * scale);
            return p.foreign_ids + p.removed > 0
                       ? ""
                       : std::string("--sched-peers ") + mode + ": no other process ran beside the target in " +
                             std::to_string(64 * scale) + " tokens";
        });
        EXPECT_EQ(missing, "") << "nothing to check";
        return p;
    };
    Peers full = until_peers("full"), comm = until_peers("comm"), none = until_peers("none");
    ASSERT_FALSE(HasFailure());
    ASSERT_GT(full.foreign_ids, 0);
    EXPECT_EQ(full.removed, 0);
    EXPECT_EQ(comm.foreign_ids, 0);
    EXPECT_GT(comm.removed, 0);
    EXPECT_EQ(comm.removed_with_comm, comm.removed);
    EXPECT_EQ(none.foreign_ids, 0);
    EXPECT_GT(none.removed, 0);
    EXPECT_EQ(none.removed_with_comm, 0);
}

// --memory-limit: the launched command runs in a memory cgroup of its own with that limit
// (seen from outside while it runs), the run says so, and the cgroup is gone afterwards.
TEST(RecordLimits, MemoryLimitPutsTheCommandInACgroupOfItsOwn) {
    PROFINFER_REQUIRE_BPF();
    const bool v1 = fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (!v1 && !fs::exists("/sys/fs/cgroup/cgroup.controllers")) GTEST_SKIP() << "no memory cgroup on this machine";
    TempDir d;
    // A decode longer than it takes to look (ended by SIGUSR1 once seen: 3000 fixed tokens took
    // 9 s here and 460 s in an emulated board).
    pid_t rec = spawn({profinfer_bin(), "record", "--level", "token", "--memory-limit", "256M", "-o", d / "run.db", "--",
                       graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "100000", "2", "--no-callback"},
                      d / "out");
    const fs::path cg = fs::path(v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup") / ("profinfer-" + std::to_string(rec));
    std::string procs, limit;
    ASSERT_TRUE(wait_until(
        [&] {
            procs = read_file(cg / "cgroup.procs");
            return !procs.empty();
        },
        std::chrono::seconds(60)));
    limit = read_file(cg / (v1 ? "memory.limit_in_bytes" : "memory.max"));
    // Decoding (its first call printed), then told to end after the call under way.
    EXPECT_TRUE(wait_until([&] { return read_file(d / "out").find("{\"call\":1}") != std::string::npos; },
                           std::chrono::minutes(5)));
    kill(pid_t(std::stoll(procs)), SIGUSR1);
    int st = 0;
    waitpid(rec, &st, 0);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    const auto meta = db.meta();
    EXPECT_EQ(std::stoll(limit), 256ll << 20);
    EXPECT_EQ(std::stoll(procs), std::stoll(meta[store::MetaKey::Pid]));  // the command, not profinfer
    EXPECT_EQ(meta[store::MetaKey::MemoryLimitBytes], std::to_string(256ll << 20));
    EXPECT_EQ(meta[store::MetaKey::Status], "complete");
    EXPECT_FALSE(fs::exists(cg));
    // Nonsense and --pid are refused before anything runs.
    auto bad = run({profinfer_bin(), "record", "--memory-limit", "lots", "-o", d / "x.db", "--", "true"});
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find("memory size 'lots'"), std::string::npos) << bad.err;
    auto pid = run({profinfer_bin(), "record", "--memory-limit", "1G", "--pid", "1", "-o", d / "y.db"});
    EXPECT_NE(pid.status, 0);
    EXPECT_NE(pid.err.find("excludes"), std::string::npos) << pid.err;
}

// --max-db-mb: a decode long enough to write several times the bound at --level op. The trace
// never passes the bound on disk (database and log, sampled while it records, and the finished
// file with its indexes), the oldest calls are dropped whole and said so (stderr, meta), and
// what is kept is the newest calls, each with all of its operators: every kept decode call has
// as many computed nodes as the first decode calls of an unbounded recording of the same run.
TEST(RecordLimits, MaxDbMbKeepsTheNewestCallsWholeUnderTheBound) {
    PROFINFER_REQUIRE_BPF();
    const std::vector<std::string> command = {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "1500", "2",
                                              "--no-callback"};
    TempDir whole;
    auto ref = record(whole, {"--level", "op"}, {graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "12", "2",
                                                 "--no-callback"});
    ASSERT_EQ(ref.result.status, 0) << ref.result.err;
    const int64_t nodes_per_decode =
        count(ref.db, "SELECT min(n) FROM (SELECT count(*) AS n FROM node_times WHERE phase = 'decode' GROUP BY call)");
    ASSERT_EQ(nodes_per_decode, count(ref.db, "SELECT max(n) FROM (SELECT count(*) AS n FROM node_times WHERE phase = "
                                              "'decode' GROUP BY call)"));

    TempDir d;
    const int64_t bound = 4'000'000;
    std::atomic<bool> done{false};
    std::atomic<int64_t> largest{0};
    std::string at_largest;  // its parts, for the message
    std::thread watch([&] {
        while (!done) {
            int64_t bytes = 0;
            std::string parts;
            for (const char* suffix : {"", "-wal", "-journal"}) {
                std::error_code ec;
                const auto n = fs::file_size(d / ("run.db" + std::string(suffix)), ec);
                if (!ec) bytes += int64_t(n), parts += std::string(" run.db") + suffix + " " + std::to_string(n);
            }
            if (bytes > largest) largest = bytes, at_largest = parts;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });
    auto rec = record(d, {"--level", "op", "--max-db-mb", "4"}, command);
    done = true;
    watch.join();
    ASSERT_EQ(rec.result.status, 0) << rec.result.err;
    EXPECT_LE(largest.load(), bound) << "the trace passed its bound while recording:" << at_largest;
    EXPECT_LE(int64_t(fs::file_size(rec.db)), bound);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(rec.result.err, m, std::regex(R"(--max-db-mb 4: the oldest (\d+) llama_decode calls were dropped)")))
        << rec.result.err;
    const int64_t dropped = std::stoll(m[1]);
    const int64_t kept = count(rec.db, "SELECT count(*) FROM calls");
    std::cout << "kept " << kept << " calls, dropped " << dropped << "; at most " << largest.load() << " bytes on disk\n";
    EXPECT_GT(dropped, 0);
    EXPECT_EQ(kept + dropped, 1500) << "every call either kept or counted as dropped";
    EXPECT_EQ(count(rec.db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'calls_dropped'"), dropped);
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM meta WHERE key = 'status' AND value = 'complete'"), 1);
    // The newest: the prefill (the first call) went, and the calls kept run to the end.
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM calls WHERE phase = 'prefill'"), 0);
    // Whole: each kept call with all its nodes, no record left of a dropped one.
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM (SELECT call, count(*) AS n FROM node_times GROUP BY call) WHERE n != " +
                                std::to_string(nodes_per_decode)),
              0);
    EXPECT_EQ(count(rec.db, "SELECT count(DISTINCT call) FROM node_times"), kept);
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM ops WHERE graph_seq NOT IN (SELECT seq FROM graphs)"), 0);
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM graph_nodes WHERE def_id NOT IN (SELECT id FROM node_defs)"), 0);
    EXPECT_EQ(count(rec.db, "SELECT count(*) FROM graphs WHERE seq NOT IN (SELECT graph_seq FROM call_graphs)"), 0);
    auto stat = run({profinfer_bin(), "stat", rec.db, "--by", "op"});
    EXPECT_EQ(stat.status, 0) << stat.err;
    // The analysis says so too: its sums miss the dropped calls.
    for (const auto& r : {stat, run({profinfer_bin(), "info", rec.db})})
        EXPECT_NE(r.err.find("the oldest " + std::to_string(dropped) + " llama_decode calls were dropped"), std::string::npos)
            << r.err;
}

// --consumer hold (the default at --level op): the records wait in memory while the CPUs
// are busy and are stored once a CPU sits idle — before the target ends. The target stops
// itself after call K (GRAPH_DUMP_STOP_AFTER) while a spinning process fills every CPU:
// after 3 s the trace holds no call (at --consumer idle all K + 1 were in it by then: stored
// on SCHED_IDLE's share of the busy CPUs); the spinners stopped, the CPUs idle and the K + 1
// calls are stored while the target still sits stopped. Resumed, the target ends with every
// call and operator stored, nothing lost.
TEST(RecordLimits, HoldStoresOnceACpuSitsIdle) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    constexpr int kStopAfter = 10, kCalls = 24;
    TempDir d;
    const fs::path db = d / "run.db";
    CpuHogs hogs;
    const std::string dump = "GRAPH_DUMP_STOP_AFTER=" + std::to_string(kStopAfter) + " " + graph_dump_bin().string() +
                             " " + tiny_model("llama3.2-1b").string() + " 'Hello world' " + std::to_string(kCalls) +
                             " 2 --no-callback; :";
    pid_t rec = spawn({profinfer_bin(), "record", "--level", "op", "-o", db.string(), "--", "/bin/sh", "-c", dump},
                      d / "out", d / "err");
    KillAtExit cleanup;
    cleanup.add(rec);
    const StoppedDump stopped = dump_stopped_after(rec, d / "out", kStopAfter, cleanup);
    ASSERT_TRUE(stopped.target) << stopped.why << ": " << read_file(d / "err");
    const pid_t target = stopped.target;
    std::this_thread::sleep_for(std::chrono::seconds(3));
    EXPECT_EQ(scalar_or_zero(db, "SELECT count(*) FROM tokens"), 0) << "stored while every CPU was busy";
    hogs.stop();
    // Idle: nothing else of this machine's may fill its CPUs meanwhile (a build beside the test
    // did, and nothing was stored in 30 s — as it should not be).
    EXPECT_TRUE(wait_until([&] { return scalar_or_zero(db, "SELECT count(*) FROM tokens") == kStopAfter + 1; },
                           std::chrono::seconds(120)))
        << "the calls held were not stored once the spinners stopped (was something else keeping every CPU busy?): "
        << scalar_or_zero(db, "SELECT count(*) FROM tokens") << " of " << kStopAfter + 1;
    EXPECT_EQ(state_of(target), 'T') << "stored only because the target ended";
    kill(target, SIGCONT);
    const auto status = reap(rec, std::chrono::seconds(120));
    ASSERT_TRUE(status);
    EXPECT_EQ(*status, 0) << read_file(d / "err");
    store::Database t(db, store::Database::Mode::ReadOnly);
    EXPECT_EQ(t.meta()[store::MetaKey::Status], "complete");
    EXPECT_EQ(t.meta()[store::MetaKey::Consumer], "hold, idle");
    EXPECT_EQ(t.scalar("SELECT count(*) FROM tokens"), kCalls);
    EXPECT_EQ(t.scalar("SELECT coalesce(sum(count), 0) FROM lost_events"), 0);
    EXPECT_EQ(t.scalar("SELECT count(DISTINCT graph_seq) FROM ops"), t.scalar("SELECT count(*) FROM graphs WHERE api = 'cpu'"))
        << "a CPU graph without operators";
}

// --defer-mb: the records wait in memory while the target decodes and are stored when it
// has ended — every one of them: the same calls and operators as a recording that stores as
// it goes. Sampled while the target runs (a shell runs it, then marks it done and waits a
// little, so that no sample taken before the mark can see the final store), the trace holds
// no operator; with a 1 MB bound the memory fills and is stored during the run.
TEST(RecordLimits, DeferMbStoresTheRecordsOnlyWhenTheTargetHasEnded) {
    PROFINFER_REQUIRE_BPF();
    TempDir plain;
    // Long enough after the 1 MB flush for a sample to see it stored: 1500 calls on a desktop
    // core (400 were not), the calls of 0.15 s of decoding where that is more than 400.
    const std::string dump = graph_dump_bin().string() + " " + fs::path(tiny_model("llama3.2-1b")).string() + " Hello " +
                             std::to_string(tiny_tokens_lasting(0.15, 400, 1500)) + " 2 --no-callback >/dev/null";
    auto ref = record(plain, {"--level", "op"}, {"/bin/sh", "-c", dump});
    ASSERT_EQ(ref.result.status, 0) << ref.result.err;
    const int64_t ops = count(ref.db, "SELECT count(*) FROM ops");
    ASSERT_GT(ops, 0);
    for (const char* mb : {"64", "1"}) {
        SCOPED_TRACE(std::string("--defer-mb ") + mb);
        TempDir d;
        const fs::path done = d / "target-done";
        std::atomic<bool> stop{false};
        std::atomic<int64_t> while_running{-1};  // most operators seen stored while the target ran
        std::thread watch([&] {
            while (!stop) {
                int64_t n = -1;
                try {
                    if (fs::exists(d / "run.db")) n = count(d / "run.db", "SELECT count(*) FROM ops");
                } catch (const std::exception&) {
                }
                if (!fs::exists(done)) while_running = std::max(while_running.load(), n);
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        });
        auto rec = record(d, {"--level", "op", "--defer-mb", mb},
                          {"/bin/sh", "-c", dump + " && touch " + done.string() + " && sleep 0.5"});
        stop = true;
        watch.join();
        ASSERT_EQ(rec.result.status, 0) << rec.result.err;
        EXPECT_EQ(count(rec.db, "SELECT count(*) FROM meta WHERE key = 'status' AND value = 'complete'"), 1);
        EXPECT_EQ(count(rec.db, "SELECT count(*) FROM calls"), count(ref.db, "SELECT count(*) FROM calls"));
        EXPECT_EQ(count(rec.db, "SELECT count(*) FROM ops"), ops);
        EXPECT_EQ(count(rec.db, "SELECT count(*) FROM node_times"), count(ref.db, "SELECT count(*) FROM node_times"));
        const int64_t flushes = count(rec.db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'deferred_flushes'");
        if (std::string(mb) == "64") {
            EXPECT_EQ(while_running.load(), 0) << "operators stored while the target decoded";
            EXPECT_EQ(flushes, 0);
        } else {
            EXPECT_GT(flushes, 0);
            EXPECT_GT(while_running.load(), 0) << "a full memory is stored during the run";
        }
    }
}
