#pragma once
// Helpers shared by the integration tests: run a program, make a temp dir, get a
// tiny synthetic model, and the rule for tests that need root/eBPF.
#include <gtest/gtest.h>

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "profinfer/llama_install.h"
#include "profinfer/output_file.h"

#include "profinfer/store.h"

namespace profinfer::test {

struct RunResult {
    int status = -1;  // exit status, or 128+signal
    std::string out, err;
};

// Runs ARGV (argv[0] looked up in PATH) with extra environment ENV; waits for it.
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// The CLI's failure convention: non-zero exit and exactly one stderr line containing NEEDLE.
void expect_one_line_failure(const RunResult& r, const std::string& needle);

// Starts ARGV and returns its pid, without waiting; its output goes to OUT and ERR
// (discarded when empty).
pid_t spawn(const std::vector<std::string>& argv, const std::filesystem::path& out = {},
            const std::filesystem::path& err = {});

// ARGV run as a job-control shell runs a command: a stand-in shell (a child of the test's
// process that leads a session of its own and reaps every child it has) starts it in a
// process group of its own. The job's pid; it is the shell's child, not ours: ended() tells
// when it is gone. A process the job leaves behind (its parent gone) comes to the nearest
// subreaper — the test's process, under Subreaper — which is in another session: the kernel
// counts the job's group orphaned once no member has a parent in the shell's session.
pid_t spawn_as_job(const std::vector<std::string>& argv, const std::filesystem::path& out = {},
                   const std::filesystem::path& err = {});
// Whether PID has ended (gone, or a zombie) within TIMEOUT.
bool ended(pid_t pid, std::chrono::milliseconds timeout);

// PER_CPU spinning shells per online CPU (every CPU busy, whatever the machine: a virtual
// board has four), killed and reaped by stop() or at the end of the scope.
class CpuHogs {
public:
    explicit CpuHogs(int per_cpu = 1);
    ~CpuHogs() { stop(); }
    CpuHogs(const CpuHogs&) = delete;
    CpuHogs& operator=(const CpuHogs&) = delete;
    void stop();
    size_t size() const { return pids_.size(); }

private:
    std::vector<pid_t> pids_;
};

// A loopback port nothing listens on now (the kernel's pick for a bind to port 0).
int free_loopback_port();

// llama-server of the debug build on MODEL (PARALLEL slots, CTX tokens of context, 2
// threads) on a free loopback port, its output in DIR/server.out and DIR/server.err (METRICS:
// with its own /metrics, llama-server's --metrics).
// listening() waits (up to 120 s) until it says it listens; stop() (or the end of the scope)
// sends SIGTERM and reaps it, returning its exit status.
class LlamaServer {
public:
    LlamaServer(const std::filesystem::path& dir, const std::filesystem::path& model, int parallel, int ctx, bool metrics = false);
    ~LlamaServer() { stop(); }
    LlamaServer(const LlamaServer&) = delete;
    LlamaServer& operator=(const LlamaServer&) = delete;
    bool listening();
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    pid_t pid() const { return pid_; }
    std::string log() const;
    std::optional<int> stop();

private:
    std::filesystem::path dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

// Readiness instead of sleeps: polls READY every 2 ms until it holds (true) or TIMEOUT
// passes (false).
bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout);
// A run sized by what it must show, not by one machine's speed (how many samples, switches
// or boosts a span of decoding yields depends on the machine and on what else runs there):
// ATTEMPT(scale) does the test's work scaled by SCALE (1, then 2, 4, …) and returns what its run
// still lacks ("" once it holds what the test needs). Tried again, twice as long each time,
// until LIMIT has passed since the first try; returns the last answer — "" or what was still
// missing after N tries, for the test's failure message.
std::string grow_until_enough(const std::function<std::string(int scale)>& attempt,
                              std::chrono::seconds limit = std::chrono::seconds(300));

// The children of PID (/proc/PID/task/*/children), the state letter of PID's
// /proc/PID/stat (0 if gone), and its comm.
std::vector<pid_t> children_of(pid_t pid);
// /proc/PID/stat's state letter and CPU time (utime + stime, clock ticks); nothing if gone.
struct ProcStat {
    char state = 0;
    long long cpu_ticks = 0;
};
std::optional<ProcStat> proc_stat(pid_t pid);
char state_of(pid_t pid);
std::string comm_of(pid_t pid);
// The child of PROFINFER whose name starts with COMM_PREFIX (the launched command, not the
// guardian), or 0.
pid_t launched_child(pid_t profinfer, const std::string& comm_prefix);

// A llama_graph_dump that a recording REC launched under `/bin/sh -c` with
// GRAPH_DUMP_STOP_AFTER=K, once it has printed call K (into OUT) and stopped itself: the
// shell and the dump (added to CLEANUP), or target 0 and why not.
class KillAtExit;
struct StoppedDump {
    pid_t shell = 0, target = 0;
    std::string why;
};
StoppedDump dump_stopped_after(pid_t rec, const std::filesystem::path& out, int k, KillAtExit& cleanup);

// While it lives, orphans of this test's children (a killed recorder's target, the guardian)
// come back to it; at its end they are reaped.
struct Subreaper {
    Subreaper();
    ~Subreaper();
};

// Processes a test started that would run for minutes: killed when it ends, however it ends
// (a failed assertion returns early). Through pidfds: never a later process with a reused pid.
class KillAtExit {
public:
    void add(pid_t pid);
    ~KillAtExit();

private:
    std::vector<int> fds_;
};
// waitpid with a timeout: the exit status (128+signal when killed), or nothing.
std::optional<int> reap(pid_t pid, std::chrono::milliseconds timeout);

std::string read_file(const std::filesystem::path& p);
// Whole lines in P so far (llama_graph_dump --no-callback prints one per llama_decode call).
int64_t lines_in(const std::filesystem::path& p);
// The first column of SQL's first row on the trace DB, or 0 while it cannot be read
// (not created yet, its schema not committed yet): for readiness checks.
int64_t scalar_or_zero(const std::filesystem::path& db, const std::string& sql);

// The profinfer binary under test.
std::filesystem::path profinfer_bin();
// tests/programs/llama_graph_dump, built against the pinned debug llama.cpp. Long decodes run
// there on 2 threads, not in llama-simple (ggml's default 4): on a 2-CPU host's 4-vCPU emulated
// board threads that meet at barriers spin while the ones they wait for are descheduled —
// 200 calls took 16 s there on 4 threads, 1.7 s on 2.
std::filesystem::path graph_dump_bin();

// tests/programs/llama_graph_dump built against the stock release libraries.
std::filesystem::path graph_dump_release_bin();
// A program whose libllama.so exports no llama_decode (as a stripped build would).
std::filesystem::path fake_llama_bin();
// A program that dlopens and dlcloses DLOPEN_PLUGIN in a loop (argv: library, rounds).
std::filesystem::path dlopen_loop_bin();
std::filesystem::path dlopen_plugin();

// One node as llama.cpp's eval callback reported it (llama_graph_dump's output).
struct DumpNode {
    int call = 0;  // the llama_decode call, 0 = the prompt
    std::string name, op;
    std::vector<std::string> src;
    std::vector<std::vector<int>> ids;  // MUL_MAT_ID: expert ids per token
    // Nodes ggml computes (views and reshapes are free and never reach a kernel).
    bool computed() const;
};
std::vector<DumpNode> parse_graph_dump(const std::string& out);

// RESULT is llama_graph_dump's run under profinfer record, DB its trace: N_CALLS
// llama_decode calls; per call, every node the eval callback reported computed has one
// record per participating thread (ith 0..nth-1) and the same name and op; N_THREADS
// thread slots.
void expect_calls_match_dump(const RunResult& result, const std::filesystem::path& db, int n_calls, int n_threads);

// The logical blocks of a recording (view block_times, stat --by block) on an architecture
// with LAYERS layers: every computed node in exactly one block, the blocks' times adding up to
// each call's operator time, and each layer's attention and FFN (or MoE) where they belong —
// Q/K/V and the attention core in attention, ffn_out after it, the output head outside the layers.
void expect_blocks_tile_each_call(const std::filesystem::path& db, int layers, bool moe, const std::string& label);

// A tmpfs of SIZE ("4k", "8m") mounted on DIR (made if missing) for the scope (root only):
// ok says whether the mount worked.
struct TmpfsMount {
    std::filesystem::path dir;
    bool ok;
    TmpfsMount(std::filesystem::path d, const char* size);
    ~TmpfsMount();
    TmpfsMount(const TmpfsMount&) = delete;
    TmpfsMount& operator=(const TmpfsMount&) = delete;
};

// A fresh directory removed at scope exit.
class TempDir {
public:
    TempDir() : dir_("profinfer-test") {}
    const std::filesystem::path& path() const { return dir_.path(); }
    std::filesystem::path operator/(const std::string& name) const { return dir_.path() / name; }

private:
    PrivateTempDir dir_;
};

// The pinned llama.cpp debug-info build (built by `make test` beforehand).
const LlamaInstall& llama_debug();

// A tiny synthetic model of CARD written by `profinfer model synth`, made once per
// test program and kept for its lifetime.
std::filesystem::path tiny_model(const std::string& card, const std::string& type = "f16");

// The tokens a tiny decode (llama_graph_dump on llama3.2-1b's tiny model, 2 threads, untraced)
// runs in SECONDS on this machine, at least AT_LEAST and at most AT_MOST (a count known to be
// enough on the fastest machines it ran on): for a test that needs a run to go on while
// something happens (a kill, a flush, a full disk), whatever the machine — an emulated board
// decodes ~100 times slower than a desktop core (170 against 12,000–28,000 tokens/s), and a
// count long enough on the desktop takes minutes there. The rate is the best of two short
// runs, measured once per process (ctest runs each test in one); a traced run is slower, so
// it lasts at least that long.
int tiny_tokens_lasting(double seconds, int at_least, int at_most);

// A recording committed in tests/golden (scripts/make-golden-traces.sh), for tests
// that must run where eBPF cannot: NAME is e.g. "llama3.2-1b-full".
std::filesystem::path golden_trace(const std::string& name);
// A trace opened read-only, for a test's one expression: stats_table(*open_trace(p), "op").
std::unique_ptr<profinfer::store::Database> open_trace(const std::filesystem::path& db);

// True when the test may use eBPF. Otherwise records why: a skip on a developer
// machine, a failure under CI=true (CI runs as root and must run these for real).
bool bpf_available(std::string* why);
#define PROFINFER_REQUIRE_BPF()                                                       \
    do {                                                                              \
        std::string why_;                                                             \
        if (!::profinfer::test::bpf_available(&why_)) {                               \
            if (std::getenv("CI") && std::string(std::getenv("CI")) == "true")        \
                FAIL() << "eBPF test cannot run under CI=true: " << why_;             \
            GTEST_SKIP() << "skipped: " << why_;                                      \
        }                                                                             \
    } while (0)

// The Vulkan tests run the stock x64 Vulkan libraries of the pinned llama.cpp on Mesa's
// lavapipe; an arm64 machine (a virtual board: no GPU is emulated, and no network to fetch
// packages) skips them and says why.
#if defined(__x86_64__)
#define PROFINFER_REQUIRE_VULKAN() \
    do {                           \
    } while (0)
#else
#define PROFINFER_REQUIRE_VULKAN()                                                                        \
    GTEST_SKIP() << "skipped: the Vulkan tests run the stock x64 libraries (@node-llama-cpp/linux-x64-vulkan) " \
                    "on Mesa's lavapipe; this is not an x64 machine"
#endif

}  // namespace profinfer::test
