// profinfer watch (docs/watch.md): a running llama.cpp process (a llama-server) recorded for
// as long as it runs, in rotating segments each a complete trace of its own, the directory
// kept under a bound by deleting the oldest closed segments whole, and the numbers served to
// Prometheus on a local port. Each segment is one `profinfer record --pid` child process: a
// recorder's memory ends with its segment (the watcher's stays flat however long it runs),
// and a watcher killed outright leaves a recorder that stops with it (--stop-with-parent)
// and closes its segment, the target running on untouched.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "profinfer/error.h"
#include "profinfer/experiment_runner.h"
#include "profinfer/live_metrics.h"
#include "profinfer/number_text.h"
#include "profinfer/stop_signals.h"
#include "profinfer/subprocess.h"
#include "subcommands.h"

namespace fs = std::filesystem;

namespace profinfer::cli {

namespace {

// SIGTERM, SIGINT or SIGHUP arrived (the recorder's own handlers: noted, never fatal).
bool stopping() { return stop_signals::count() > 0; }

struct WatchOptions {
    int pid = 0;
    std::string exe;  // re-attach to a new process of this executable when the target exits
    fs::path pidfile;  // ... or to the process this file names (a restarted server writes it anew)
    fs::path dir;
    std::string level = "graph";
    double segment_s = 600, segment_mb = 0, max_db_mb = 1000, poll_s = 5;
    double min_free_mb = -1;  // default: the smaller of --segment-mb and a tenth of the disk
    std::string listen = "127.0.0.1:9464";
};

// The serving side: a loopback (or given) address, GET /metrics answered with an exposition
// RENDERed for it — or the last one, when it is younger than MAX_AGE_S or stale() was not
// called since (nothing reads the trace while nobody scrapes) — anything else 404. One
// connection at a time: a scraper's.
class MetricsServer {
public:
    MetricsServer(const std::string& listen, std::function<std::string()> render, double max_age_s)
        : render_(std::move(render)), max_age_(max_age_s) {
        const auto colon = listen.rfind(':');
        if (colon == std::string::npos) throw Error("--listen is HOST:PORT, not '" + listen + "'");
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(std::stoi(listen.substr(colon + 1))));
        if (inet_pton(AF_INET, listen.substr(0, colon).c_str(), &a.sin_addr) != 1)
            throw Error("--listen: '" + listen.substr(0, colon) + "' is not an IPv4 address");
        fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0)
            throw Error("--listen " + listen + ": " + std::strerror(errno));
        socklen_t len = sizeof a;
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        url_ = "http://" + listen.substr(0, colon) + ":" + std::to_string(ntohs(a.sin_port)) + "/metrics";
        thread_ = std::thread([this] { serve(); });
    }
    ~MetricsServer() {
        done_ = true;
        thread_.join();
        close(fd_);
    }
    const std::string& url() const { return url_; }
    // What the last exposition showed has changed (a segment closed or deleted): the next
    // scrape renders anew, however young the last one is.
    void stale() { stale_ = true; }

private:
    void serve() {
        while (!done_) {
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 200) <= 0) continue;
            const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            std::string req;
            char buf[4096];
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384 &&
                   std::chrono::steady_clock::now() < deadline) {
                pollfd q{c, POLLIN, 0};
                if (poll(&q, 1, 200) <= 0) continue;
                const ssize_t n = read(c, buf, sizeof buf);
                if (n <= 0) break;
                req.append(buf, size_t(n));
            }
            std::string body, status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8";
            if (req.rfind("GET /metrics", 0) == 0) {
                const auto now = std::chrono::steady_clock::now();
                if (stale_.exchange(false) || now - rendered_ >= std::chrono::duration<double>(max_age_)) {
                    try {
                        text_ = render_();
                        rendered_ = now;
                    } catch (const std::exception& e) {
                        stale_ = true;  // the last exposition served; the next scrape tries again
                        std::cerr << "profinfer watch: the metrics could not be read: " << e.what() << "\n";
                    }
                }
                body = text_;
            } else {
                status = "404 Not Found", type = "text/plain", body = "profinfer watch serves GET /metrics\n";
            }
            const std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
            for (size_t sent = 0; sent < out.size();) {
                const ssize_t n = send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
                if (n <= 0) break;
                sent += size_t(n);
            }
            close(c);
        }
    }
    int fd_ = -1;
    std::string url_, text_;
    std::function<std::string()> render_;
    double max_age_;
    std::chrono::steady_clock::time_point rendered_{};
    std::atomic<bool> stale_{true};
    std::atomic<bool> done_{false};
    std::thread thread_;
};

bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// A process whose executable is EXE (its /proc/N/exe), other than the watcher's own.
int find_process(const std::string& exe) {
    std::error_code ec;
    const fs::path want = fs::weakly_canonical(exe, ec);
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        const std::string n = e.path().filename().string();
        if (n.empty() || !std::all_of(n.begin(), n.end(), ::isdigit)) continue;
        std::error_code ec2;
        const fs::path target = fs::read_symlink(e.path() / "exe", ec2);
        if (!ec2 && target == want && std::stoi(n) != getpid()) return std::stoi(n);
    }
    return 0;
}

// The live process a pid file names, 0 when none (missing, empty, not a number, exited).
int pid_in_file(const fs::path& file) {
    std::ifstream f(file);
    long pid = 0;
    if (!(f >> pid) || pid <= 0 || pid > std::numeric_limits<int>::max()) return 0;
    return alive(int(pid)) ? int(pid) : 0;
}

// Free and total MB (10^6 bytes) of the filesystem holding DIR, as an unprivileged writer
// sees it (f_bavail); NaN when it cannot be read.
std::pair<double, double> disk_mb(const fs::path& dir) {
    struct statvfs v {};
    if (statvfs(dir.c_str(), &v) != 0) return {std::nan(""), std::nan("")};
    return {double(v.f_bavail) * double(v.f_frsize) / 1e6, double(v.f_blocks) * double(v.f_frsize) / 1e6};
}

double process_cpu_seconds(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) return 0;
    const auto close = line.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; rest >> field; ++i) {  // fields 14 and 15: utime, stime (clock ticks)
        if (i == 14) utime = std::stod(field);
        if (i == 15) {
            stime = std::stod(field);
            break;
        }
    }
    return (utime + stime) / double(sysconf(_SC_CLK_TCK));
}

uint64_t file_bytes(const fs::path& p) {
    std::error_code ec;
    uint64_t n = 0;
    for (const char* suffix : {"", "-wal", "-journal"}) {
        const auto s = fs::file_size(p.string() + suffix, ec);
        if (!ec) n += s;
    }
    return n;
}

std::string utc_stamp() {
    char b[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(b, sizeof b, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
    return b;
}

class Watcher {
public:
    explicit Watcher(WatchOptions o) : o_(std::move(o)) {
        if (o_.segment_mb <= 0) o_.segment_mb = o_.max_db_mb / 4;
        fs::create_directories(o_.dir);
        if (o_.min_free_mb < 0) {
            const double size = disk_mb(o_.dir).second;
            o_.min_free_mb = std::isnan(size) ? o_.segment_mb : std::min(o_.segment_mb, size / 10);
        }
        if (o_.listen != "none") server_ = std::make_unique<MetricsServer>(o_.listen, [this] { return render(); }, o_.poll_s);
    }

    int run() {
        if (server_) std::cerr << "profinfer watch: metrics on " << server_->url() << "\n";
        int pid = o_.pid ? o_.pid : find_target();
        while (!stopping()) {
            if (!alive(pid)) {
                if (!follows()) {
                    std::cerr << "profinfer watch: process " << pid << " has exited\n";
                    break;
                }
                std::cerr << "profinfer watch: waiting for "
                          << (o_.exe.empty() ? "a live process named in " + o_.pidfile.string() : "a process of " + o_.exe)
                          << "\n";
                while (!stopping() && !(pid = find_target())) std::this_thread::sleep_for(std::chrono::milliseconds(500));
                if (stopping()) break;
            }
            record_segment(pid);
            if (!follows() && !alive(pid)) {
                std::cerr << "profinfer watch: process " << pid << " has exited\n";
                break;
            }
        }
        write_manifest(pid);
        std::lock_guard<std::mutex> l(state_mu_);
        std::cerr << "profinfer watch: " << totals_.segments_closed << " segments recorded, " << totals_.segments_deleted
                  << " deleted (oldest first) to stay under " << o_.max_db_mb << " MB; " << o_.dir.string() << "/watch.json\n";
        return 0;
    }

private:
    // --exe or --pidfile: the watcher stays when its target exits and records the next one.
    bool follows() const { return !o_.exe.empty() || !o_.pidfile.empty(); }
    int find_target() const { return o_.exe.empty() ? pid_in_file(o_.pidfile) : find_process(o_.exe); }

    double free_mb() const { return disk_mb(o_.dir).first; }

    void record_segment(int pid) {
        const fs::path seg = o_.dir / ("segment-" + utc_stamp() + "-" + std::to_string(++serial_) + ".db");
        std::vector<std::string> argv = {self_executable().string(), "record", "--pid", std::to_string(pid), "--level", o_.level,
                                         "--duration", std::to_string(o_.segment_s), "--flush-ms", std::to_string(std::max(100, int(o_.poll_s * 500))),
                                         "--stop-with-parent", "-q", "-o", seg.string()};
        const pid_t child = fork();
        if (child < 0) throw Error(std::string("fork: ") + std::strerror(errno));
        if (child == 0) {
            close_inherited_fds_at_exec();
            std::vector<char*> a;
            for (auto& s : argv) a.push_back(s.data());
            a.push_back(nullptr);
            execv(a[0], a.data());
            _exit(127);
        }
        std::cerr << "profinfer watch: recording process " << pid << " at --level " << o_.level << " into " << seg.string()
                  << "\n";
        {
            std::lock_guard<std::mutex> l(state_mu_);
            live_ = seg, live_recorder_ = child;
        }
        bool asked_to_close = false;
        auto next_disk = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        int status = 0;
        rusage ru{};
        while (true) {
            const pid_t r = wait4(child, &status, WNOHANG, &ru);
            if (r == child) break;
            if ((stopping() || file_bytes(seg) >= o_.segment_mb * 1e6) && !asked_to_close) {
                kill(child, SIGUSR1);  // ends as at its --duration: the segment closed and complete
                asked_to_close = true;
            }
            // The disk below its reserve (checked once a second): the oldest closed segment
            // deleted — the one under way is the newest — or, with none left, this one closed,
            // to be the closed one the next segment deletes. Room for the segment's write-ahead
            // log is kept beside the reserve: closing moves the log's pages into the segment
            // before the log goes, and would otherwise meet a full disk itself.
            if (!asked_to_close && std::chrono::steady_clock::now() >= next_disk) {
                next_disk = std::chrono::steady_clock::now() + std::chrono::seconds(1);
                std::error_code ec;
                const auto wal = fs::file_size(seg.string() + "-wal", ec);
                const double log_mb = ec ? 0 : double(wal) / 1e6;
                if (const double f = free_mb(); f < o_.min_free_mb + log_mb) {
                    const std::string why = format_double(f, "%.1f") + " MB free on the disk of " + o_.dir.string() +
                                            ", less than --min-free-mb " + format_double(o_.min_free_mb, "%g") + " plus the " +
                                            format_double(log_mb, "%.1f") + " MB log of the segment under way";
                    if (!kept_.empty()) {
                        delete_oldest("disk", "for room: " + why);
                        write_manifest(pid);
                    } else {
                        std::cerr << "profinfer watch: closing " << seg.filename().string() << " for room: " << why << "\n";
                        kill(child, SIGUSR1);
                        asked_to_close = true;
                    }
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        const double cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        std::optional<LiveMetrics> closed;
        if (fs::exists(seg)) {
            try {
                closed = live_metrics_of(seg);
                kept_.push_back(seg);
            } catch (const std::exception& e) {
                std::cerr << "profinfer watch: segment " << seg.string() << " unreadable: " << e.what() << "\n";
            }
        }
        {
            std::lock_guard<std::mutex> l(state_mu_);
            live_.clear(), live_recorder_ = 0;
            totals_.recorder_cpu_seconds += cpu;
            if (closed) totals_.add(*closed), ++totals_.segments_closed;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
            std::cerr << "profinfer watch: the recorder of " << seg.filename().string() << " exited with status "
                      << WEXITSTATUS(status) << "\n";
        enforce_bound();
        // A recorder that could not even start (no segment: the disk full) leaves nothing kept
        // from deletion, or the watcher would retry for ever beside a full disk; one that
        // stored part of its segment before the disk filled has made it the newest, kept.
        enforce_free(WIFEXITED(status) && WEXITSTATUS(status) != 0 && !fs::exists(seg) ? 0 : 1);
        if (server_) server_->stale();
        write_manifest(pid);
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && alive(pid) && !stopping())
            std::this_thread::sleep_for(std::chrono::seconds(1));  // a recorder that cannot start: not in a tight loop
    }

    // The oldest closed segments deleted whole while the directory is over the bound; the
    // newest always kept.
    void enforce_bound() {
        auto total = [&] {
            uint64_t n = 0;
            for (const auto& s : kept_) n += file_bytes(s);
            return n;
        };
        while (kept_.size() > 1 && double(total()) > o_.max_db_mb * 1e6)
            delete_oldest("max-db-mb", "to stay under " + std::to_string(std::lround(o_.max_db_mb)) + " MB");
    }

    // Between segments: the oldest closed segments deleted whole while the disk has less than
    // --min-free-mb free, KEEP of them (the newest) always kept.
    void enforce_free(size_t keep) {
        double f = free_mb();
        while (kept_.size() > keep && f < o_.min_free_mb) {
            delete_oldest("disk", "for room: " + format_double(f, "%.1f") + " MB free on the disk of " + o_.dir.string() +
                                      ", less than --min-free-mb " + format_double(o_.min_free_mb, "%g"));
            f = free_mb();
        }
        if (f < o_.min_free_mb)
            std::cerr << "profinfer watch: " << std::lround(f) << " MB free on the disk of " << o_.dir.string() << " with "
                      << kept_.size() << " segment(s) left: recording on\n";
    }

    void delete_oldest(const std::string& reason, const std::string& why) {
        const fs::path oldest = kept_.front();
        nlohmann::json d = {{"file", oldest.filename().string()}, {"bytes", file_bytes(oldest)}, {"reason", reason}};
        try {
            store::Database db(oldest, store::Database::Mode::ReadOnly);
            d["calls"] = db.scalar("SELECT count(*) FROM calls");
            d["first_call_start_ns"] = db.scalar("SELECT coalesce(min(start_ns), 0) FROM calls");
            d["last_call_end_ns"] = db.scalar("SELECT coalesce(max(end_ns), 0) FROM calls");
        } catch (const std::exception&) {
        }
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(oldest.string() + suffix, ec);
        deleted_.push_back(d);
        kept_.erase(kept_.begin());
        {
            std::lock_guard<std::mutex> l(state_mu_);
            ++totals_.segments_deleted;
        }
        if (server_) server_->stale();
        std::cerr << "profinfer watch: deleted " << oldest.filename().string() << " (the oldest) " << why << "\n";
    }

    // On a scrape (the server's thread): the closed segments' totals and the segment under way
    // as far as its recorder got.
    std::string render() {
        LiveMetrics m;
        fs::path live;
        int recorder = 0;
        {
            std::lock_guard<std::mutex> l(state_mu_);
            m = totals_, live = live_, recorder = live_recorder_;
        }
        if (!live.empty()) {
            m.recorder_cpu_seconds += process_cpu_seconds(recorder);
            if (fs::exists(live)) {
                try {
                    m.add(live_metrics_of(live));
                } catch (const std::exception&) {
                    // not yet a trace (its schema is being written): the next scrape reads it
                }
            }
        }
        return prometheus_exposition(m);
    }

    void write_manifest(int pid) {
        nlohmann::json j = {{"target_pid", pid},           {"level", o_.level},           {"max_db_mb", o_.max_db_mb},
                            {"min_free_mb", o_.min_free_mb}, {"segment_s", o_.segment_s}, {"segment_mb", o_.segment_mb},
                            {"deleted", deleted_}};
        auto segs = nlohmann::json::array();
        for (const auto& s : kept_) segs.push_back({{"file", s.filename().string()}, {"bytes", file_bytes(s)}});
        j["segments"] = segs;
        const fs::path tmp = o_.dir / "watch.json.tmp";
        std::ofstream(tmp) << j.dump(2) << "\n";
        fs::rename(tmp, o_.dir / "watch.json");
    }

    WatchOptions o_;
    std::mutex state_mu_;  // what render() reads from the server's thread: the three below
    LiveMetrics totals_;
    fs::path live_;  // the segment under way, and its recorder
    int live_recorder_ = 0;
    std::unique_ptr<MetricsServer> server_;  // after what it renders from: destroyed (joined) before it
    std::vector<fs::path> kept_;
    nlohmann::json deleted_ = nlohmann::json::array();
    int serial_ = 0;
};

}  // namespace

void add_watch(CLI::App& app, std::function<int()>& action) {
    auto o = std::make_shared<WatchOptions>();
    auto* cmd = app.add_subcommand(
        "watch", "Record a running llama.cpp process (a llama-server) for as long as it runs, in rotating segments under a "
                 "size bound, its numbers served to Prometheus");
    cmd->footer(
        "Examples:\n"
        "  profinfer watch --pid $(pidof llama-server) --dir /var/lib/profinfer\n"
        "  profinfer watch --exe /usr/bin/llama-server --dir traces --listen 127.0.0.1:9464 --max-db-mb 2000\n"
        "  profinfer watch --pidfile /run/llama-server.pid --dir traces\n"
        "Each segment is a complete trace (profinfer info, stat, report read it); watch.json lists the segments kept and\n"
        "those deleted. SIGTERM or Ctrl-C closes the segment under way. docs/watch.md lists the metrics and PromQL queries.\n"
        "Needs what profinfer record needs (root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN).");
    auto* pid = cmd->add_option("--pid", o->pid, "The process to record");
    auto* exe = cmd->add_option("--exe", o->exe,
                                "Record a process of this executable, and the next one when it exits (a restarted server)")
                    ->excludes(pid);
    cmd->add_option("--pidfile", o->pidfile,
                    "Record the process this file names, and the one it names next when that exits (a restarted "
                    "server whose supervisor rewrites the file)")
        ->excludes(pid)
        ->excludes(exe);
    cmd->add_option("--dir", o->dir, "Directory of the segments (created if missing)")->required();
    cmd->add_option("--level", o->level,
                    "Recording level of every segment: token, graph (default: a few probe hits per token), op-sampled "
                    "(+ operator time shares from CPU-clock samples), op or full (every operator: a cost per node)")
        ->check(CLI::IsMember({"token", "graph", "op-sampled", "op", "full"}))
        ->capture_default_str();
    cmd->add_option("--segment-s", o->segment_s, "A new segment every S seconds")->check(number_in(1, 31536000))->capture_default_str();
    cmd->add_option("--segment-mb", o->segment_mb, "... or once the segment reaches M MB (default: a quarter of --max-db-mb)")
        ->check(number_in(0.1, std::numeric_limits<double>::infinity()));
    cmd->add_option("--max-db-mb", o->max_db_mb,
                    "Keep the closed segments under M MB (10^6 bytes) in all, deleting the oldest whole (the newest always "
                    "kept)")
        ->check(number_in(1, std::numeric_limits<double>::infinity()))
        ->capture_default_str();
    cmd->add_option("--min-free-mb", o->min_free_mb,
                    "Keep M MB free on the disk of --dir: below it the segment under way is closed and the oldest deleted "
                    "whole, the newest always kept (default: the smaller of --segment-mb and a tenth of the disk)")
        ->check(number_in(0, std::numeric_limits<double>::infinity()));
    cmd->add_option("--listen", o->listen, "Serve GET /metrics (Prometheus text format 0.0.4) on HOST:PORT (port 0: any free one); none: no server")
        ->capture_default_str();
    cmd->add_option("--poll-s", o->poll_s,
                    "The most often the segment under way is read for the metrics: on a scrape, when the last reading is "
                    "older (nothing is read while nobody scrapes)")
        ->check(number_in(0.1, 3600))
        ->capture_default_str();
    cmd->callback([&action, o, pid] {
        if (!pid->count() && o->exe.empty() && o->pidfile.empty())
            throw CLI::ValidationError("watch", "--pid, --exe or --pidfile is required");
        action = [o] {
            stop_signals::install();
            if (o->pid && !alive(o->pid)) throw Error("--pid " + std::to_string(o->pid) + ": no such process");
            Watcher w(*o);
            return w.run();
        };
    });
}

}  // namespace profinfer::cli
