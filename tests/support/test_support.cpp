#include "test_support.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "profinfer/store.h"
#include "profinfer/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fs = std::filesystem;

namespace profinfer::test {

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

int64_t lines_in(const fs::path& p) {
    const std::string text = read_file(p);
    return std::count(text.begin(), text.end(), '\n');
}

int64_t scalar_or_zero(const fs::path& db, const std::string& sql) {
    try {
        store::Database d(db, store::Database::Mode::ReadOnly);
        return d.scalar(sql);
    } catch (const std::exception&) {
        return 0;
    }
}

void expect_blocks_tile_each_call(const fs::path& db, int layers, bool moe, const std::string& label) {
    store::Database d(db, store::Database::Mode::ReadOnly);
    d.keep_block_times();
    const int64_t nodes = d.scalar("SELECT count(*) FROM node_times");
    ASSERT_GT(nodes, 0) << label;
    EXPECT_EQ(d.scalar("SELECT count(*) FROM block_times"), nodes) << label;
    EXPECT_EQ(d.scalar("SELECT count(*) FROM (SELECT DISTINCT graph_seq, tensor FROM block_times)"), nodes) << label;
    // Per call, to the nanosecond.
    EXPECT_EQ(d.scalar("SELECT count(*) FROM (SELECT call, sum(dur_ns) AS s FROM node_times GROUP BY call) n "
                       "LEFT JOIN (SELECT call, sum(dur_ns) AS s FROM block_times GROUP BY call) b ON b.call = n.call "
                       "WHERE b.s IS NOT n.s"),
              0)
        << label << ": a call whose blocks do not add up to its operator time";
    EXPECT_EQ(d.scalar("SELECT count(DISTINCT block_layer) FROM block_times"), layers) << label;
    EXPECT_EQ(d.scalar("SELECT max(block_layer) FROM block_times"), layers - 1) << label;
    const std::string mlp = moe ? "moe" : "ffn";
    for (int l = 0; l < layers; ++l) {
        const std::string L = std::to_string(l), at = " FROM block_times WHERE block_layer = " + L;
        EXPECT_GT(d.scalar("SELECT count(*)" + at + " AND block = 'attention' AND attention"), 0) << label << " layer " << L;
        EXPECT_GT(d.scalar("SELECT count(*)" + at + " AND block = 'attention' AND base IN ('Qcur', 'Kcur', 'Vcur')"), 0)
            << label << " layer " << L;
        EXPECT_EQ(d.scalar("SELECT count(*)" + at + " AND block != 'attention' AND (attention OR base IN ('Qcur', 'Kcur', 'Vcur'))"), 0)
            << label << " layer " << L << ": attention outside its block";
        EXPECT_GT(d.scalar("SELECT count(*)" + at + " AND block = '" + mlp + "' AND base = 'ffn_out'"), 0) << label << " layer " << L;
        EXPECT_EQ(d.scalar("SELECT count(*)" + at + " AND block NOT IN ('attention', '" + mlp + "')"), 0)
            << label << " layer " << L << ": a node in neither block";
    }
    EXPECT_EQ(d.scalar("SELECT count(*) FROM block_times WHERE op = 'MUL_MAT_ID' AND block != 'moe'"), 0) << label;
    EXPECT_GT(d.scalar("SELECT count(*) FROM block_times WHERE block = 'rest' AND block_layer IS NULL "
                       "AND base IN ('result_norm', 'result_output')"),
              0)
        << label << ": the output head is not in the rest";
    EXPECT_EQ(d.scalar("SELECT count(*) FROM block_times WHERE block = 'rest' AND block_layer IS NOT NULL"), 0) << label;
}

namespace {
[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    close_inherited_fds_at_exec();
    execvp(args[0], args.data());
    _exit(127);
}
}  // namespace

pid_t launched_child(pid_t profinfer, const std::string& comm_prefix) {
    for (pid_t c : children_of(profinfer))
        if (comm_of(c).rfind(comm_prefix, 0) == 0) return c;
    return 0;
}

StoppedDump dump_stopped_after(pid_t rec, const std::filesystem::path& out, int k, KillAtExit& cleanup) {
    StoppedDump d;
    const std::string last = "{\"call\":" + std::to_string(k) + "}";
    if (!wait_until([&] { return read_file(out).find(last) != std::string::npos; }, std::chrono::seconds(120)))
        return d.why = "call " + std::to_string(k) + " was never printed", d;
    d.shell = launched_child(rec, "sh");
    const auto dumps = d.shell ? children_of(d.shell) : std::vector<pid_t>{};
    if (dumps.size() != 1) return d.why = "the launched shell has " + std::to_string(dumps.size()) + " children", d;
    cleanup.add(dumps[0]);
    if (!wait_until([&] { return state_of(dumps[0]) == 'T'; }, std::chrono::seconds(30)))
        return d.why = "the dump did not stop itself after call " + std::to_string(k), d;
    d.target = dumps[0];
    return d;
}

Subreaper::Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
Subreaper::~Subreaper() {
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
}

void KillAtExit::add(pid_t pid) {
    if (int fd = int(syscall(SYS_pidfd_open, pid, 0)); fd >= 0) fds_.push_back(fd);
}
KillAtExit::~KillAtExit() {
    for (int fd : fds_) {
        syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
        close(fd);
    }
}

pid_t spawn(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = ::open("/dev/null", O_RDWR);
        dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
        if (!out.empty()) dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
        if (!err.empty()) dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
        exec_argv(argv);
    }
    return pid;
}

pid_t spawn_as_job(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
    int told[2];
    if (pipe2(told, O_CLOEXEC) != 0) return -1;
    const pid_t shell = fork();
    if (shell == 0) {
        setsid();
        const pid_t job = fork();
        if (job == 0) {
            setpgid(0, 0);
            int devnull = ::open("/dev/null", O_RDWR);
            dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
            if (!out.empty()) dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
            if (!err.empty()) dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
            exec_argv(argv);
        }
        setpgid(job, job);  // before the pid is told: no race with the job's own setpgid
        (void)!::write(told[1], &job, sizeof job);
        int st = 0, job_status = 127;
        for (pid_t p; (p = waitpid(-1, &st, 0)) > 0 || errno == EINTR;)
            if (p == job) job_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        _exit(job_status);
    }
    ::close(told[1]);
    pid_t job = -1;
    if (shell < 0 || ::read(told[0], &job, sizeof job) != sizeof job) job = -1;
    ::close(told[0]);
    return job;
}

bool ended(pid_t pid, std::chrono::milliseconds timeout) {
    return wait_until([&] { return ::kill(pid, 0) != 0 || proc_stat(pid).value_or(ProcStat{}).state == 'Z'; }, timeout);
}

std::string grow_until_enough(const std::function<std::string(int)>& attempt, std::chrono::seconds limit) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string missing;
    int tries = 0;
    for (int scale = 1;; scale *= 2) {
        missing = attempt(scale);
        ++tries;
        if (missing.empty()) return missing;
        if (std::chrono::steady_clock::now() - t0 >= limit || scale >= (1 << 12)) break;
    }
    return missing + " (after " + std::to_string(tries) + " tries, the last " + std::to_string(1 << (tries - 1)) +
           "x as long as the first, " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count()) +
           " s in all)";
}

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    TempDir io;
    const fs::path out = io / "out", err = io / "err";
    pid_t pid = fork();
    if (pid == 0) {
        int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1), dup2(e, 2);
        int devnull = ::open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        exec_argv(argv);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    RunResult r;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = read_file(out);
    r.err = read_file(err);
    return r;
}

void expect_one_line_failure(const RunResult& r, const std::string& needle) {
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// PROFINFER_UNDER_TEST runs the suite against another build (e.g. an older commit's,
// to show that a test fails without the fix it covers).
fs::path profinfer_bin() {
    const char* other = std::getenv("PROFINFER_UNDER_TEST");
    return other && *other ? fs::path(other) : fs::path(PROFINFER_BIN);
}
fs::path graph_dump_bin() { return LLAMA_GRAPH_DUMP_BIN; }
fs::path graph_dump_release_bin() { return LLAMA_GRAPH_DUMP_RELEASE_BIN; }
fs::path fake_llama_bin() { return FAKE_LLAMA_BIN; }
fs::path dlopen_loop_bin() { return DLOPEN_LOOP_BIN; }
fs::path dlopen_plugin() { return DLOPEN_PLUGIN; }

bool DumpNode::computed() const {
    return op != "NONE" && op != "VIEW" && op != "RESHAPE" && op != "PERMUTE" && op != "TRANSPOSE";
}

std::vector<DumpNode> parse_graph_dump(const std::string& out) {
    std::vector<DumpNode> nodes;
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);) {
        if (l.empty() || l[0] != '{') continue;  // the target's other output
        auto j = nlohmann::json::parse(l);
        DumpNode n;
        n.call = j["call"];
        n.name = j["name"];
        n.op = j["op"];
        n.src = j["src"].get<std::vector<std::string>>();
        if (j.contains("ids")) n.ids = j["ids"].get<std::vector<std::vector<int>>>();
        nodes.push_back(std::move(n));
    }
    return nodes;
}

bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!ready()) {
        if (std::chrono::steady_clock::now() > end) return false;
        usleep(2000);
    }
    return true;
}

std::vector<pid_t> children_of(pid_t pid) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream f(t.path() / "children");
        for (pid_t c; f >> c;) out.push_back(c);
    }
    return out;
}

std::optional<ProcStat> proc_stat(pid_t pid) {
    const std::string s = read_file("/proc/" + std::to_string(pid) + "/stat");
    const auto close = s.rfind(')');  // comm may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= s.size()) return std::nullopt;
    std::istringstream f(s.substr(close + 2));
    ProcStat st;
    std::string field;
    f >> st.state;
    for (int i = 4; i < 14 && f >> field; ++i) {  // fields 4..13: ppid .. cmajflt
    }
    long long utime = 0, stime = 0;
    f >> utime >> stime;  // fields 14 and 15
    st.cpu_ticks = utime + stime;
    return st;
}

char state_of(pid_t pid) {
    const auto st = proc_stat(pid);
    return st ? st->state : 0;
}

std::string comm_of(pid_t pid) {
    std::string s = read_file("/proc/" + std::to_string(pid) + "/comm");
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

CpuHogs::CpuHogs(int per_cpu) {
    for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) * per_cpu; ++c)
        pids_.push_back(spawn({"/bin/sh", "-c", "while :; do :; done"}));
}

void CpuHogs::stop() {
    for (pid_t p : pids_) kill(p, SIGKILL), waitpid(p, nullptr, 0);
    pids_.clear();
}

// A loopback port nothing listens on now (the kernel's pick for a bind to port 0).
int free_loopback_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    if (port == 0) throw std::runtime_error(std::string("no free loopback port: ") + std::strerror(errno));
    return port;
}

LlamaServer::LlamaServer(const fs::path& dir, const fs::path& model, int parallel, int ctx, bool metrics)
    : dir_(dir), port_(free_loopback_port()) {
    std::vector<std::string> argv = {llama_debug().program("llama-server"), "-m", model, "--parallel", std::to_string(parallel),
                                     "-c", std::to_string(ctx), "-t", "2", "--host", "127.0.0.1", "--port", std::to_string(port_)};
    if (metrics) argv.push_back("--metrics");
    pid_ = spawn(argv, dir / "server.out", dir / "server.err");
}

bool LlamaServer::listening() {
    return wait_until([&] { return read_file(dir_ / "server.err").find("listening on") != std::string::npos; },
                      std::chrono::seconds(120));
}

std::string LlamaServer::log() const { return read_file(dir_ / "server.err"); }

std::optional<int> LlamaServer::stop() {
    if (pid_ <= 0) return std::nullopt;
    kill(pid_, SIGTERM);
    auto st = reap(pid_, std::chrono::seconds(60));
    if (!st) kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return st;
}

std::optional<int> reap(pid_t pid, std::chrono::milliseconds timeout) {
    std::optional<int> status;
    wait_until(
        [&] {
            int st = 0;
            if (waitpid(pid, &st, WNOHANG) != pid) return false;
            status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return true;
        },
        timeout);
    return status;
}

const LlamaInstall& llama_debug() {
    static LlamaInstall li = LlamaInstall::locate("debug");
    return li;
}

fs::path tiny_model(const std::string& card, const std::string& type) {
    static TempDir dir;
    static std::mutex m;
    std::lock_guard lock(m);
    fs::path p = dir / (card + "-tiny-" + type + ".gguf");
    if (!fs::exists(p)) {
        auto r = run({profinfer_bin(), "model", "synth", "--card", card, "--scale", "tiny", "--type", type, "-o", p});
        if (r.status != 0) throw std::runtime_error("profinfer model synth failed: " + r.err);
    }
    return p;
}

int tiny_tokens_lasting(double seconds, int at_least, int at_most) {
    static const double per_second = [] {
        const std::string model = tiny_model("llama3.2-1b").string();
        auto timed = [&](int tokens) {
            const auto began = std::chrono::steady_clock::now();
            auto r = run({graph_dump_bin().string(), model, "Hello", std::to_string(tokens), "2", "--no-callback"});
            if (r.status != 0) throw std::runtime_error("llama_graph_dump failed: " + r.err);
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        };
        // The difference of a long and a short run: loading the model is left out.
        double best = 0;
        for (int i = 0; i < 2; ++i) best = std::max(best, 200 / std::max(1e-3, timed(210) - timed(10)));
        return best;
    }();
    return int(std::clamp(per_second * seconds, double(at_least), double(at_most)));
}

// The recorded nodes per llama_decode call: for call k, the node names of every CPU
// graph computed inside the k-th llama_decode, the nodes that have an op record, and
// the nodes whose records are not exactly one per participating thread (ith 0..nth-1).
namespace {
struct CallRecord {
    std::multiset<std::pair<std::string, std::string>> nodes;  // (name, op)
    int64_t nodes_with_records = 0, nodes_with_bad_thread_records = 0, threads = 0;
};

std::vector<CallRecord> recorded_calls(const fs::path& path) {
    store::Database db(path, store::Database::Mode::ReadOnly);
    std::vector<CallRecord> calls;
    store::Statement tok(db.handle(), "SELECT start_ns, end_ns FROM tokens ORDER BY start_ns");
    while (tok.step()) {
        CallRecord c;
        const int64_t s = tok.column_int(0), e = tok.column_int(1);
        const std::string in_call = "(SELECT seq FROM graphs WHERE api = 'cpu' AND start_ns >= " + std::to_string(s) +
                                    " AND end_ns <= " + std::to_string(e) + ")";
        store::Statement n(db.handle(), ("SELECT name, op FROM nodes WHERE graph_seq IN " + in_call).c_str());
        while (n.step()) c.nodes.insert({n.column_text(0), n.column_text(1)});
        const std::string per_node = "(SELECT graph_seq, tensor, count(*) AS n, count(DISTINCT ith) AS i, max(nth) AS t, "
                                     "min(ith) AS lo, max(ith) AS hi FROM ops WHERE graph_seq IN " + in_call +
                                     " GROUP BY graph_seq, tensor)";
        c.nodes_with_records = db.scalar("SELECT count(*) FROM " + per_node);
        c.nodes_with_bad_thread_records =
            db.scalar("SELECT count(*) FROM " + per_node + " WHERE n != t OR i != t OR lo != 0 OR hi != t - 1");
        // Threads by ggml's index: builds without OpenMP start new threads per graph.
        c.threads = db.scalar("SELECT max(nth) FROM ops WHERE graph_seq IN " + in_call);
        calls.push_back(std::move(c));
    }
    return calls;
}

}  // namespace

void expect_calls_match_dump(const RunResult& result, const fs::path& db, int n_calls, int n_threads) {
    auto dump = parse_graph_dump(result.out);
    ASSERT_FALSE(dump.empty()) << result.err;
    auto calls = recorded_calls(db);
    ASSERT_EQ(int(calls.size()), n_calls);
    for (int k = 0; k < n_calls; ++k) {
        SCOPED_TRACE("llama_decode call " + std::to_string(k));
        std::multiset<std::pair<std::string, std::string>> expected;
        for (const auto& n : dump)
            if (n.call == k && n.computed()) expected.insert({n.name, n.op});
        ASSERT_GT(expected.size(), 10u);
        EXPECT_EQ(calls[k].nodes, expected);
        // No fusion under the eval callback: one record set per node.
        EXPECT_EQ(calls[k].nodes_with_records, int64_t(expected.size()));
        EXPECT_EQ(calls[k].nodes_with_bad_thread_records, 0);
        EXPECT_EQ(calls[k].threads, n_threads);
    }
}

fs::path golden_trace(const std::string& name) { return fs::path(GOLDEN_DIR) / (name + ".db"); }

std::unique_ptr<profinfer::store::Database> open_trace(const fs::path& db) {
    return std::make_unique<profinfer::store::Database>(db, profinfer::store::Database::Mode::ReadOnly);
}

bool bpf_available(std::string* why) {
    if (geteuid() != 0) {
        *why = "needs root (or CAP_BPF+CAP_PERFMON) to load BPF programs; run as root";
        return false;
    }
    if (!fs::exists("/sys/kernel/btf/vmlinux")) {
        *why = "kernel has no BTF (/sys/kernel/btf/vmlinux)";
        return false;
    }
    // An invalid command: EINVAL from a kernel, ENOSYS where nothing implements bpf() — an
    // arm64 build run under qemu-user on another architecture's kernel (make test-arm64).
    errno = 0;
    if (syscall(SYS_bpf, -1, nullptr, 0) < 0 && errno == ENOSYS) {
        *why = "the bpf() system call is not there (an emulated run under qemu-user cannot load BPF programs; run "
               "on the board)";
        return false;
    }
    return true;
}

TmpfsMount::TmpfsMount(std::filesystem::path d, const char* size) : dir(std::move(d)) {
    std::filesystem::create_directories(dir);
    ok = mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
}

TmpfsMount::~TmpfsMount() {
    if (ok) umount2(dir.c_str(), MNT_DETACH);
}

}  // namespace profinfer::test
