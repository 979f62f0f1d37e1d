// What a user trusts a finished recording with: it is one file (copied or moved alone it
// holds every row), whoever read it while it was written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <regex>
#include <thread>

#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

// A reader polling the trace every 50 ms (as `watch profinfer info run.db` would) while the
// recording ends: SQLite cannot leave the write-ahead log while another connection has the
// file open, and the recorder gave up at once — a 4 KiB run.db with every row in run.db-wal,
// which `mv run.db` left behind. Now the end waits for a gap between the reader's opens: no
// -wal is left, and the file moved alone holds every call the recorder stored.
TEST(RecordTrust, AReaderPollingAtTheEndLeavesOneWholeFile) {
    PROFINFER_REQUIRE_BPF();
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("recording " + std::to_string(round));
        TempDir d;
        const fs::path db = d / "run.db";
        pid_t rec = spawn({profinfer_bin(), "record", "--level", "op", "-o", db.string(), "--", graph_dump_bin().string(),
                           tiny_model("llama3.2-1b").string(), "Hello", "600",
                           "2", "--no-callback"},
                          d / "out", d / "err");
        std::atomic<bool> stop{false};
        std::atomic<int> reads{0};
        std::thread reader([&] {
            while (!stop) {
                if (scalar_or_zero(db, "SELECT count(*) FROM tokens") > 0) ++reads;
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        });
        const auto status = reap(rec, std::chrono::minutes(5));
        // The reader goes on a little after the recorder ended, as a user's would.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        stop = true;
        reader.join();
        ASSERT_EQ(status, 0) << read_file(d / "err");
        EXPECT_GT(reads.load(), 0) << "the reader never saw the trace while it was written: nothing was tested";
        EXPECT_EQ(read_file(d / "err").find("write-ahead-log"), std::string::npos) << read_file(d / "err");
        // No rows beside the trace. A reader whose open raced the log's retirement can create
        // an empty -wal after it (a read-only connection leaves it behind: seen once in a CI
        // under load): it holds nothing, and the file alone has every row (below).
        EXPECT_TRUE(!fs::exists(d / "run.db-wal") || fs::file_size(d / "run.db-wal") == 0) << "rows left beside the trace";
        // Moved alone, as mv or scp would: every call is in it.
        TempDir elsewhere;
        fs::copy_file(db, elsewhere / "moved.db");
        store::Database moved(elsewhere / "moved.db", store::Database::Mode::ReadOnly);
        EXPECT_EQ(moved.meta()[store::MetaKey::Status], "complete");
        EXPECT_GT(moved.scalar("SELECT count(*) FROM calls WHERE phase = 'decode'"), 0);
        EXPECT_EQ(moved.scalar("SELECT count(*) FROM calls"), store::Database(db, store::Database::Mode::ReadOnly).scalar(
                                                                  "SELECT count(*) FROM calls"));
    }
}

// --duration ends the recording at a call boundary: the call under way keeps its operators
// and nothing is cut, so a duration trace of an operator-level recording is complete (5 of
// 5 were marked incomplete, cut mid-graph by the detach); the process goes on.
TEST(RecordTrust, ADurationTraceEndsWhole) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    pid_t target = spawn({graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "1000000", "2", "--no-callback"}, d / "out");
    ASSERT_TRUE(wait_until([&] { return lines_in(d / "out") >= 3; }, std::chrono::seconds(60)));
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("recording " + std::to_string(round));
        const fs::path db = d / ("run" + std::to_string(round) + ".db");
        auto r = run({profinfer_bin(), "record", "--level", "op", "--duration", "1", "-o", db, "--pid", std::to_string(target)});
        ASSERT_EQ(r.status, 0) << r.err;
        store::Database t(db, store::Database::Mode::ReadOnly);
        const auto health = store::run_health(t);
        EXPECT_EQ(health.status, "complete") << health.reason;
        EXPECT_TRUE(health.losses.empty()) << health.reason;
        EXPECT_GT(t.scalar("SELECT count(*) FROM calls WHERE ops_traced"), 0);
        auto stat = run({profinfer_bin(), "stat", db});
        EXPECT_EQ(stat.err.find("QoS"), std::string::npos) << stat.err;
    }
    EXPECT_EQ(state_of(target) == 'Z' ? -1 : kill(target, 0), 0) << "the target ended with a recording";
    kill(target, SIGKILL);
    reap(target, std::chrono::seconds(30));
}

// --defer-mb on a disk that fills while the held records are stored: what fits is kept (it
// kept 0 calls, where storing as it goes kept 188), the rest is counted, the one error line
// names the trace, and the calls kept plus the calls counted lost are the calls the target made.
TEST(RecordTrust, ADeferredStoreOnAFullDiskKeepsWhatFitsAndCountsTheRest) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    // 1 MB: the schema and the probes' rows take ~330 KB of it before the first record.
    TmpfsMount small(d / "small", "1m");
    ASSERT_TRUE(small.ok) << "cannot mount a tmpfs";
    const int calls = 300;  // ~8 KB of trace each: far over what is left, stored only at the end
    const fs::path db = small.dir / "run.db";
    auto r = run({profinfer_bin(), "record", "--level", "op", "--defer-mb", "64", "-o", db, "--", graph_dump_bin(),
                  tiny_model("llama3.2-1b"), "Hello world", std::to_string(calls), "2", "--no-callback"});
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(db.string()), std::string::npos) << "the error names no file: " << r.err;
    EXPECT_NE(r.out.find("{\"call\":" + std::to_string(calls - 1) + "}"), std::string::npos) << "the command did not run to its end";
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"((\d+) of them llama_decode calls)"))) << r.err;
    const int64_t not_stored = std::stoll(m[1]);
    ASSERT_TRUE(fs::exists(db));
    const int64_t kept = scalar_or_zero(db, "SELECT count(*) FROM tokens");
    EXPECT_GT(kept, 0) << "nothing of what fitted was kept";
    EXPECT_EQ(kept + not_stored, calls) << kept << " kept, " << not_stored << " counted lost";
    store::Database t(db, store::Database::Mode::ReadOnly);
    EXPECT_NE(store::run_health(t).status, "complete");
    EXPECT_EQ(t.meta()[store::MetaKey::DeferMb], "64");
}

// kill -9 of a deferring recorder, at five moments (the target stops itself once call K has
// returned, so that the test knows how many calls it made): what it held is gone with it, and
// the trace counts it — the guardian adds the recorder's count of records held in memory and
// what was still in the ring buffer to lost_events (`token_not_stored`: llama_decode calls),
// and its note names --defer-mb. Calls kept plus calls counted lost are the calls made.
// --defer-mb 1: some moments fall after a store of what was held. (The guardian counts the
// ring buffer once the recorder is gone: a target resumed meanwhile would add calls.)
TEST(RecordTrust, AKilledDeferringRecorderCountsWhatItHeld) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    for (const int k : {0, 10, 60, 200, 400}) {
        TempDir d;
        const fs::path db = d / "run.db";
        // Under a shell that forks it (written when a parent-death SIGCONT continued the
        // launched command; harmless now): the dump stays stopped where it stopped itself.
        const std::string dump = "GRAPH_DUMP_STOP_AFTER=" + std::to_string(k) + " " + graph_dump_bin().string() + " " +
                                 tiny_model("llama3.2-1b").string() + " 'Hello world' 1000 2 --no-callback; :";
        pid_t rec = spawn({profinfer_bin(), "record", "--level", "op", "--defer-mb", "1", "-o", db.string(), "--",
                           "/bin/sh", "-c", dump},
                          d / "out", d / "err");
        KillAtExit cleanup;
        cleanup.add(rec);
        const StoppedDump stopped = dump_stopped_after(rec, d / "out", k, cleanup);
        ASSERT_TRUE(stopped.target) << stopped.why << ": " << read_file(d / "err");
        const pid_t shell = stopped.shell, target = stopped.target;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the recorder has read the ring buffer, or not
        kill(rec, SIGKILL);
        reap(rec, std::chrono::seconds(30));
        ASSERT_TRUE(wait_until(
            [&] {
                try {
                    store::Database t(db, store::Database::Mode::ReadOnly);
                    return t.meta()[store::MetaKey::Status] == "incomplete";  // the guardian's note is in
                } catch (const std::exception&) {
                    return false;
                }
            },
            std::chrono::seconds(30)));
        const int64_t kept = scalar_or_zero(db, "SELECT count(*) FROM tokens");
        const int64_t lost = scalar_or_zero(db, "SELECT count FROM lost_events WHERE kind = 'token_not_stored'");
        EXPECT_EQ(kept + lost, k + 1) << "call " << k << ": " << kept << " calls kept, " << lost << " counted lost";
        EXPECT_GT(scalar_or_zero(db, "SELECT count FROM lost_events WHERE kind = 'op_not_stored'") +
                      scalar_or_zero(db, "SELECT count(*) FROM ops"),
                  0);
        store::Database t(db, store::Database::Mode::ReadOnly);
        EXPECT_EQ(t.meta()[store::MetaKey::DeferMb], "1");
        const std::string why = t.meta()[store::MetaKey::Error];
        EXPECT_NE(why.find("--defer-mb"), std::string::npos) << why;
        EXPECT_NE(why.find(std::to_string(lost) + " llama_decode calls"), std::string::npos) << why;
        auto info = run({profinfer_bin(), "info", db});
        EXPECT_NE((info.out + info.err).find("--defer-mb"), std::string::npos) << info.out << info.err;
        std::cerr << "call " << k << ": " << kept << " calls kept, " << lost << " counted lost\n";
        EXPECT_EQ(state_of(target), 'T') << "the stopped target was resumed";
        kill(target, SIGKILL);
        kill(target, SIGCONT);
        reap(shell, std::chrono::seconds(30));  // the shell (an orphan now ours) ends with it
    }
}

// profinfer itself in a PID namespace of its own (a container without --pid=host): the
// kernel side would never match its processes; refused in one line saying so, before any
// database (it used to record nothing and ask "is it a llama.cpp program?").
TEST(RecordTrust, ProfinferInAPidNamespaceOfItsOwnIsRefusedInOneLine) {
    PROFINFER_REQUIRE_BPF();  // root, for unshare --pid
    TempDir d;
    const fs::path db = d / "run.db";
    auto r = run({"unshare", "--pid", "--fork", "--mount-proc", profinfer_bin().string(), "record", "-o", db.string(), "--",
                  graph_dump_bin().string(), tiny_model("llama3.2-1b").string(), "Hello world", "4", "2"});
    expect_one_line_failure(r, "runs in a PID namespace of its own");
    EXPECT_FALSE(fs::exists(db));
}

// Values that mean nothing are refused before anything runs, in one line naming the value
// (no "internal error", no 309-digit bound, nothing accepted that cannot hold).
TEST(RecordTrust, MeaninglessValuesAreRefusedInOneLine) {
    TempDir d;
    const std::string db = (d / "run.db").string();
    expect_one_line_failure(run({profinfer_bin(), "record", "-o", "", "--", "/bin/true"}), "-o needs a file name");
    auto nan = run({profinfer_bin(), "record", "--duration", "nan", "--pid", "1", "-o", db});
    expect_one_line_failure(nan, "'nan' is not a number");
    auto negative = run({profinfer_bin(), "record", "--duration", "-1", "--pid", "1", "-o", db});
    expect_one_line_failure(negative, "is not a number");
    EXPECT_LT(negative.err.size(), 200u) << negative.err;
    expect_one_line_failure(run({profinfer_bin(), "record", "--memory-limit", "1e30G", "-o", db, "--", "/bin/true"}),
                            "above 1024T");
    expect_one_line_failure(run({profinfer_bin(), "record", "--level", "token", "--qos-min-tps", "5", "-o", db, "--",
                                 "/bin/true"}),
                            "--qos-min-tps needs --level op or full");
    // A process that has exited but is not reaped is named for what it is (not "statically
    // linked?").
    pid_t zombie = fork();
    if (zombie == 0) _exit(0);
    ASSERT_TRUE(wait_until([&] { return state_of(zombie) == 'Z'; }, std::chrono::seconds(10)));
    expect_one_line_failure(run({profinfer_bin(), "record", "--pid", std::to_string(zombie), "-o", db}),
                            "has exited (a zombie");
    reap(zombie, std::chrono::seconds(10));
    EXPECT_FALSE(fs::exists(db));
}
