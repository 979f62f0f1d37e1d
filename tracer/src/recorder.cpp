#include "profinfer/recorder.h"

#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "elf_symbols.h"
#include "launcher.h"
#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/store.h"
#include "target.h"
#include "tracer_bpf.skel.h"

namespace fs = std::filesystem;

namespace profinfer {

TraceLevel parse_trace_level(const std::string& s) {
    if (s == "token") return TraceLevel::Token;
    if (s == "graph") return TraceLevel::Graph;
    if (s == "op") return TraceLevel::Op;
    if (s == "full") return TraceLevel::Full;
    throw Error("unknown level '" + s + "' (token, graph, op, full)");
}

const char* to_string(TraceLevel l) {
    switch (l) {
        case TraceLevel::Token: return "token";
        case TraceLevel::Graph: return "graph";
        case TraceLevel::Op: return "op";
        case TraceLevel::Full: return "full";
    }
    return "?";
}

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// One uprobe or uretprobe the tracer attaches in every mapped library of ROLE.
struct Probe {
    const char* symbol;
    LibRole role;
    bool retprobe;
    bpf_program* (*program)(tracer_bpf*);
    TraceLevel min_level;
};

const Probe kProbes[] = {
    {"llama_decode", LibRole::Llama, false, [](tracer_bpf* s) { return s->progs.llama_decode_enter; }, TraceLevel::Token},
    {"llama_decode", LibRole::Llama, true, [](tracer_bpf* s) { return s->progs.llama_decode_exit; }, TraceLevel::Token},
};

const char* kind_name(uint32_t kind) {
    switch (kind) {
        case PI_EV_TOKEN: return "token";
        case PI_EV_LIBRARY: return "library";
    }
    return "unknown";
}

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
    if (level == LIBBPF_DEBUG) return 0;
    if (!std::getenv("PROFINFER_LIBBPF_VERBOSE") && level == LIBBPF_INFO) return 0;
    return vfprintf(stderr, fmt, args);
}

class Recorder {
public:
    explicit Recorder(const RecordOptions& o) : opts_(o), db_(o.output, store::Database::Mode::Create) {
        set_meta("status", store::to_string(store::RunStatus::Running));
        set_meta("level", to_string(o.level));
        set_meta("board", o.board);
        set_meta("events_version", std::to_string(PI_EVENTS_VERSION));
        set_meta("clock", "CLOCK_MONOTONIC");
        set_meta("started_at", std::to_string(std::time(nullptr)));
        utsname u{};
        uname(&u);
        set_meta("host", u.nodename);
        set_meta("kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
        std::string cmd;
        for (const auto& a : o.command) cmd += (cmd.empty() ? "" : " ") + a;
        if (!cmd.empty()) set_meta("command", cmd);
    }

    ~Recorder() {
        for (auto* l : links_) bpf_link__destroy(l);
        ring_buffer__free(rb_);
        tracer_bpf__destroy(skel_);
    }

    int run() {
        if (opts_.level != TraceLevel::Token)
            throw Error(std::string("--level ") + to_string(opts_.level) +
                        " is not implemented yet by this profinfer (token is)");
        if (opts_.pid) {
            pid_ = *opts_.pid;
            if (*opts_.pid <= 0 || !process_exists(pid_)) throw Error("no process with pid " + std::to_string(pid_));
            set_meta("command", read_cmdline(pid_));
        } else {
            child_ = std::make_unique<LaunchedProcess>(opts_.command);
            pid_ = child_->pid();
        }
        set_meta("pid", std::to_string(pid_));
        load_bpf();
        attach_loader_watch();
        if (opts_.pid) {
            if (!attach_new_libraries() && !seen_role(LibRole::Llama))
                throw Error("process " + std::to_string(pid_) + " (" + process_comm(pid_) +
                            ") has not loaded libllama: is it a llama.cpp program?");
        } else {
            child_->release();
        }
        install_signal_handlers();
        int status = poll_until_exit();
        return finish(status);
    }

    void fail(const std::string& why) {
        try {
            if (child_) child_->signal(SIGKILL);
            set_meta("error", why);
            set_meta("status", store::to_string(store::RunStatus::Failed));
            commit();
        } catch (...) {
        }
    }

private:
    void set_meta(const std::string& k, const std::string& v) {
        store::Statement st(db_.handle(), "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
        st.bind(1, k).bind(2, v).run();
    }

    static std::string read_cmdline(pid_t pid) {
        std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
        std::string s((std::istreambuf_iterator<char>(f)), {});
        for (auto& c : s)
            if (c == '\0') c = ' ';
        while (!s.empty() && s.back() == ' ') s.pop_back();
        return s;
    }

    void load_bpf() {
        libbpf_set_print(libbpf_print);
        skel_ = tracer_bpf__open();
        if (!skel_) throw_errno("opening the BPF object");
        skel_->rodata->target_tgid = pid_;
        skel_->rodata->stop_on_library_load = true;
        int err = tracer_bpf__load(skel_);
        if (err) {
            if (err == -EPERM || err == -EACCES)
                throw Error("loading BPF programs was refused: run as root or grant CAP_BPF and CAP_PERFMON");
            throw Error(std::string("loading BPF programs failed: ") + std::strerror(-err));
        }
        rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), &Recorder::on_event_thunk, this, nullptr);
        if (!rb_) throw_errno("creating the ring buffer consumer");
    }

    bpf_link* attach(bpf_program* prog, const fs::path& lib, const char* symbol, bool ret) {
        LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret, .func_name = symbol);
        bpf_link* l = bpf_program__attach_uprobe_opts(prog, pid_, lib.c_str(), 0, &uo);
        if (!l) return nullptr;
        links_.push_back(l);
        return l;
    }

    void record_probe(const std::string& symbol, const std::string& lib, const char* kind, bool ok,
                      const std::string& reason) {
        store::Statement st(db_.handle(),
                            "INSERT INTO probes(symbol, library, kind, attached, reason) VALUES (?, ?, ?, ?, ?)");
        st.bind(1, symbol).bind(2, lib).bind(3, std::string(kind)).bind(4, int64_t{ok});
        ok ? st.bind_null(5) : st.bind(5, reason);
        st.run();
    }

    void attach_loader_watch() {
        fs::path ld = own_dynamic_loader();
        int err = 0;
        if (!attach(skel_->progs.dl_debug_state, ld, "_dl_debug_state", false)) err = errno;
        record_probe("_dl_debug_state", ld, "uprobe", err == 0, err ? std::strerror(err) : "");
        if (err)
            throw Error("cannot attach to " + ld.string() + ":_dl_debug_state (" + std::strerror(err) +
                        "); without it libraries loaded later would be missed");
    }

    bool seen_role(LibRole r) const {
        for (const auto& [path, role] : libraries_)
            if (role == r) return true;
        return false;
    }

    // Looks at the target's mappings and attaches to every library not seen before.
    // Returns whether a llama library was new.
    bool attach_new_libraries() {
        bool new_llama = false;
        for (const auto& lib : mapped_libraries(pid_)) {
            if (lib.role == LibRole::Other || libraries_.count(lib.path)) continue;
            libraries_[lib.path] = lib.role;
            new_llama = true;
            ElfSymbols elf(lib.path);
            store::Statement st(db_.handle(), "INSERT OR REPLACE INTO libraries(path, role, build_id) VALUES (?, ?, ?)");
            st.bind(1, lib.path.string()).bind(2, std::string(to_string(lib.role))).bind(3, elf.build_id()).run();
            for (const auto& p : kProbes) {
                if (p.role != lib.role || p.min_level > opts_.level) continue;
                const char* kind = p.retprobe ? "uretprobe" : "uprobe";
                if (!elf.has_function(p.symbol)) {
                    std::string why = lib.path.filename().string() + " has no symbol " + p.symbol +
                                      (elf.has_symtab() ? "" : ": is it stripped? use a build with symbols");
                    record_probe(p.symbol, lib.path, kind, false, why);
                    required_missing_.push_back(why);
                    continue;
                }
                bool ok = attach(p.program(skel_), lib.path, p.symbol, p.retprobe);
                record_probe(p.symbol, lib.path, kind, ok, ok ? "" : std::strerror(errno));
                if (!ok) required_missing_.push_back(std::string("attaching ") + p.symbol + " failed: " + std::strerror(errno));
                ++attached_;
            }
        }
        if (!required_missing_.empty()) throw Error(required_missing_.front());
        return new_llama;
    }

    static int on_event_thunk(void* self, void* data, size_t size) {
        return static_cast<Recorder*>(self)->on_event(data, size);
    }

    int on_event(void* data, size_t size) {
        if (size < sizeof(pi_event_header)) return ++malformed_, 0;
        auto* h = static_cast<const pi_event_header*>(data);
        if (h->size != size) return ++malformed_, 0;
        switch (h->kind) {
            case PI_EV_TOKEN: {
                if (size != sizeof(pi_token_event)) return ++malformed_, 0;
                auto* e = static_cast<const pi_token_event*>(data);
                if (!insert_token_) {
                    begin();
                    insert_token_ = std::make_unique<store::Statement>(
                        db_.handle(),
                        "INSERT INTO tokens(pid, tid, cpu, start_ns, end_ns, n_tokens, ret, phase) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
                }
                begin();
                const bool prefill = e->n_tokens > 1 || counts_[PI_EV_TOKEN] == 0;
                insert_token_->bind(1, int64_t{e->h.pid}).bind(2, int64_t{e->h.tid}).bind(3, int64_t{e->h.cpu});
                insert_token_->bind(4, int64_t(e->start_ns)).bind(5, int64_t(e->end_ns));
                insert_token_->bind(6, int64_t{e->n_tokens}).bind(7, int64_t{e->ret});
                insert_token_->bind(8, std::string(prefill ? "prefill" : "decode")).run();
                break;
            }
            case PI_EV_LIBRARY:
                library_changed_ = true;
                break;
            default:
                return ++malformed_, 0;
        }
        ++counts_[h->kind];
        return 0;
    }

    void begin() {
        if (!in_tx_) db_.exec("BEGIN"), in_tx_ = true;
    }
    void commit() {
        if (in_tx_) db_.exec("COMMIT"), in_tx_ = false;
    }

    void install_signal_handlers() {
        struct sigaction sa{};
        sa.sa_handler = on_stop_signal;
        sigaction(SIGINT, &sa, nullptr);
        sigaction(SIGTERM, &sa, nullptr);
    }

    // Returns the target's exit status (launch) or -1 (attached process or detached).
    int poll_until_exit() {
        using clock = std::chrono::steady_clock;
        auto last_commit = clock::now();
        std::optional<clock::time_point> forwarded_at;
        uint64_t lost_library_seen = 0;
        for (;;) {
            int n = ring_buffer__poll(rb_, 100);
            if (n < 0 && n != -EINTR) throw Error(std::string("polling the ring buffer: ") + std::strerror(-n));
            // If the loader-stop record was lost, the target sits stopped: notice it anyway.
            uint64_t lost_lib = skel_->bss->lost_events[PI_EV_LIBRARY];
            if (lost_lib != lost_library_seen) library_changed_ = true, lost_library_seen = lost_lib;
            if (library_changed_) {
                library_changed_ = false;
                attach_new_libraries();
                kill(pid_, SIGCONT);
            }
            if (clock::now() - last_commit > std::chrono::milliseconds(250)) commit(), last_commit = clock::now();
            if (int sig = g_stop_signal.load()) {
                if (!child_) {
                    interrupted_by_ = sig;
                    return -1;
                }
                if (!forwarded_at) {
                    interrupted_by_ = sig;
                    child_->signal(sig);
                    kill(pid_, SIGCONT);
                    forwarded_at = clock::now();
                } else if (clock::now() - *forwarded_at > std::chrono::seconds(5)) {
                    child_->signal(SIGKILL);
                }
            }
            if (child_) {
                if (auto st = child_->poll_exit()) return *st;
            } else if (!process_exists(pid_) || process_state(pid_) == 'Z') {
                return -1;
            }
        }
    }

    int finish(int status) {
        ring_buffer__consume(rb_);
        begin();
        uint64_t lost_total = 0;
        {
            store::Statement st(db_.handle(), "INSERT OR REPLACE INTO lost_events(kind, count) VALUES (?, ?)");
            for (uint32_t k = 1; k < PI_EV_KIND_MAX; ++k) {
                uint64_t n = skel_->bss->lost_events[k];
                lost_total += n;
                if (n || k == PI_EV_TOKEN) st.bind(1, std::string(kind_name(k))).bind(2, int64_t(n)).run();
            }
            if (malformed_) st.bind(1, std::string("malformed")).bind(2, int64_t(malformed_)).run();
        }
        bool killed = status > 128;
        store::RunStatus rs = (interrupted_by_ || killed) ? store::RunStatus::Incomplete : store::RunStatus::Complete;
        if (status >= 0) set_meta("target_exit_status", std::to_string(status));
        if (interrupted_by_) set_meta("interrupted_by", strsignal(interrupted_by_));
        set_meta("ended_at", std::to_string(std::time(nullptr)));
        set_meta("status", store::to_string(rs));
        commit();
        if (!seen_role(LibRole::Llama)) {
            set_meta("status", store::to_string(store::RunStatus::Failed));
            throw Error("the target never loaded libllama: is it a llama.cpp program?");
        }
        if (!opts_.quiet) {
            std::cerr << "profinfer: " << counts_[PI_EV_TOKEN] << " llama_decode calls, " << lost_total
                      << " lost events → " << opts_.output.string() << " (" << store::to_string(rs) << ")\n";
            if (lost_total) std::cerr << "profinfer: warning: " << lost_total << " events were lost (ring buffer full)\n";
        }
        return status > 0 ? status : 0;
    }

    RecordOptions opts_;
    store::Database db_;
    tracer_bpf* skel_ = nullptr;
    ring_buffer* rb_ = nullptr;
    std::vector<bpf_link*> links_;
    std::unique_ptr<LaunchedProcess> child_;
    pid_t pid_ = -1;
    std::map<fs::path, LibRole> libraries_;
    std::vector<std::string> required_missing_;
    std::unique_ptr<store::Statement> insert_token_;
    std::map<uint32_t, uint64_t> counts_;
    uint64_t malformed_ = 0;
    int attached_ = 0;
    int interrupted_by_ = 0;
    bool in_tx_ = false;
    bool library_changed_ = false;
};

}  // namespace

int record(const RecordOptions& opts) {
    if (!opts.pid && opts.command.empty()) throw Error("record needs --pid PID or a command after --");
    if (opts.pid && !opts.command.empty()) throw Error("record takes --pid PID or a command, not both");
    Recorder r(opts);
    try {
        return r.run();
    } catch (const Error& e) {
        r.fail(e.what());
        throw;
    }
}

}  // namespace profinfer
