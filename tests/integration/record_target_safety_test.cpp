// Whatever happens to profinfer, the target goes on: kill -9 at a loader stop (launched)
// and while attached (--pid), a signal while the BPF objects load, a full disk.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// Calls in llama_graph_dump's output so far (a line being written is not counted).
int calls_in_dump(const fs::path& out) {
    std::string text = read_file(out);
    text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    int calls = 0;
    for (const auto& n : parse_graph_dump(text)) calls = std::max(calls, n.call + 1);
    return calls;
}

std::string health_of(const fs::path& db) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    return store::run_health(d).status;
}

// profinfer record of 16 calls of the release-library llama_graph_dump into D/run.db
// (output D/out, D/err): it dlopens 14 CPU variants, many loader stops to be caught in.
// AS_JOB: profinfer run as a job-control shell runs it (spawn_as_job), not our child.
pid_t record_release_dump(const TempDir& d, bool as_job = false) {
    const std::vector<std::string> argv{profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--",
                                        graph_dump_release_bin(), tiny_model("llama3.2-1b"), "Hello world", "16", "2"};
    return as_job ? spawn_as_job(argv, d / "out", d / "err") : spawn(argv, d / "out", d / "err");
}

// Waits until PROF's launched command sits stopped at one of our loader stops — with
// AFTER_LIBLLAMA, one of the CPU variants' dlopens (libllama was mapped at an earlier stop,
// so its probes are in) — and stops PROF right then (SIGSTOP), the command still held;
// its pid, or 0 after a minute.
pid_t stop_recorder_at_a_loader_stop(pid_t prof, bool after_libllama = false) {
    pid_t target = 0;
    const bool caught = wait_until(
        [&] {
            if (!target) target = launched_child(prof, "llama_graph_dum");
            if (!target || (state_of(target) != 't' && state_of(target) != 'T')) return false;
            if (after_libllama &&
                read_file("/proc/" + std::to_string(target) + "/maps").find("/libggml-cpu-") == std::string::npos)
                return false;
            kill(prof, SIGSTOP);
            wait_until([&] { return state_of(prof) == 'T'; }, 2s);
            if (state_of(target) == 'T') return true;  // held by us, with profinfer stopped
            kill(prof, SIGCONT);
            return false;
        },
        60s);
    return caught ? target : 0;
}

// {"call":N} lines of llama_graph_dump --no-callback so far.
int calls_printed(const fs::path& out) {
    const std::string text = read_file(out);
    int n = 0;
    for (size_t at = text.find("{\"call\":"); at != std::string::npos; at = text.find("{\"call\":", at + 1)) ++n;
    return n;
}

}  // namespace

// kill -9 of profinfer while the launched command sits stopped at one of our loader
// stops: the command resumes (the guardian), and runs to its end; the DB reads incomplete.
// Twice: profinfer in its parent's process group (a script ran it), and as a job of a
// job-control shell (a group of its own, which profinfer's death would orphan: the kernel
// hangs up an orphaned group with a stopped member unless the guardian, beside the command,
// keeps the group from being orphaned).
TEST(TargetSafety, KillNineAtTheLoaderStopLetsTheCommandFinish) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    for (const bool as_job : {false, true}) {
        SCOPED_TRACE(as_job ? "profinfer in a process group of its own" : "profinfer in its parent's process group");
        TempDir d;
        const pid_t prof = record_release_dump(d, as_job);
        const pid_t target = stop_recorder_at_a_loader_stop(prof);
        ASSERT_TRUE(target) << "never saw the command at a loader stop: " << read_file(d / "err");
        kill(prof, SIGKILL);
        ASSERT_TRUE(as_job ? ended(prof, 10s) : reap(prof, 10s).has_value());
        auto status = reap(target, 120s);  // ours now: the subreaper
        ASSERT_TRUE(status) << "the command did not finish after profinfer was killed (state " << state_of(target) << ")";
        EXPECT_EQ(*status, 0) << "killed by signal " << *status - 128 << " (SIGHUP = 1)";
        EXPECT_EQ(calls_in_dump(d / "out"), 16);
        EXPECT_TRUE(wait_until([&] { return health_of(d / "run.db") == "incomplete"; }, 10s));
    }
}

// Every loader stop is resumed, however the target and profinfer are scheduled: the
// stop is sent and counted before profinfer can hear of it, so its SIGCONT never comes
// first. (When the library record went out before the SIGSTOP, a target preempted in
// between by the woken consumer was resumed, then stopped itself for good: 3 of 4 runs
// of this program hung.) Not a llama.cpp program, so profinfer ends with an error; the
// point is that the command runs to its end.
// Left stopped is told from slow by the command itself: stopped (T) without gaining CPU
// time for 20 s, where a loader stop lasts milliseconds. Not a time limit on the run: a run
// of 1000 stops takes 1–2 s here and 30–200 s in an emulated board, every stop resumed.
TEST(TargetSafety, EveryLoaderStopIsResumed) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    for (int run = 0; run < 5; ++run) {
        TempDir d;
        pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", dlopen_loop_bin(),
                            dlopen_plugin(), "1000"},
                           d / "out", d / "err");
        std::optional<int> status;
        std::string seen;  // the command's state and CPU time, as last sampled
        auto unchanged_since = std::chrono::steady_clock::now();
        while (!(status = reap(prof, 1s))) {
            const pid_t target = launched_child(prof, "dlopen_loop");
            const auto st = target ? proc_stat(target) : std::nullopt;
            const std::string now = st ? std::string(1, st->state) + " " + std::to_string(st->cpu_ticks) : "";
            if (now.empty() || now[0] != 'T' || now != seen) {
                seen = now;
                unchanged_since = std::chrono::steady_clock::now();
                continue;
            }
            if (std::chrono::steady_clock::now() - unchanged_since < 20s) continue;
            kill(prof, SIGKILL);
            reap(prof, 10s);
            kill(target, SIGCONT);
            FAIL() << "run " << run << ": the command was left stopped (state and CPU ticks '" << now
                   << "' unchanged for 20 s)";
        }
        EXPECT_EQ(read_file(d / "out"), "1000 rounds\n") << "run " << run << ": " << read_file(d / "err");
    }
}

// kill -9 of profinfer attached with --pid: the process goes on, probes gone, to its end.
TEST(TargetSafety, KillNineWhileAttachedLetsTheProcessFinish) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    // A decode longer than any attach (sized by this machine's speed it was not: calls slow as
    // the context grows, and a loaded CI ran past 300 s); ended by SIGUSR1 once it has gone on
    // without the recorder, after which it exits 0 as a finished run does.
    pid_t target = spawn({graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "100000", "2", "--no-callback"},
                         d / "out");
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s)) << "the target never started decoding";
    KillAtExit cleanup;  // a failed assertion leaves no decode spinning under the next tests
    cleanup.add(target);
    // --consumer idle: stored as read, so that the trace says when the recorder is in (held
    // while the two decode threads fill the CPUs, --level op's default would store at the end).
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "--consumer", "idle", "-o", d / "run.db", "--pid",
                        std::to_string(target)});
    cleanup.add(prof);
    // Ready once it has stored decode calls.
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 0; }, 60s));
    kill(prof, SIGKILL);
    ASSERT_TRUE(reap(prof, 10s));
    const int at_kill = calls_printed(d / "out");
    EXPECT_TRUE(wait_until([&] { return calls_printed(d / "out") >= at_kill + 20; }, 120s))
        << "the target stopped decoding with the recorder (state " << state_of(target) << ")";
    kill(target, SIGUSR1);
    auto status = reap(target, 120s);
    ASSERT_TRUE(status) << "the target did not finish (state " << state_of(target) << ")";
    EXPECT_EQ(*status, 0);
    EXPECT_TRUE(wait_until([&] { return health_of(d / "run.db") == "incomplete"; }, 10s));
}

// SIGTERM while profinfer loads its BPF objects: handled, not fatal; the held command
// never runs untraced; nothing is left that blocks a retry.
TEST(TargetSafety, SignalDuringLoadNeverRunsTheCommandUntraced) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    const fs::path marker = d / "ran";
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", "/bin/sh", "-c",
                        "echo ran > " + marker.string()},
                       {}, d / "err");
    // The held child is still our fork (comm "profinfer") until it is released.
    ASSERT_TRUE(wait_until([&] { return launched_child(prof, "profinfer") != 0; }, 10s));
    kill(prof, SIGTERM);
    auto status = reap(prof, 30s);
    ASSERT_TRUE(status);
    EXPECT_NE(*status, 0);
    EXPECT_FALSE(fs::exists(marker)) << "the command ran although profinfer was stopped before tracing it";
    std::string err = read_file(d / "err");
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("interrupted by Terminated"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(d / "run.db"));
}

// A full disk under the trace DB: recording stops, the command finishes untraced, and
// profinfer says so in one line.
TEST(TargetSafety, FullDiskStopsRecordingNotTheCommand) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    TmpfsMount small(d / "small", "400k");
    ASSERT_TRUE(small.ok) << "cannot mount a tmpfs: " << std::strerror(errno);
    // Long enough (~2 s) that the recorder's first commits come while it runs: it sleeps
    // until an eighth of the buffer or a second's records are waiting. At least 200 calls
    // (~8 KB of trace each: the 400 KB fill after ~50).
    const int calls = tiny_tokens_lasting(2.0, 200, 4000);
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", small.dir / "run.db", "--", graph_dump_bin(),
                  tiny_model("llama3.2-1b"), "Hello world", std::to_string(calls), "2", "--no-callback"});
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("full"), std::string::npos) << r.err;
    // Full while the command ran (the rest of it untraced), or — a recorder kept from storing
    // until the end, e.g. its idle-priority consumer starved by a nice-19 job — only when it
    // stored what it held after the command's end: either is said, one line, never a bare
    // SQL error (seen: "profinfer: error: SQL error: database or disk is full").
    EXPECT_TRUE(r.err.find("ran on untraced") != std::string::npos ||
                r.err.find("the command had ended") != std::string::npos)
        << r.err;
    // --no-callback prints {"call":K} after each call.
    EXPECT_NE(r.out.find("{\"call\":" + std::to_string(calls - 1) + "}"), std::string::npos)
        << "the command did not run to its end";
    if (fs::exists(small.dir / "run.db")) {
        EXPECT_NE(health_of(small.dir / "run.db"), "complete");
    }
}

// The launched command execs another program (a wrapper script): the exec'd llama.cpp
// is the same process and is recorded from its first call.
TEST(TargetSafety, CommandThatExecsIsRecorded) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", "/bin/sh", "-c",
                  "exec \"$0\" \"$@\"", graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "8", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT count(*) FROM tokens"), 8);
}

// A command that forks llama.cpp as a child (a shell, `timeout`): the child that loads
// libllama is followed and recorded like a launched one, every node of every call.
TEST(TargetSafety, CommandThatForksIsFollowed) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", "/bin/sh", "-c",
                  "\"$0\" \"$@\"; true", graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "8", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    expect_calls_match_dump(r, d / "run.db", 8, 2);
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    auto meta = db.meta();
    EXPECT_NE(meta[store::MetaKey::LaunchedPid], "") << "the shell was the target";
    EXPECT_NE(meta[store::MetaKey::LaunchedPid], meta[store::MetaKey::Pid]);
}

// A launched wrapper that goes on loading libraries while its child loads libllama (Python:
// subprocess, then imports with C extensions, each a dlopen and so a loader stop): the
// wrapper stopped at a loader stop as the target just before the child became the target
// must be resumed too. Before the fix the wrapper stayed stopped for good (found with
// llama-server under a Python load generator): profinfer waited for it, and it for nothing.
// Five launches, as the two loader stops must meet.
TEST(TargetSafety, AWrapperHeldAtALoaderStopWhenItsChildBecomesTheTargetIsResumed) {
    PROFINFER_REQUIRE_BPF();
    const std::string script =
        "import subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:])\n"
        "import ctypes, decimal, sqlite3, ssl, json, hashlib, socket, select, zlib, bz2, lzma, csv, array, mmap\n"
        "sys.exit(p.wait())\n";
    for (int i = 0; i < 5; ++i) {
        TempDir d;
        pid_t rec = spawn({profinfer_bin(), "record", "-o", (d / "run.db").string(), "--", "python3", "-c", script,
                           graph_dump_bin().string(), tiny_model("llama3.2-1b").string(), "Hello", "8", "2", "--no-callback"},
                          d / "out", d / "err");
        const auto status = reap(rec, std::chrono::seconds(120));
        if (!status) {
            kill(rec, SIGINT);
            reap(rec, std::chrono::seconds(30));
        }
        ASSERT_TRUE(status.has_value()) << "launch " << i << ": the recording never ended (a process of the command "
                                        << "left stopped?)\n" << read_file(d / "err");
        ASSERT_EQ(*status, 0) << read_file(d / "err");
        EXPECT_EQ(scalar_or_zero(d / "run.db", "SELECT count(*) FROM calls"), 8);
    }
}

namespace {

// record --pid TARGET into DB until it holds more than 20 calls, then SIGINT, as a user
// stops an attach. --consumer normal: the test reads the database while it records (idle,
// it may lag behind a slow run, e.g. under the sanitizers, until the buffer fills).
void attach_twenty_calls_then_interrupt(pid_t target, const fs::path& db, const fs::path& err) {
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "--consumer", "normal", "-o", db, "--pid",
                        std::to_string(target)},
                       {}, err);
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(db, "SELECT count(*) FROM tokens") > 20; }, 60s))
        << read_file(err);
    kill(prof, SIGINT);
    ASSERT_TRUE(reap(prof, 30s));
}

// A long run (the test ends it): llama_graph_dump without the eval callback.
std::vector<std::string> long_dump(const fs::path& program = graph_dump_bin()) {
    return {program, tiny_model("llama3.2-1b"), "Hello world", "200000", "2", "--no-callback"};
}

// The user stops TARGET (SIGSTOP), then PROF, recording it into DB, is killed (kill -9): back
// once profinfer is gone, its trace marked incomplete, and a second gone by for a resume.
void user_stops_then_profinfer_dies(pid_t target, pid_t prof, const fs::path& db) {
    kill(target, SIGSTOP);
    ASSERT_TRUE(wait_until([&] { return state_of(target) == 'T'; }, 5s));
    kill(prof, SIGKILL);
    ASSERT_TRUE(ended(prof, 10s));
    EXPECT_TRUE(wait_until([&] { return health_of(db) == "incomplete"; }, 10s));
    std::this_thread::sleep_for(1s);
}

store::Meta meta_of(const fs::path& db) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    return d.meta();
}

// Decode calls' operator records, per call (the calls recorded whole).
std::vector<int64_t> ops_per_decode_call(const fs::path& db) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    std::vector<int64_t> v;
    store::Statement st(d.handle(), "SELECT count(*) FROM thread_parts WHERE phase = 'decode' GROUP BY call ORDER BY call");
    while (st.step()) v.push_back(st.column_int(0));
    return v;
}
}  // namespace

// A library replaced on disk under a running process (an upgrade under a server: a new file
// at the path, the old one still mapped): `record --pid` records it, through
// /proc/PID/map_files — the path names a file the process does not run, whose probes would
// never fire (it used to end "is it a llama.cpp program?"). libllama (where llama_decode
// is) comes from a copy the test then replaces.
TEST(TargetSafety, ALibraryReplacedOnDiskIsStillRecorded) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    auto ldd = run({"ldd", graph_dump_bin().string()});
    ASSERT_EQ(ldd.status, 0) << ldd.err;
    const auto at = ldd.out.find("libllama.so.0 => ");
    ASSERT_NE(at, std::string::npos) << ldd.out;
    const std::string line = ldd.out.substr(at + 17, ldd.out.find(' ', at + 17) - (at + 17));
    const fs::path original = fs::canonical(line);
    fs::create_directories(d / "lib");
    const fs::path copy = d / "lib" / "libllama.so.0";
    fs::copy_file(original, copy);
    std::vector<std::string> argv{"env", "LD_LIBRARY_PATH=" + (d / "lib").string()};
    for (const auto& a : long_dump()) argv.push_back(a);
    const pid_t target = spawn(argv, d / "out");
    KillAtExit cleanup;
    cleanup.add(target);
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s));
    ASSERT_NE(read_file("/proc/" + std::to_string(target) + "/maps").find(copy.string()), std::string::npos);
    fs::remove(copy);
    fs::copy_file(original, copy);  // a new file at the same path
    ASSERT_NE(read_file("/proc/" + std::to_string(target) + "/maps").find(copy.string() + " (deleted)"),
              std::string::npos);
    attach_twenty_calls_then_interrupt(target, d / "run.db", d / "err");
    EXPECT_GT(scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens"), 20) << read_file(d / "err");
    EXPECT_GT(scalar_or_zero(d / "run.db", "SELECT count(*) FROM ops"), 0);
}

// The launched command ignores SIGINT: profinfer forwards the ^C and goes on recording for
// as long as the command runs (it used to SIGKILL it 5 s later); a second ^C stops the
// recording and leaves the command running, untraced, never killed.
TEST(TargetSafety, ACommandThatIgnoresTheSignalIsNeverKilled) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    std::vector<std::string> argv{profinfer_bin(), "record", "--level", "token", "-o", d / "run.db", "--", "/bin/bash",
                                  "-c", "trap '' INT TERM; exec \"$0\" \"$@\""};
    for (const auto& a : long_dump()) argv.push_back(a);
    pid_t prof = spawn(argv, d / "out", d / "err");
    KillAtExit cleanup;
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 2; }, 60s))
        << read_file(d / "err");
    const pid_t target = launched_child(prof, "llama_graph_dum");
    ASSERT_GT(target, 0);
    cleanup.add(target);
    kill(prof, SIGINT);
    EXPECT_FALSE(reap(prof, 8s)) << "profinfer ended while its command still ran: " << read_file(d / "err");
    ASSERT_NE(state_of(target), 0) << "the command is gone";
    EXPECT_NE(state_of(target), 'Z') << "the command was killed";
    const int64_t recorded = scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens");
    kill(prof, SIGINT);
    auto st = reap(prof, 30s);
    ASSERT_TRUE(st) << "a second ^C did not end profinfer";
    EXPECT_EQ(*st, 128 + SIGINT);
    const int before = calls_printed(d / "out");
    EXPECT_TRUE(wait_until([&] { return calls_printed(d / "out") > before + 100; }, 60s)) << "the command stopped running";
    EXPECT_NE(state_of(target), 'Z');
    kill(target, SIGKILL);  // the test's own cleanup: it would run for minutes
    reap(target, 30s);
    auto meta = meta_of(d / "run.db");
    EXPECT_EQ(meta[store::MetaKey::Status], "incomplete");
    EXPECT_NE(meta[store::MetaKey::Error].find("had not exited"), std::string::npos) << meta[store::MetaKey::Error];
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_GE(db.scalar("SELECT count(*) FROM tokens"), recorded) << "recording went on after the first ^C";
}

// ^C at a terminal (a pty here) reaches the whole foreground process group, the launched
// command included: profinfer must not forward a second copy of it. The command counts its
// SIGINTs: one ^C, one SIGINT (it used to get two — llama-cli ends at its second); a
// second ^C stops the recording, and what profinfer says of the command is what became
// of it (here it traps SIGINT and runs on).
TEST(TargetSafety, ATerminalsCtrlCReachesTheCommandOnce) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    ASSERT_GE(master, 0);
    ASSERT_EQ(grantpt(master), 0);
    ASSERT_EQ(unlockpt(master), 0);
    const std::string slave = ptsname(master);
    const std::string count = (d / "sigints").string();
    // A shell that counts its SIGINTs while llama.cpp runs in the background (where a
    // non-interactive shell has SIGINT ignored: the recording goes on).
    const std::string dump = graph_dump_bin().string() + " " + tiny_model("llama3.2-1b").string() +
                             " 'Hello world' 100000 2 --no-callback > /dev/null";
    const std::string script = "trap 'echo int >> " + count + "' INT; " + dump + " & while :; do wait; done";
    const std::string prof_bin = profinfer_bin().string(), out = (d / "out").string(), err = (d / "err").string(),
                      db = (d / "run.db").string();
    const std::string status_file = (d / "status").string();
    // A session leader with the pty as its terminal, as a login shell is: it ignores ^C, runs
    // profinfer in its (foreground) process group, writes its exit status and stays (its end
    // would hang the terminal up, SIGHUP to the group).
    const pid_t leader = fork();
    if (leader == 0) {
        setsid();
        const int tty = open(slave.c_str(), O_RDWR);  // the session's controlling terminal
        const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (tty < 0 || o < 0 || e < 0) _exit(126);
        dup2(tty, 0), dup2(o, 1), dup2(e, 2);
        signal(SIGINT, SIG_IGN);
        const pid_t p = fork();
        if (p == 0) {
            signal(SIGINT, SIG_DFL);
            execl(prof_bin.c_str(), prof_bin.c_str(), "record", "--level", "token", "-o", db.c_str(), "--", "/bin/bash",
                  "-c", script.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
        int st = 0;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
        }
        const std::string text = std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        const int f = open(status_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (f >= 0 && write(f, text.data(), text.size()) >= 0) close(f);
        for (;;) pause();
    }
    KillAtExit cleanup;
    cleanup.add(leader);
    pid_t prof = 0;
    ASSERT_TRUE(wait_until([&] { return (prof = launched_child(leader, "profinfer")) > 0; }, 30s));
    pid_t command = 0;
    ASSERT_TRUE(wait_until([&] { return (command = launched_child(prof, "bash")) > 0; }, 30s)) << read_file(d / "err");
    cleanup.add(command);
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 2; }, 60s))
        << read_file(d / "err");
    ASSERT_EQ(write(master, "\x03", 1), 1);
    ASSERT_TRUE(wait_until([&] { return fs::exists(count); }, 10s));
    std::this_thread::sleep_for(1s);  // a forwarded copy would follow within milliseconds
    EXPECT_EQ(read_file(d / "sigints"), "int\n") << "one ^C, SIGINTs the command got";
    EXPECT_FALSE(fs::exists(status_file)) << "profinfer ended while its command still ran: " << read_file(d / "err");
    ASSERT_EQ(write(master, "\x03", 1), 1);
    ASSERT_TRUE(wait_until([&] { return fs::exists(status_file); }, 30s)) << "a second ^C did not end profinfer";
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(read_file(status_file), std::to_string(128 + SIGINT)) << read_file(d / "err");
    EXPECT_EQ(read_file(d / "sigints"), "int\nint\n");
    EXPECT_NE(read_file(d / "err").find("runs on untraced"), std::string::npos) << read_file(d / "err");
    EXPECT_NE(state_of(command), 'Z');
    close(master);
}

// Six followers of the launched command at loader stops at once (a shell starting six
// programs that load and unload a library in a loop, before any llama.cpp, their pids 8
// apart), beside a spinning shell per CPU, five launches: every one is let go. Held processes used to be noted in eight
// .bss slots by plain reads and writes, and two CPUs could pick the same free slot when a
// handler was preempted between its read and its write: one follower then stayed stopped for
// good (the old code hung 3 launches in 5 beside the spinners, 3 in 6 beside stress-ng; a
// Python wrapper's child was left stopped the same way beside a build, AWrapperHeld…). Not a
// llama.cpp program: profinfer ends with that error; the point is that every loop ends. A
// launch takes ~1.5 s here: 60 s without an end is a process left stopped.
TEST(TargetSafety, ManyFollowersHeldAtOnceAreAllResumed) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    CpuHogs hogs;
    const std::string loop = dlopen_loop_bin().string() + " " + dlopen_plugin().string() + " 200";
    for (int launch = 0; launch < 5; ++launch) {
        TempDir d;
        std::string script;
        for (int i = 0; i < 6; ++i) {  // pids 8 apart (seven /bin/true between two): one home slot of eight
            script += loop + " > " + (d / ("loop" + std::to_string(i))).string() + " & ";
            for (int k = 0; k < 7; ++k) script += "/bin/true; ";
        }
        script += "wait";
        pid_t prof = spawn({profinfer_bin(), "record", "-o", (d / "run.db").string(), "--", "/bin/sh", "-c", script},
                           d / "out", d / "err");
        KillAtExit cleanup;
        cleanup.add(prof);
        const auto status = reap(prof, 60s);
        std::string stopped;
        if (!status) {
            for (const pid_t c : children_of(prof))
                for (const pid_t l : children_of(c)) {
                    if (state_of(l) == 'T') stopped += " " + std::to_string(l);
                    kill(l, SIGCONT);
                }
        }
        ASSERT_TRUE(status.has_value()) << "launch " << launch << ": the recording never ended; loops left stopped:"
                                        << stopped << "\n" << read_file(d / "err");
        for (int i = 0; i < 6; ++i)
            EXPECT_EQ(read_file(d / ("loop" + std::to_string(i))), "200 rounds\n") << "launch " << launch << ", loop " << i;
    }
}

// profinfer stopped (^Z, SIGSTOP) while the command waits at one of its loader stops: the
// guardian resumes the command, which runs to its end while profinfer is still stopped;
// the run says what that cost (libraries loaded meanwhile ran untraced until it went on).
TEST(TargetSafety, AStoppedRecorderNeverFreezesTheTarget) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    const pid_t prof = record_release_dump(d);
    const pid_t target = stop_recorder_at_a_loader_stop(prof, true);
    ASSERT_TRUE(target) << "never saw the command at a loader stop: " << read_file(d / "err");
    // The command finishes while profinfer stays stopped.
    const bool finished = wait_until([&] { return state_of(target) == 'Z' || state_of(target) == 0; }, 60s);
    const char left = state_of(target);
    kill(prof, SIGCONT);
    ASSERT_TRUE(finished) << "the command stayed in state " << left << " while profinfer was stopped";
    auto st = reap(prof, 60s);
    ASSERT_TRUE(st);
    EXPECT_EQ(calls_in_dump(d / "out"), 16);
    ASSERT_TRUE(fs::exists(d / "run.db")) << read_file(d / "err");
    auto meta = meta_of(d / "run.db");
    EXPECT_EQ(meta[store::MetaKey::Status], "incomplete");
    EXPECT_NE(meta[store::MetaKey::Error].find("guardian resumed"), std::string::npos) << meta[store::MetaKey::Error];
}

// profinfer stopped for long (^Z) while the command loads and unloads libraries: every
// loader stop is let go within a few polls of the guardian, not a second or two each (6
// rounds of a dlopen every 50 ms in 9 s). 200 rounds are 400 loader stops: ~5 s here at the
// guardian's 10-ms look while profinfer is stopped, 160 s at the old 0.4 s a stop; the bound
// (90 s) is far from both, whatever the machine's speed.
TEST(TargetSafety, AStoppedRecorderDoesNotSlowTheTargetsLoaderStops) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", dlopen_loop_bin(),
                        dlopen_plugin(), "200"},
                       d / "out", d / "err");
    KillAtExit cleanup;
    cleanup.add(prof);
    pid_t target = 0;
    ASSERT_TRUE(wait_until([&] { return (target = launched_child(prof, "dlopen_loop")) != 0; }, 60s)) << read_file(d / "err");
    kill(prof, SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();
    const bool finished = wait_until([&] { return state_of(target) == 'Z' || state_of(target) == 0; }, 90s);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kill(prof, SIGCONT);
    reap(prof, 60s);
    EXPECT_TRUE(finished) << "200 rounds of dlopen not done in " << took << " s while profinfer was stopped";
    RecordProperty("seconds_stopped", std::to_string(took));
    EXPECT_EQ(read_file(d / "out"), "200 rounds\n");
}

// The user stopped the target; then profinfer died: the guardian leaves the target as the
// user left it (it resumes only a stop of its own).
TEST(TargetSafety, AUserStoppedTargetStaysStoppedWhenProfinferDies) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    pid_t target = spawn(long_dump(), d / "out");
    KillAtExit cleanup;
    cleanup.add(target);
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s));
    // --consumer idle: the trace says when the recorder is in (see KillNineWhileAttached…).
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "op", "--consumer", "idle", "-o", d / "run.db", "--pid",
                        std::to_string(target)});
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 0; }, 60s));
    user_stops_then_profinfer_dies(target, prof, d / "run.db");
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(state_of(target), 'T') << "the guardian resumed a target the user had stopped";
    kill(target, SIGKILL);
    kill(target, SIGCONT);
    reap(target, 30s);
}

// The same for a launched command, profinfer run as a job-control shell runs it (a process
// group of its own, which profinfer's death would orphan): the command the user stopped
// stays stopped — neither continued (a parent-death SIGCONT did) nor hung up and continued
// by the kernel as a stopped member of an orphaned group — and goes on when the user says.
TEST(TargetSafety, ALaunchedCommandTheUserStoppedStaysStoppedWhenProfinferDies) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    std::vector<std::string> argv{profinfer_bin(), "record", "--level", "token", "-o", d / "run.db", "--"};
    for (const auto& a : long_dump()) argv.push_back(a);
    const pid_t prof = spawn_as_job(argv, d / "out", d / "err");
    KillAtExit cleanup;
    ASSERT_TRUE(wait_until([&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM tokens") > 2; }, 60s))
        << read_file(d / "err");
    const pid_t target = launched_child(prof, "llama_graph_dum");
    ASSERT_TRUE(target);
    cleanup.add(target);
    user_stops_then_profinfer_dies(target, prof, d / "run.db");
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(state_of(target), 'T') << "a command the user had stopped was continued or ended when profinfer died";
    const int at_resume = calls_printed(d / "out");
    kill(target, SIGCONT);
    EXPECT_TRUE(wait_until([&] { return calls_printed(d / "out") >= at_resume + 2; }, 60s))
        << "the command did not go on when the user continued it (state " << state_of(target) << ")";
}

// A launched command whose llama.cpp runs in a PID namespace of its own: recorded like
// one outside — the same nodes of every call.
TEST(TargetSafety, CommandInItsOwnPidNamespaceIsRecorded) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", "unshare", "--pid", "--fork",
                  "--mount-proc", graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world", "8", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    expect_calls_match_dump(r, d / "run.db", 8, 2);
}

// Attached by its host pid to a process in another PID namespace (how a container's
// process is seen from the host): the same operators per decode call as outside.
TEST(TargetSafety, AttachByHostPidIntoAPidNamespace) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    auto outside = run({profinfer_bin(), "record", "--level", "op", "-o", d / "outside.db", "--", graph_dump_bin(),
                        tiny_model("llama3.2-1b"), "Hello world", "16", "2", "--no-callback"});
    ASSERT_EQ(outside.status, 0) << outside.err;
    std::vector<std::string> argv{"unshare", "--pid", "--fork", "--mount-proc"};
    for (const auto& a : long_dump()) argv.push_back(a);
    pid_t unshare = spawn(argv, d / "out");
    KillAtExit cleanup;
    cleanup.add(unshare);
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s));
    const auto inner = children_of(unshare);
    ASSERT_EQ(inner.size(), 1u);
    const pid_t host_pid = inner[0];
    cleanup.add(host_pid);
    EXPECT_NE(read_file("/proc/" + std::to_string(host_pid) + "/status").find("NSpid:\t" + std::to_string(host_pid) + "\t1"),
              std::string::npos)
        << "not pid 1 of a namespace of its own";
    attach_twenty_calls_then_interrupt(host_pid, d / "inside.db", d / "err");
    if (::testing::Test::HasFatalFailure()) return;
    kill(unshare, SIGKILL);
    kill(host_pid, SIGKILL);
    reap(unshare, 30s);
    const auto in = ops_per_decode_call(d / "inside.db"), out = ops_per_decode_call(d / "outside.db");
    ASSERT_GT(in.size(), 5u);
    ASSERT_GT(out.size(), 5u);
    // Calls recorded whole (not the first or last, which the attach and the stop may cut).
    for (size_t i = 1; i + 1 < in.size(); ++i) EXPECT_EQ(in[i], out[1]) << "call " << i;
}

// Stopping an attach mid-graph cuts that graph: said as such, not as records lost to a
// full ring buffer (with advice to raise it).
TEST(TargetSafety, AnAttachStoppedMidGraphSaysCutNotLost) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    pid_t target = spawn(long_dump(), d / "out");
    KillAtExit cleanup;
    cleanup.add(target);
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s));
    attach_twenty_calls_then_interrupt(target, d / "run.db", d / "err");
    if (::testing::Test::HasFatalFailure()) return;
    kill(target, SIGKILL);
    reap(target, 30s);
    const std::string err = read_file(d / "err");
    EXPECT_EQ(err.find("ring buffer"), std::string::npos) << err;
    store::Database db(d / "run.db", store::Database::Mode::ReadOnly);
    EXPECT_EQ(db.scalar("SELECT coalesce(sum(count), 0) FROM lost_events WHERE kind = 'op'"), 0);
    EXPECT_EQ(store::run_health(db).lost_records, 0);
}

// kill -9 of profinfer while the BPF objects load: the command never ran and nothing was
// recorded, so no database is left (it said "the target was resumed untraced").
TEST(TargetSafety, KillNineDuringLoadLeavesNoDatabase) {
    PROFINFER_REQUIRE_BPF();
    Subreaper reaper;
    TempDir d;
    const fs::path marker = d / "ran";
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "full", "-o", d / "run.db", "--", "/bin/sh", "-c",
                        "echo ran > " + marker.string()},
                       {}, d / "err");
    // Loading: the guardian and the held command forked, the database made.
    ASSERT_TRUE(wait_until(
        [&] { return children_of(prof).size() >= 2 && scalar_or_zero(d / "run.db", "SELECT count(*) FROM meta") > 0; },
        10s));
    kill(prof, SIGKILL);
    ASSERT_TRUE(reap(prof, 10s));
    EXPECT_TRUE(wait_until([&] { return !fs::exists(d / "run.db"); }, 10s))
        << "a database was left for a command that never ran: " << meta_of(d / "run.db")[store::MetaKey::Error];
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(fs::exists(marker)) << "the command ran untraced";
}

// A recording is one self-contained file: no -wal or -shm beside it once done, and
// reading it leaves none either.
TEST(TargetSafety, ATraceIsOneFileAndReadingItLeavesNothing) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", graph_dump_bin(),
                  tiny_model("llama3.2-1b"), "Hello world", "4", "2", "--no-callback"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* cmd : {"info", "stat"}) EXPECT_EQ(run({profinfer_bin(), cmd, d / "run.db"}).status, 0) << cmd;
    for (const auto& f : fs::directory_iterator(d.path())) EXPECT_EQ(f.path().filename(), "run.db");
}

// --memory-limit and profinfer killed: the cgroup goes once the command has ended.
TEST(TargetSafety, KillNineLeavesNoMemoryCgroup) {
    PROFINFER_REQUIRE_BPF();
    const bool v1 = fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (!v1 && !fs::exists("/sys/fs/cgroup/cgroup.controllers")) GTEST_SKIP() << "skipped: no memory cgroup on this machine";
    Subreaper reaper;
    TempDir d;
    // Long enough to be killed under way (a second here), and it runs to its end.
    pid_t prof = spawn({profinfer_bin(), "record", "--level", "token", "--memory-limit", "256M", "-o", d / "run.db", "--",
                        graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello world",
                        std::to_string(tiny_tokens_lasting(1.0, 64, 3000)), "2", "--no-callback"},
                       d / "out");
    const fs::path cg = fs::path(v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup") / ("profinfer-" + std::to_string(prof));
    ASSERT_TRUE(wait_until([&] { return calls_printed(d / "out") >= 2; }, 60s));
    ASSERT_TRUE(fs::exists(cg));
    const pid_t target = launched_child(prof, "llama_graph_dum");
    kill(prof, SIGKILL);
    ASSERT_TRUE(reap(prof, 30s)) << "profinfer in state " << state_of(prof) << " "
                                 << read_file("/proc/" + std::to_string(prof) + "/wchan");
    auto st = reap(target, 300s);
    ASSERT_TRUE(st);
    EXPECT_EQ(*st, 0);
    EXPECT_TRUE(wait_until([&] { return !fs::exists(cg); }, 10s)) << cg << " was left behind";
}
