#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <optional>
#include <random>

#include "profinfer/error.h"
#include "profinfer/output_file.h"
#include "profinfer/vulkan_timings.h"
#include "profinfer/board.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/llama_install.h"
#include "profinfer/experiment_index.h"
#include "profinfer/store.h"
#include "profinfer/stable_random.h"
#include "profinfer/subprocess.h"
#include "profinfer/text_escape.h"
#include "profinfer/model_cache.h"
#include "profinfer/model_card.h"
#include "profinfer/number_text.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// The llama.cpp build that provides a backend.
std::string flavour_of(const std::string& backend) {
    if (backend == "cpu") return "debug";
    if (backend == "blis" || backend == "openblas" || backend == "vulkan") return backend;
    return "";
}

// The environment a backend's points run with (the recorder passes it on to llama-bench).
// ggml-vulkan hides CPU-type devices such as Mesa's lavapipe unless they are named.
std::vector<std::pair<std::string, std::string>> point_env(const SweepPoint& p) {
    if (p.at("backend") != "vulkan") return {};
    if (p.at("vkperf") == "on") return {{"GGML_VK_VISIBLE_DEVICES", "0"}, {"GGML_VK_PERF_LOGGER", "1"}};
    return {{"GGML_VK_VISIBLE_DEVICES", "0"}};
}

// Sets a point's environment for as long as it lives.
class ScopedEnv {
public:
    explicit ScopedEnv(const std::vector<std::pair<std::string, std::string>>& vars) {
        for (const auto& [k, v] : vars) {
            const char* old = std::getenv(k.c_str());
            saved_.push_back({k, old ? std::optional<std::string>(old) : std::nullopt});
            setenv(k.c_str(), v.c_str(), 1);
        }
    }
    ~ScopedEnv() {
        for (const auto& [k, v] : saved_) v ? setenv(k.c_str(), v->c_str(), 1) : unsetenv(k.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string env_prefix(const SweepPoint& p) {
    std::string s;
    for (const auto& [k, v] : point_env(p)) s += k + "=" + shell_quote(v) + " ";
    return s;
}

// CPU time (user + system) of every child process waited for so far, tracer included.
double children_cpu_s() {
    rusage u{};
    getrusage(RUSAGE_CHILDREN, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string duration_text(double s) {
    char b[32];
    if (s < 90)
        std::snprintf(b, sizeof b, "%.0f s", s);
    else
        std::snprintf(b, sizeof b, "%dm%02ds", int(s) / 60, int(s) % 60);
    return b;
}

// A point's hog: "none", "cpuN" (CPU N for the whole point) or "cpuN@S-E" (CPU N from S to
// E seconds after the point's command starts: paper Fig. 8's before / during / after).
struct Hog {
    int cpu = -1;  // -1: none
    double start_s = 0, stop_s = -1;  // stop_s < 0: until the point ends
    std::string text() const {
        if (cpu < 0) return "";
        char b[128];
        if (stop_s < 0) std::snprintf(b, sizeof b, "pinned to CPU %d", cpu);
        else std::snprintf(b, sizeof b, "pinned to CPU %d from %g s to %g s after the start", cpu, start_s, stop_s);
        return b;
    }
};

Hog point_hog(const SweepPoint& p) {
    const std::string& h = p.at("hog");
    Hog hog;
    if (h == "none") return hog;
    int cpu = -1, used = 0;
    double a = 0, b = 0;
    if (std::sscanf(h.c_str(), "cpu%d%n", &cpu, &used) == 1 && cpu >= 0 && size_t(used) == h.size()) return hog.cpu = cpu, hog;
    if (std::sscanf(h.c_str(), "cpu%d@%lf-%lf%n", &cpu, &a, &b, &used) == 3 && cpu >= 0 && size_t(used) == h.size() &&
        a >= 0 && b > a && b < 3600)
        return Hog{cpu, a, b};
    throw Error("hog is none, cpuN or cpuN@START-STOP (seconds after the point starts, e.g. cpu1@4-8), not '" + h + "'");
}

// Paper Fig. 8's interference: a process named profinfer-hog (so the trace's scheduler
// events name it) of higher priority (nice -10) that burns CPU HOG.cpu, for the whole point
// or for its window. Killed by the caller, or when the runner dies.
pid_t start_hog(const Hog& hog) {
    pid_t pid = fork();
    if (pid < 0) throw Error(std::string("cannot start the CPU hog: ") + strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        prctl(PR_SET_NAME, "profinfer-hog");
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(hog.cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
        setpriority(PRIO_PROCESS, 0, -10);
        const auto t0 = std::chrono::steady_clock::now();
        auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
        if (hog.start_s > 0) {
            const auto ns = int64_t(hog.start_s * 1e9);
            struct timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
        }
        while (hog.stop_s < 0 || since() < hog.stop_s)
            for (int i = 0; i < 1000000; ++i) asm volatile("" ::: "memory");  // spin
        _exit(0);
    }
    return pid;
}

// Asks the kernel to drop FILE's pages from the page cache (clean pages only; harmless).
void drop_from_page_cache(const fs::path& file) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// One experiment run per results folder: an exclusive lock on FOLDER/index.db.lock,
// held for the run's life (and released by the kernel however it ends). The lock file
// says who holds it.
class FolderLock {
public:
    explicit FolderLock(const fs::path& dir) {
        const fs::path path = dir / "index.db.lock";
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd_ < 0) throw Error("cannot lock " + dir.string() + ": " + path.string() + ": " + std::strerror(errno));
        if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            char holder[512] = {};
            (void)!::pread(fd_, holder, sizeof holder - 1, 0);
            ::close(fd_);
            std::string who = holder;
            while (!who.empty() && who.back() == '\n') who.pop_back();
            if (err == EWOULDBLOCK)
                throw Error(dir.string() + " is in use by another experiment run (" + (who.empty() ? "unknown" : who) +
                            "): wait for it to end, or give this one another -o");
            throw Error("cannot lock " + path.string() + ": " + std::strerror(err));
        }
        const std::string me = "profinfer pid " + std::to_string(getpid()) + ", since " +
                               std::to_string(std::time(nullptr)) + " (unix time)\n";
        if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
            // the lock holds all the same; only the holder's description is missing
        }
    }
    ~FolderLock() { ::close(fd_); }
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;

private:
    int fd_ = -1;
};

// A point's recording left running by a run that was killed (its recorder stops with the
// run that started it, but may still be finishing): it is asked to stop (SIGINT, which it
// forwards to its command) and waited for, so that nothing of it runs beside the points
// recorded now. Throws if it does not end.
void reap_orphan(const fs::path& db, const std::string& key) {
    if (!fs::exists(db)) return;
    std::string pid_text, start;
    try {
        store::Database d(db, store::Database::Mode::ReadOnly);
        if (store::run_health(d).status != store::to_string(store::RunStatus::Running)) return;  // its recorder is gone
        auto meta = d.meta();
        pid_text = meta[store::MetaKey::RecorderPid];
        start = meta[store::MetaKey::RecorderStart];
    } catch (const Error&) {
        return;  // not even a trace: nothing of ours runs for it
    }
    const pid_t pid = pid_t(std::strtol(pid_text.c_str(), nullptr, 10));
    auto alive = [&] { return pid > 0 && std::to_string(store::process_start_time(pid)) == start; };
    if (!alive()) return;
    std::cerr << "profinfer: the recording of " << key << " left by an earlier, killed run still goes on (profinfer record pid "
              << pid << "): stopping it before going on\n";
    kill(pid, SIGINT);
    for (int i = 0; i < 600 && alive(); ++i) usleep(100000);
    if (alive())
        throw Error("the recording of " + key + " left by an earlier run (profinfer record pid " + pid_text +
                    ") does not end; stop it (kill -INT " + pid_text + ") and run again");
}

}  // namespace

fs::path self_executable() {
    char self[4096] = {};
    if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) throw Error("cannot find the profinfer binary");
    return self;
}

std::string missing_for(const SweepPoint& p, const RunOptions& opt, bool install) {
    if (int cpu = point_hog(p).cpu; cpu >= 0 && cpu >= sysconf(_SC_NPROCESSORS_ONLN))
        return "a hog on CPU " + std::to_string(cpu) + ", but this machine has " +
               std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " CPUs";
    // The tools a point's tracer or program runs (a board's image may lack them).
    const std::string tracer = p.at("tracer"), program = p.at("program");
    std::string tool;
    if (tracer.rfind("bpftrace", 0) == 0 || tracer == "op-vs-bpftrace")
        tool = "bpftrace";
    else if (program == "ort")
        tool = "node";
    else if (program == "server" || program == "attach" || program == "duet")
        tool = "python3";
    if (program == "duet" && sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return "program duet: two single-thread decodes on CPUs of their own, and this machine has one CPU";
    if (!tool.empty()) {
        try {
            check_command(tool);
        } catch (const Error& e) {
            return "tracer " + tracer + ", program " + program + ": " + e.what();
        }
    }
    if (program == "server") {  // built with the debug flavour where scripts/llama.sh builds it (x64)
        try {
            LlamaInstall::locate("debug", false).program("llama-server");
        } catch (const Error& e) {
            return std::string("program server: ") + e.what();
        }
    }
    const std::string backend = p.at("backend");
    // A board's profile names what it can run: never fetch or build for it what it cannot.
    if (!opt.backends.empty() && std::find(opt.backends.begin(), opt.backends.end(), backend) == opt.backends.end())
        return "board " + opt.board + " has no '" + backend + "' backend" +
               (opt.backend_notes.empty() ? std::string() : " (" + opt.backend_notes + ")");
    const std::string flavour = flavour_of(backend);
    if (flavour.empty())
        return "backend '" + backend + "' is not provided by profinfer's scripts (cpu, blis, openblas and vulkan are)";
    fs::path bench;
    try {
        if (install) {  // a long first build is never silent
            bool here = true;
            try {
                LlamaInstall::locate(flavour, false).program("llama-bench");
            } catch (const Error&) {
                here = false;
            }
            if (!here)
                std::cerr << "profinfer: backend '" << backend << "' needs the '" << flavour
                          << "' llama.cpp build, not in the cache yet: building or unpacking it (once; a BLAS build "
                             "takes under a minute through the ccache the debug build filled, about 6 minutes on 2 cores "
                             "without it) …\n";
        }
        bench = LlamaInstall::locate(flavour, install).program("llama-bench");
    } catch (const Error& e) {
        return "backend '" + backend + "' needs the '" + flavour + "' llama.cpp build: " + e.what() +
               " (scripts/llama.sh ensure " + flavour + ")";
    }
    if (backend == "vulkan") {  // a device to run on: llama.cpp's own list of devices
        ScopedEnv env(point_env(p));
        auto r = run_process({bench.string(), "--list-devices"});
        if (r.status != 0 || r.out.find("Vulkan") == std::string::npos)
            return "backend 'vulkan': llama.cpp finds no Vulkan device here (llama-bench --list-devices: " +
                   (r.out.empty() ? r.err.substr(0, 200) : r.out.substr(0, 200)) + ")";
    }
    return "";
}

fs::path point_model(const SweepPoint& p, const std::string& scale, const fs::path& profinfer, bool create) {
    // A MoE model's file names its routing (model synth --moe-routing): "-zipf1", "-random".
    const fs::path model = cached_model_path(p.at("model"), p.at("type"), scale, p.at("routing"));
    const fs::path dir = model.parent_path();
    if (!create || fs::exists(model)) return model;
    fs::create_directories(dir);
    // A name no other writer takes: not even another machine sharing the cache (the virtual
    // boards share it, and their pids run alike).
    const fs::path tmp = model.string() + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}());
    std::cerr << "profinfer: synthesising " << model.filename().string() << " (" << scale << " scale, random weights)\n";
    auto r = run_process({profinfer.string(), "model", "synth", "--card", p.at("model"), "--type", p.at("type"), "--scale",
                          scale, "--moe-routing", p.at("routing"), "-o", tmp.string()});
    if (r.status != 0) {
        fs::remove(tmp);
        throw Error("cannot synthesise " + model.string() + ": " + r.err);
    }
    fs::rename(tmp, model);
    return model;
}

// The point's command as the board runs it: under taskset on the board's inference CPUs.
std::vector<std::string> on_board(const RunOptions& opt, std::vector<std::string> command) {
    if (opt.pin_cpus.empty()) return command;
    command.insert(command.begin(), {"taskset", "-c", cpu_list(opt.pin_cpus)});
    return command;
}

std::vector<std::string> point_command(const SweepPoint& p, const fs::path& model) {
    const auto install = LlamaInstall::locate(flavour_of(p.at("backend")), false);
    std::vector<std::string> argv{install.program("llama-bench").string(), "-m", model.string(), "-t", p.at("threads"),
                                  "-p", p.at("prompt"), "-n", p.at("gen"), "-d", p.at("ctx"), "-r", p.at("reps"), "-fa",
                                  p.at("fa"), "-ngl", p.at("ngl"), "-o", "json"};
    // Tensor placement (llama.cpp's --override-tensor: "PATTERN=BUFFER_TYPE;...") and op
    // offload off (the prompt's MatMuls stay where their weights are).
    if (p.at("ot") != "none") argv.insert(argv.end(), {"-ot", p.at("ot")});
    if (p.at("nopo") != "0") argv.insert(argv.end(), {"-nopo", p.at("nopo")});
    if (p.at("mmap") == "off") argv.insert(argv.end(), {"-mmp", "0"});
    return argv;
}

namespace {

// What this machine cannot run, per point id (a llama.cpp build a backend needs is built, once,
// into the cache, when first needed — not on a dry run).
std::map<std::string, std::string> missing_points(const std::vector<SweepPoint>& points, const RunOptions& opt) {
    std::map<std::string, std::string> missing, by_backend;
    for (const auto& p : points) {
        const std::string what = p.at("backend") + "|" + p.at("hog") + "|" + p.at("tracer") + "|" +
                                 p.at("program");  // what missing_for looks at
        auto it = by_backend.find(what);
        if (it == by_backend.end()) it = by_backend.emplace(what, missing_for(p, opt, !opt.dry_run)).first;
        if (!it->second.empty()) missing[p.id()] = it->second;
    }
    return missing;
}

// --dry-run: what would run, point by point, with what it would need.
void print_dry_run(const ExperimentSpec& spec, const RunOptions& opt, const std::vector<SweepPoint>& points,
                   std::map<std::string, std::string>& missing) {
    std::cout << spec.name << ": " << spec.title << (spec.paper.empty() ? "" : " (" + spec.paper + ")") << "\n"
              << points.size() << " points × " << (opt.rounds > 0 ? opt.rounds : spec.rounds_for(opt.quick))
              << " interleaved rounds at --level " << spec.level << (opt.quick ? " (quick)" : "") << " → "
              << (opt.out_dir / "index.db").string() << "\n";
    for (const auto& p : points) {
        std::cout << "  " << p.key();
        if (missing.count(p.id()))
            std::cout << "\n    skipped: " << missing[p.id()];
        else
            std::cout << "\n    "
                      << (p.at("program") == "llama-bench"
                              ? env_prefix(p) + shell_command(on_board(opt, point_command(p, opt.model.empty() ? point_model(p, spec.scale, opt.profinfer, false) : opt.model)))
                              : "program " + p.at("program"))
                      << (p.at("tracer") != "level" ? "\n    tracer: " + p.at("tracer") : std::string())
                      << (spec.level == "full" && !opt.counters.empty() ? "\n    counters: " + opt.counters : std::string())
                      << (point_hog(p).cpu >= 0 ? "\n    beside a CPU hog at nice -10 " + point_hog(p).text()
                                          : std::string())
                      << (p.at("mem") != "none" ? "\n    in a memory cgroup limited to " + p.at("mem") +
                                                      " (record --memory-limit), the model dropped from the page cache first"
                                                : std::string());
        std::cout << "\n";
    }
}

// The index of a study being run, and what a run writes into it.
struct RunIndex {
    store::ExperimentIndex& index;
    void put(const SweepPoint& p, int round, const std::string& status, const std::string& db, const std::string& command,
             const std::string& reason, double started, double ended, const std::string& bench) {
        index.put({p.id(), round, p.key(), nlohmann::json(p.params).dump(), status, db, command, reason, started, ended,
                   ended - started, bench, std::nullopt});
    }
};

int64_t monotonic_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// What `profinfer estimate` predicts for LEVEL from the run's own trace DB and this machine's
// costs, measured now (the run has ended: nothing else of the study runs), noted in the trace.
// As the duet peer asks it (experiments/peers/duet_peer.py); a failure fails the run.
void note_prediction(const RunOptions& opt, const fs::path& db, const std::string& level) {
    const ProcessResult e = run_process({opt.profinfer.string(), "estimate", db.string(), "--json", "--seconds", "1"});
    if (e.status != 0) throw Error("profinfer estimate " + db.string() + " exited with status " + std::to_string(e.status) + ": " + e.err);
    const auto j = nlohmann::json::parse(e.out, nullptr, false);
    if (j.is_object() && j.contains("levels"))
        for (const auto& l : j["levels"])
            if (l.value("level", "") == level && l.contains("slowdown_pct") && l["slowdown_pct"].is_number())
                return store::note_predicted_slowdown(db, l["slowdown_pct"].get<double>());
    throw Error("profinfer estimate " + db.string() + " gave no prediction for level " + level + ": " + e.out);
}

// One run of point P in ROUND into DB (HEAD: its progress line; LEFT: runs left after it, for
// the ETA): the workload run, beside its hog and bpftrace floor, and its outcome indexed.
void run_point(const ExperimentSpec& spec, const RunOptions& opt, RunIndex& ix, const SweepPoint& p, int round,
               const fs::path& db, const std::string& head, int left, RunReport& rep) {
    store::ExperimentIndex& index = ix.index;
    const fs::path model = p.at("program") == "kernel-roof" ? fs::path()  // no model: a kernel alone
                           : opt.model.empty()               ? point_model(p, spec.scale, opt.profinfer, true)
                                                             : opt.model;
    for (const char* suffix : {"", "-wal", "-shm", ".nodes.csv"}) fs::remove(db.string() + suffix);  // an interrupted attempt
    Workload w = workload(spec, opt, p, model, db);
    w.argv = on_board(opt, w.argv);
    if (p.at("mem") != "none") drop_from_page_cache(model);  // pages cached earlier are charged to no limit
    const double mean = index.mean_seconds();
    std::cerr << head << (mean > 0 ? " (ETA " + duration_text(mean * left) + ")" : "") << " …\n";
    const double started = now_s();
    std::vector<std::pair<std::string, std::string>> env = point_env(p);
    env.insert(env.end(), w.env.begin(), w.env.end());
    std::string shown;
    for (const auto& [k, v] : env) shown += k + "=" + shell_quote(v) + " ";
    shown += shell_command(on_board(opt, w.program));
    ix.put(p, round, "running", w.traced ? db.string() : "", shown, "", started, started, "");
    const Hog hog = point_hog(p);
    const int64_t hog_t0 = monotonic_ns();  // the hog counts its window from its fork
    const pid_t hog_pid = hog.cpu >= 0 ? start_hog(hog) : -1;
    ProcessResult r;
    const double cpu_before = children_cpu_s();
    double cpu_s = 0;  // the run's, bpftrace beside it included; the hog's not (not yet waited for)
    try {
        ScopedEnv scoped(env);
        std::optional<BpftraceFloor> floor;
        if (!w.bpftrace.empty()) floor.emplace(w.bpftrace, w.stream);
        r = run_process(w.argv);
        if (floor) floor->stop();
        cpu_s = children_cpu_s() - cpu_before;
    } catch (...) {
        if (hog_pid > 0) kill(hog_pid, SIGKILL), waitpid(hog_pid, nullptr, 0);
        throw;
    }
    if (hog_pid > 0) kill(hog_pid, SIGKILL), waitpid(hog_pid, nullptr, 0);
    const double ended = now_s();
    if (hog_pid > 0 && r.status == 0 && w.traced)  // the trace says when the hog ran (Fig. 8)
        store::note_hog_window(db, {hog_t0 + int64_t(hog.start_s * 1e9),
                                    hog.stop_s < 0 ? monotonic_ns() : hog_t0 + int64_t(hog.stop_s * 1e9)});
    if (r.status == 0 && p.at("backend") == "vulkan" && p.at("vkperf") == "on" && w.traced)  // the logger's device times (Fig. 12)
        OutputFile::write(vulkan_timings_file(db), r.err);
    if (r.status == 0 && w.traced && !w.predict_level.empty()) try {
            note_prediction(opt, db, w.predict_level);
        } catch (const Error& e) {
            r.status = 1, r.err = e.what();  // the run fails, saying why
        }
    if (r.status == 0) {
        ix.put(p, round, "done", w.traced ? db.string() : "", shown, "", started, ended, r.out);
        index.set_cpu(p.id(), round, cpu_s);
        ++rep.done;
        std::cerr << "    done in " << duration_text(ended - started) << "\n";
    } else {
        std::string why = r.err.empty() ? "exit status " + std::to_string(r.status) : r.err;
        while (!why.empty() && why.back() == '\n') why.pop_back();
        if (auto nl = why.rfind('\n'); nl != std::string::npos) why = why.substr(nl + 1);  // the last line says it
        ix.put(p, round, "failed", w.traced ? db.string() : "", shown, why, started, ended, r.out);
        ++rep.failed;
        std::cerr << "    failed: " << why << "\n";
    }
}

}  // namespace

RunReport run_experiment(const ExperimentSpec& spec, const RunOptions& opt) {
    const auto points = spec.points(opt.quick);
    RunReport rep;
    rep.points = int(points.size());
    // Refuse (or, quick, skip) what this machine cannot run, before running anything.
    std::map<std::string, std::string> missing = missing_points(points, opt);
    if (!missing.empty() && !opt.quick && !opt.dry_run)
        throw Error(spec.name + ": " + std::to_string(missing.size()) + " of " + std::to_string(points.size()) +
                    " points cannot run here: " + missing.begin()->second + " (--quick skips them)");
    if (opt.dry_run) {
        print_dry_run(spec, opt, points, missing);
        return rep;
    }
    fs::create_directories(opt.out_dir / "points");
    FolderLock lock(opt.out_dir);
    store::ExperimentIndex index(opt.out_dir / "index.db", store::ExperimentIndex::Mode::Write);
    RunIndex ix{index};
    const int rounds = opt.rounds > 0 ? opt.rounds : spec.rounds_for(opt.quick);
    rep.rounds = rounds;
    auto db_of = [&](const SweepPoint& p, int round) {
        return opt.out_dir / "points" / (p.id() + "-r" + std::to_string(round) + ".db");
    };
    for (int round = 1; round <= rounds; ++round)
        for (const auto& p : points)
            if (index.status(p.id(), round) == "running") reap_orphan(db_of(p, round), p.key());
    index.set_fact("name", spec.name);
    index.set_fact("title", spec.title);
    index.set_fact("paper", spec.paper);
    index.set_fact("level", spec.level);
    index.set_fact("scale", spec.scale);
    index.set_fact("board", opt.board);
    index.set_fact("quick", opt.quick ? "1" : "0");
    index.set_fact("rounds", std::to_string(rounds));
    // The index is committed with the results, the trace DBs are not: on a fresh clone the
    // runs the index calls done have lost their traces, and the study is recorded again whole
    // (untraced runs too, so that every round of it comes from this machine and this time).
    bool traces_gone = false;
    for (int round = 1; round <= rounds && !traces_gone; ++round)
        for (const auto& p : points)
            if (is_traced(p) && index.status(p.id(), round) == "done" && !fs::exists(db_of(p, round))) {
                traces_gone = true;
                std::cerr << "profinfer: " << spec.name << ": runs the index calls done have no trace DB here (a fresh "
                          << "clone?): recording the study again\n";
                break;
            }
    // One machine per study: more rounds are recorded only on the machine the index names.
    {
        auto facts = index.facts();
        bool work_left = traces_gone;
        for (int round = 1; round <= rounds && !work_left; ++round)
            for (const auto& p : points)
                if (index.status(p.id(), round) != "done" && !missing.count(p.id())) work_left = true;
        const bool recorded = !index.done_runs().empty() && !traces_gone;
        if (!opt.machine.empty() && work_left) {
            if (recorded && facts.count("machine") && facts["machine"] != opt.machine)
                throw Error(spec.name + ": its recorded rounds are from another machine (" + facts["machine"] + "); this is " +
                            opt.machine + ": more rounds here would mix two machines in one study. Record it again here "
                            "(move " + (opt.out_dir / "index.db").string() + " away) or under a board name of its own "
                            "(-o results/NAME/" + spec.name + ")");
            if (recorded && !facts.count("machine"))
                index.set_fact("machine_note", "rounds recorded before its index named the machine (2026-12-06): theirs is not known");
            if (!recorded) index.set_fact("machine_note", "");
            index.set_fact("machine", opt.machine);
            if (std::isfinite(opt.trap_ns)) index.set_fact("trap_us", format_double(opt.trap_ns / 1000, "%.2f"));
        }
    }
    const int total = rounds * int(points.size());
    int k = 0, left = total;
    for (int round = 1; round <= rounds; ++round) {
        for (size_t i : round_order(spec.name, round, points.size())) {
            const auto& p = points[i];
            ++k;
            const std::string head = "[round " + std::to_string(round) + "/" + std::to_string(rounds) + ", " +
                                     std::to_string(k) + "/" + std::to_string(total) + "] " + p.key();
            const fs::path db = db_of(p, round);
            if (index.status(p.id(), round) == "done" && !traces_gone) {
                ++rep.already_done;
                --left;
                continue;
            }
            if (auto it = missing.find(p.id()); it != missing.end()) {
                ix.put(p, round, "skipped", "", "", it->second, now_s(), now_s(), "");
                if (round == 1) std::cerr << head << ": skipped: " << it->second << "\n";
                ++rep.skipped;
                --left;
                continue;
            }
            run_point(spec, opt, ix, p, round, db, head, left, rep);
            --left;
        }
    }
    return rep;
}

std::vector<size_t> round_order(const std::string& spec_name, int round, size_t n) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    // Round 1 in the spec's order, then a Fisher–Yates shuffle seeded by the spec's name and
    // the round.
    if (round <= 1) return order;
    StableRandom rng{fnv1a(spec_name + "#" + std::to_string(round))};
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    return order;
}

}  // namespace profinfer
