// What one run of a study's point executes: its program (llama-bench, or a peer: llama.cpp's
// eval callback, ONNX Runtime) under its tracer (profinfer record at a level or an ablation,
// a bpftrace floor beside it, a peer's own profiler, or nothing).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/knobs.h"
#include "profinfer/llama_install.h"
#include "profinfer/number_text.h"
#include "profinfer/subprocess.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

// Windows of the paired runs (record --alternate): recorded against trap-only windows of
// 8 calls; against windows with the probes out, 32 (a switch and its aftermath take ~25).
constexpr int kPairedWindow = 8, kDetachWindow = 32;
// Requests per run of the program server, whatever the clients: the same work at every point.
constexpr int kServeRequests = 16;
// Program attach: seconds per window and pairs of windows (attached, detached) per run.
constexpr int kAttachWindow = 4, kAttachPairs = 2;
// Tracer none-start-lag: seconds the untraced side of an A/A duet starts after the traced one,
// as in a launched run (profinfer's release of its command: start_offset_s 0.115-0.12 s in
// overhead-duet-launch, 2026-12-07).
constexpr double kLaunchStartLagS = 0.12;

// The node hooks profinfer's operator level probes, as bpftrace names them: the floor counts
// or prints hits of the same functions (paper Table 5's bpftrace comparison).
// The point's llama.cpp build, for a bpftrace floor (TRACER) on its libraries: one CPU variant.
LlamaInstall floor_install(const SweepPoint& p, const std::string& tracer) {
    auto install = LlamaInstall::locate(p.at("backend") == "cpu" ? "debug" : p.at("backend"), false);
    if (install.libggml_cpu.size() != 1)
        throw Error("tracer " + tracer + " needs a llama.cpp build with one CPU library; " + install.flavour + " has " +
                    std::to_string(install.libggml_cpu.size()));
    return install;
}

std::string bpftrace_script(const SweepPoint& p, bool stream) {
    const std::string lib = floor_install(p, "bpftrace").libggml_cpu.front().string();
    const std::string action = stream ? R"({ printf("%d %d %llu\n", tid, cpu, nsecs); })" : "{ @[tid] = count(); }";
    return "uprobe:" + lib + ":ggml_cpu_extra_compute_forward, uprobe:" + lib +
           ":ggml_compute_forward_rms_norm_mul_fused " + action;
}

// The graph level's hooks (llama_decode, ggml_backend_graph_compute_async, ggml_graph_compute:
// entries and returns), counted by bpftrace: the graph level's floor (duet tracer bpftrace-graph).
std::string bpftrace_graph_script(const SweepPoint& p) {
    const auto install = floor_install(p, "bpftrace-graph");
    const std::vector<std::pair<std::string, std::string>> hooks = {
        {install.libllama.string(), "llama_decode"},
        {install.libggml_base.string(), "ggml_backend_graph_compute_async"},
        {install.libggml_cpu.front().string(), "ggml_graph_compute"}};
    std::string script;
    for (const char* kind : {"uprobe", "uretprobe"})
        for (const auto& [lib, fn] : hooks) script += (script.empty() ? "" : ", ") + std::string(kind) + ":" + lib + ":" + fn;
    return script + " { @[tid] = count(); }";
}

}  // namespace

BpftraceFloor::BpftraceFloor(const std::string& script, bool stream) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot start bpftrace: ") + std::strerror(errno));
    pid_ = fork();
    if (pid_ < 0) throw Error(std::string("cannot start bpftrace: ") + std::strerror(errno));
    if (pid_ == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the run
        dup2(fds[1], STDOUT_FILENO);
        // Its complaints at exit (detaching from a library the run has unmapped) are noise here.
        if (int null = ::open("/dev/null", O_WRONLY); null >= 0) dup2(null, STDERR_FILENO);
        close_inherited_fds_at_exec();
        execlp("bpftrace", "bpftrace", "-e", script.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    ::close(fds[1]);
    out_ = fdopen(fds[0], "r");
    // "Attaching N probes..." once they are in place; then the run may start.
    char line[4096];
    bool attached = false;
    while (!attached && fgets(line, sizeof line, out_)) attached = std::strncmp(line, "Attaching", 9) == 0;
    if (!attached) {
        stop();
        throw Error("bpftrace did not attach its probes (is it installed? apt-get install bpftrace)");
    }
    // The streaming floor prints a line per hit: read to the end, as a consumer would.
    if (stream) reader_ = std::thread([f = out_] {
        char buf[65536];
        while (fread(buf, 1, sizeof buf, f) > 0) {
        }
    });
}

int BpftraceFloor::stop() {
    if (pid_ <= 0) return status_;
    kill(pid_, SIGINT);
    // An end that hangs is cut after 30 s (a bpftrace once sat in epoll_wait for 9 minutes
    // after its SIGINT, 2026-12-06, holding the study up); its output is not what is measured.
    int st = 0;
    bool reaped = false;
    for (int i = 0; i < 300 && !(reaped = waitpid(pid_, &st, WNOHANG) == pid_); ++i) usleep(100'000);
    if (!reaped) kill(pid_, SIGKILL);
    if (reader_.joinable()) reader_.join();
    else {
        char buf[4096];
        while (out_ && fread(buf, 1, sizeof buf, out_) > 0) {
        }
    }
    if (!reaped) waitpid(pid_, &st, 0);
    pid_ = -1;
    if (out_) fclose(out_), out_ = nullptr;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
}

BpftraceFloor::~BpftraceFloor() { stop(); }

bool is_traced(const SweepPoint& p) {
    const std::string& tracer = p.at("tracer");
    return p.at("program") != "attach" && p.at("program") != "duet" && !(tracer == "none" || tracer == "none-again" || tracer == "evalcb" || tracer == "dump-dot" || tracer == "ort-profile" ||
             tracer == "bpftrace" || tracer == "bpftrace-stream");
}

namespace {

// What a tracer records with: the level and the record options it adds (the tracers' one
// vocabulary: a level itself, budget-P, the ablations and paired measures of the overhead
// studies, full-exact). LEVEL for tracer "level" is the spec's.
struct Recording {
    std::string level;
    std::vector<std::string> args;
};
Recording recording_of(const std::string& tracer, const std::string& spec_level) {
    if (tracer == "level") return {spec_level, {}};
    if (tracer == "full-exact") return {"full", {"--wait", "exact"}};
    if (tracer.rfind("budget-", 0) == 0) return {"op", {"--budget", tracer.substr(7)}};
    // The consumer's SQLite work held until the target has stopped.
    if (tracer == "op-defer") return {"op", {"--defer-mb", "512"}};
    // Stored as read, at SCHED_IDLE (op's default before --consumer hold, 2026-12-06).
    if (tracer == "op-idle") return {"op", {"--consumer", "idle"}};
    // Against the floor (duet): op on one side, the bpftrace floor on the other.
    if (tracer == "op-vs-bpftrace") return {"op", {}};
    // op-sampled on a timer of its own at the rate its default used before the tick.
    if (tracer == "op-sampled-timer") return {"op-sampled", {"--sample-hz", "250"}};
    // The decomposition of op's cost: probes that trap and return, or do all but send.
    if (tracer == "op-trap" || tracer == "op-nosend") return {"op", {"--ablate", tracer == "op-trap" ? "trap" : "send"}};
    // The A/A duet with the untraced side started as late as a launched run's (its start order alone).
    if (tracer == "none-start-lag") return {"none", {}};
    // The level attached to the running command (record --pid), not launched by profinfer.
    if (tracer == "token-attached" || tracer == "graph-attached") return {tracer.substr(0, tracer.find('-')), {}};
    // Recorded at token level with no probe in the target: the cost of being recorded.
    if (tracer == "noprobe" || tracer == "noprobe-apart") return {"token", {"--ablate", "attach"}};
    if (tracer.size() > 7 && tracer.substr(tracer.size() - 7) == "-paired") {
        const bool detach = tracer.find("detach") != std::string::npos;
        Recording r{tracer.rfind("full", 0) == 0 ? "full" : "op",
                    {"--alternate", detach ? std::to_string(kDetachWindow) + ":detach" : std::to_string(kPairedWindow)}};
        if (tracer.rfind("trap", 0) == 0) r.args.insert(r.args.end(), {"--ablate", "trap"});
        return r;
    }
    return {tracer, {}};
}

std::vector<std::string> evalcb_program(const SweepPoint& p, const fs::path& model, const fs::path& db, Workload& w) {
    const std::string& tracer = p.at("tracer");
    if (tracer != "none" && tracer != "evalcb" && tracer != "dump-dot" && tracer != "op")
        throw Error("program evalcb runs under tracer none, evalcb, dump-dot or op, not " + tracer);
    const std::string mode = tracer == "evalcb" ? "callback" : tracer == "dump-dot" ? "dump-dot" : "none";
    std::vector<std::string> program = {evalcb_peer().string(), model.string(), "--threads", p.at("threads"), "--tokens",
                                        p.at("gen"), "--mode", mode};
    if (p.at("mmap") == "off") program.push_back("--no-mmap");  // warm: the weights read in, as llama-bench -mmp 0
    if (tracer == "evalcb") {
        w.nodes_csv = db.string() + ".nodes.csv";  // the callback's node times, for fidelity
        program.insert(program.end(), {"--nodes-csv", w.nodes_csv.string()});
    }
    return program;
}

std::vector<std::string> ort_program(const ExperimentSpec& spec, const SweepPoint& p, Workload& w) {
    const std::string& tracer = p.at("tracer");
    if (tracer != "none" && tracer != "ort-profile")
        throw Error("program ort runs under tracer none or ort-profile, not " + tracer);
    const std::string scripts = std::string(compiled_in(CompiledIn::SourceDir)) + "/scripts/ort.sh";
    // At the scale of the study's GGUF models: the card's tiny variant on a board whose
    // profile runs tiny ones (a 1B model under an emulator takes 10 minutes a run).
    std::vector<std::string> make = {scripts, "model", std::string(compiled_in(CompiledIn::SourceDir)) + "/models/cards/" + p.at("model") + ".toml"};
    if (spec.scale == "tiny") make.push_back("tiny");
    const std::string onnx = last_output_line(make);
    w.env.push_back({"NODE_PATH", last_output_line({scripts, "node-path"})});
    std::vector<std::string> program = {"node", std::string(compiled_in(CompiledIn::SourceDir)) + "/experiments/peers/ort_peer.js", onnx,
                                        "--threads", p.at("threads"), "--prompt", p.at("prompt"), "--tokens", p.at("gen")};
    if (tracer == "ort-profile") program.push_back("--profile");
    return program;
}

std::vector<std::string> server_program(const SweepPoint& p, const fs::path& model) {
    const std::string& tracer = p.at("tracer");
    if (tracer != "none" && tracer != "level" && tracer != "token" && tracer != "graph" && tracer != "op" && tracer != "full")
        throw Error("program server runs under tracer none or a level (token, graph, op, full), not " + tracer);
    // llama-server under a bounded load of CLIENTS concurrent clients: the peer starts it,
    // loads it and stops it; a recording follows the launched tree to the server.
    return {"python3", std::string(compiled_in(CompiledIn::SourceDir)) + "/experiments/peers/serve_peer.py",
            LlamaInstall::locate("debug", false).program("llama-server").string(), model.string(), "--threads",
            p.at("threads"), "--clients", p.at("clients"), "--requests", std::to_string(kServeRequests)};
}

// One long-running target, windows with a recorder attached and without, in the same
// process: the peer attaches `profinfer record --pid` itself (no DB kept).
std::vector<std::string> attach_program(const RunOptions& opt, const SweepPoint& p, const fs::path& model) {
    const std::string& tracer = p.at("tracer");
    if (tracer != "none" && tracer != "token" && tracer != "graph" && tracer != "op-sampled" && tracer != "op" &&
        tracer != "full" && tracer != "bpftrace")
        throw Error("program attach runs under tracer none (the A/A control), a level (token, graph, op-sampled, op, full) or "
                    "bpftrace (the count-only floor on the operator hooks), not " + tracer);
    std::vector<std::string> program = {
        "python3", std::string(compiled_in(CompiledIn::SourceDir)) + "/experiments/peers/attach_peer.py", evalcb_peer().string(),
        model.string(), "--level", tracer, "--profinfer", opt.profinfer.string(), "--board", opt.board, "--threads",
        p.at("threads"), "--tokens", p.at("gen"), "--window", std::to_string(kAttachWindow), "--pairs",
        std::to_string(kAttachPairs)};
    if (tracer == "bpftrace") program.insert(program.end(), {"--bpftrace", bpftrace_script(p, false)});
    return program;
}

// Two single-thread streaming decodes at once, one per CPU, the traced one under `profinfer
// record` on its own copy of the libraries: the peer measures both over common windows,
// swapping their CPUs between windows (no DB kept). none: the A/A duet; bpftrace: the floor
// on the copy (bpftrace-graph: on the graph level's hooks); op-vs-bpftrace: op on the copy, the
// floor on the other side's libraries; watch:
// `profinfer watch --pid` of the traced side at its defaults (its level, segments, metrics);
// LEVEL-attached: `profinfer record --pid` of the traced side, which the peer started.
std::vector<std::string> duet_program(const ExperimentSpec& spec, const RunOptions& opt, const SweepPoint& p,
                                      const fs::path& model) {
    const std::string& tracer = p.at("tracer");
    if (p.at("threads") != "1") throw Error("program duet runs one thread per side (threads = [1]), not " + p.at("threads"));
    static const std::set<std::string> kTracers = {"none",     "bpftrace",  "token",   "graph",   "op-sampled",
                                                   "op",       "full",      "op-trap", "op-nosend", "op-defer",
                                                   "op-idle",  "noprobe",  "noprobe-apart", "op-sampled-timer",
                                                   "op-vs-bpftrace", "watch", "token-attached", "graph-attached",
                                                   "bpftrace-graph", "none-start-lag"};
    if (!kTracers.count(tracer) && tracer.rfind("budget-", 0) != 0)
        throw Error("program duet runs under tracer none (the A/A duet), a level (token, graph, op-sampled, op, full), "
                    "budget-P, op-trap, op-nosend, op-defer, op-idle, noprobe, noprobe-apart, op-sampled-timer, bpftrace (the "
                    "floor), bpftrace-graph (the floor on the graph level's hooks), op-vs-bpftrace (op against the floor), watch (profinfer watch at its defaults), token-attached or "
                    "graph-attached (record --pid of the running command), none-start-lag (the A/A, the untraced side "
                    "started as late as a launched run's), not " + tracer);
    std::vector<std::string> program = {"python3", std::string(compiled_in(CompiledIn::SourceDir)) + "/experiments/peers/duet_peer.py",
                                        evalcb_peer().string(), model.string(), "--profinfer", opt.profinfer.string(),
                                        "--board", opt.board, "--tokens", p.at("gen")};
    const Recording r = recording_of(tracer, "");
    for (const auto& a : r.args) program.push_back("--record-arg=" + a);
    // apart: profinfer's own threads on the untraced side's CPU.
    if (tracer == "noprobe-apart") program.push_back("--recorder-apart");
    if (tracer.size() > 9 && tracer.substr(tracer.size() - 9) == "-attached") program.push_back("--attach");
    // A launched run's untraced side starts once profinfer has released the traced command:
    // 0.115-0.12 s later on the machine where overhead-duet-launch ran (its start_offset_s).
    if (tracer == "none-start-lag") {
        if (!spec.duet_load.empty() && spec.duet_load != "together")
            throw Error("tracer none-start-lag is the control of the duets' together start, not of [duet] load = " + spec.duet_load);
        program.insert(program.end(), {"--start-after=" + format_double(kLaunchStartLagS), "--load=together"});
    } else if (!spec.duet_load.empty()) {
        program.push_back("--load=" + spec.duet_load);
    }
    program.insert(program.end(), {"--level", tracer == "bpftrace-graph" ? "bpftrace" : r.level});
    if (tracer == "bpftrace") program.insert(program.end(), {"--bpftrace", bpftrace_script(p, false)});
    if (tracer == "bpftrace-graph") program.insert(program.end(), {"--bpftrace", bpftrace_graph_script(p)});
    if (tracer == "op-vs-bpftrace") program.insert(program.end(), {"--against-bpftrace", bpftrace_script(p, false)});
    return program;
}

}  // namespace

fs::path evalcb_peer() { return PROFINFER_EVALCB_PEER; }
fs::path kernel_roof_tool() { return PROFINFER_KERNEL_ROOF; }

Workload workload(const ExperimentSpec& spec, const RunOptions& opt, const SweepPoint& p, const fs::path& model,
                  const fs::path& db) {
    Workload w;
    const std::string& program = p.at("program");
    const std::string& tracer = p.at("tracer");
    if (tracer == "none-again" && program != "llama-bench")
        throw Error("tracer none-again (a second untraced run in the same round: the A/A of separate runs) belongs to "
                    "program llama-bench; a duet's A/A is tracer none");
    if (program == "llama-bench") {
        if (tracer == "evalcb" || tracer == "dump-dot" || tracer == "ort-profile")
            throw Error("tracer " + tracer + " belongs to another program than llama-bench");
        w.program = point_command(p, model);
    } else if (program == "evalcb") {
        w.program = evalcb_program(p, model, db, w);
    } else if (program == "ort") {
        w.program = ort_program(spec, p, w);
    } else if (program == "server") {
        w.program = server_program(p, model);
    } else if (program == "attach" || program == "duet") {
        w.program = program == "attach" ? attach_program(opt, p, model) : duet_program(spec, opt, p, model);
        w.argv = w.program;  // the peer records (or not) by itself
        return w;
    } else if (program == "kernel-roof") {
        // No model: ggml's kernel alone, the point's weight type at its thread count.
        if (tracer != "none") throw Error("program kernel-roof times a kernel alone: its tracer is none, not " + tracer);
        w.program = {kernel_roof_tool().string(), "--types", p.at("type"), "--threads", p.at("threads")};
        if (opt.quick) w.program.push_back("--quick");  // one allocation, shorter trials: a quick run is no evidence
        w.argv = w.program;
        return w;
    } else {
        throw Error("program is llama-bench, evalcb, ort, server, attach, duet or kernel-roof, not " + program);
    }
    if (tracer == "bpftrace" || tracer == "bpftrace-stream") {
        w.bpftrace = bpftrace_script(p, tracer == "bpftrace-stream");
        w.stream = tracer == "bpftrace-stream";
    }
    w.traced = is_traced(p);
    if (!w.traced) {
        w.argv = w.program;
        return w;
    }
    const Recording r = recording_of(tracer, spec.level);
    // --stop-with-parent: a run killed mid-point leaves no recording behind it.
    w.argv = {opt.profinfer.string(), "record", "--stop-with-parent", "--level", r.level, "--board", opt.board, "-o", db.string()};
    w.argv.insert(w.argv.end(), r.args.begin(), r.args.end());
    if (r.level == "full" && !opt.counters.empty()) w.argv.insert(w.argv.end(), {"--counters", opt.counters});
    if (!spec.wait.empty() && tracer == "level") w.argv.insert(w.argv.end(), {"--wait", spec.wait});
    if (p.at("mem") != "none") w.argv.insert(w.argv.end(), {"--memory-limit", p.at("mem")});
    w.argv.push_back("--");
    w.argv.insert(w.argv.end(), w.program.begin(), w.program.end());
    // A level as record takes it by default: what `profinfer estimate` predicts for it (not
    // in a quick run: no intervals to hold it against).
    static const std::set<std::string> kPredicted = {"token", "graph", "op-sampled", "op", "full"};
    if (r.args.empty() && kPredicted.count(r.level) && spec.predicted && !opt.quick) w.predict_level = r.level;
    return w;
}

}  // namespace profinfer
