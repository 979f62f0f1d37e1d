// profinfer watch (docs/watch.md) on a live llama-server of the pinned build: its metrics
// scraped by a Debian Prometheus started here, and what a watcher killed outright leaves.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "profinfer/store.h"
#include "profinfer/text_file.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// GET URL (loopback), its body; "" when it does not answer.
std::string http_get(const std::string& url) {
    auto r = run({"python3", "-c",
                  "import sys, urllib.request\n"
                  "try:\n"
                  "    sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
                  "except Exception as e:\n"
                  "    sys.exit(1)\n",
                  url});
    return r.status == 0 ? r.out : "";
}

// One sample's value in a text exposition (the line "NAME VALUE"); NaN when absent.
double sample(const std::string& text, const std::string& name) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    return std::nan("");
}

// Prometheus' query API: the instant query's result vector (an empty array when it has none).
nlohmann::json prom_query(int port, const std::string& q) {
    auto r = run({"python3", "-c",
                  "import sys, urllib.parse, urllib.request\n"
                  "u = 'http://127.0.0.1:%s/api/v1/query?' % sys.argv[1] + urllib.parse.urlencode({'query': sys.argv[2]})\n"
                  "sys.stdout.write(urllib.request.urlopen(u, timeout=5).read().decode())\n",
                  std::to_string(port), q});
    if (r.status != 0) return nlohmann::json::array();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success") return nlohmann::json::array();
    return j["data"]["result"];
}

double prom_scalar(int port, const std::string& q) {
    const auto v = prom_query(port, q);
    return v.empty() ? std::nan("") : std::stod(v[0]["value"][1].get<std::string>());
}

std::vector<fs::path> segments(const fs::path& dir) {
    std::vector<fs::path> s;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".db") s.push_back(e.path());
    std::sort(s.begin(), s.end());
    return s;
}

// The watcher's segment under way has its probes in: its trace says so.
bool attached(const fs::path& dir) {
    const auto s = segments(dir);
    return !s.empty() && scalar_or_zero(s.back(), "SELECT count(*) FROM probes WHERE attached = 1") > 0;
}

}  // namespace

// A watcher at its default level on llama-server under 3 clients' mixed requests, a
// Prometheus of Debian's scraping it every second: Prometheus' own query API returns the
// histograms, whose counts equal the requests the load generator completed (time to first
// token: one per request; time per output token: each output after a request's first, as
// the server's own predicted_n counts them); the llama_decode calls equal llama-server's
// own n_decode_total over the same time; every PromQL query of docs/watch.md answers.
TEST(Watch, PrometheusScrapesWhatTheServerServed) {
    PROFINFER_REQUIRE_BPF();
    ASSERT_TRUE(fs::exists("/usr/bin/prometheus")) << "Debian's prometheus is missing: make deps (scripts/install-deps.sh)";
    TempDir d;
    LlamaServer server(d.path(), tiny_model("llama3.2-1b"), 3, 4096, /*metrics=*/true);
    ASSERT_TRUE(server.listening()) << server.log();
    const int port = free_loopback_port();
    const std::string ours = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
    pid_t watch = spawn({profinfer_bin(), "watch", "--pid", std::to_string(server.pid()), "--dir", (d / "segs").string(),
                         "--listen", "127.0.0.1:" + std::to_string(port), "--poll-s", "0.5"},
                        {}, d / "watch.err");
    ASSERT_TRUE(wait_until([&] { return attached(d / "segs"); }, std::chrono::seconds(120))) << read_file(d / "watch.err");
    ASSERT_TRUE(wait_until([&] { return !http_get(ours).empty(); }, std::chrono::seconds(30))) << read_file(d / "watch.err");
    const double server_calls_before = sample(http_get(server.url() + "/metrics"), "llamacpp:n_decode_total");

    const int prom_port = free_loopback_port();
    std::ofstream(d / "prometheus.yml") << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                           "scrape_configs:\n  - job_name: profinfer\n    static_configs:\n"
                                           "      - targets: ['127.0.0.1:"
                                        << port << "']\n";
    pid_t prom = spawn({"/usr/bin/prometheus", "--config.file=" + (d / "prometheus.yml").string(),
                        "--storage.tsdb.path=" + (d / "tsdb").string(),
                        "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                       {}, d / "prometheus.err");
    const std::string prom_url = "http://127.0.0.1:" + std::to_string(prom_port);
    ASSERT_TRUE(wait_until([&] { return !http_get(prom_url + "/-/ready").empty(); }, std::chrono::seconds(60)))
        << read_file(d / "prometheus.err");

    // The load: mixed prompt (8-200 words) and generation (4-24 tokens) lengths.
    const std::string load = std::string(PROFINFER_SOURCE_DIR) + "/experiments/server_load.py";
    auto l = run({"python3", load, "--url", server.url(), "--clients", "3", "--requests", "12", "--prompt-words", "8,200",
                  "--predict", "4,24", "--seed", "7", "--synthetic-vocab", "-o", (d / "load.jsonl").string()});
    ASSERT_EQ(l.status, 0) << l.err;
    int64_t completed = 0, predicted = 0;
    {
        std::ifstream in(d / "load.jsonl");
        std::string line;
        while (std::getline(in, line)) {
            auto r = nlohmann::json::parse(line);
            if (!r["error"].is_null()) continue;
            ++completed;
            predicted += r["timings"]["predicted_n"].get<int64_t>();
        }
    }
    ASSERT_EQ(completed, 12) << read_file(d / "load.jsonl");
    const double server_calls = sample(http_get(server.url() + "/metrics"), "llamacpp:n_decode_total") - server_calls_before;

    // Our endpoint, then Prometheus: every request counted once.
    EXPECT_TRUE(wait_until([&] { return sample(http_get(ours), "profinfer_request_ttft_seconds_count") == double(completed); },
                           std::chrono::seconds(30)))
        << http_get(ours) << read_file(d / "watch.err");
    const std::string text = http_get(ours);
    EXPECT_EQ(sample(text, "profinfer_request_tpot_seconds_count"), double(predicted - completed)) << text;
    EXPECT_EQ(sample(text, "profinfer_prefill_calls_total") + sample(text, "profinfer_decode_calls_total"), server_calls)
        << text;
    EXPECT_EQ(sample(text, "profinfer_lost_records_total"), 0.0) << text;
    EXPECT_TRUE(wait_until([&] { return prom_scalar(prom_port, "profinfer_request_ttft_seconds_count") == double(completed); },
                           std::chrono::seconds(60)))
        << prom_query(prom_port, "profinfer_request_ttft_seconds_count").dump() << read_file(d / "prometheus.err");
    EXPECT_EQ(prom_scalar(prom_port, "profinfer_request_tpot_seconds_count"), double(predicted - completed));
    EXPECT_EQ(prom_scalar(prom_port, "profinfer_request_ttft_seconds_bucket{le=\"+Inf\"}"), double(completed));
    // The histogram's buckets are cumulative: the +Inf one holds them all, the first no more.
    EXPECT_LE(prom_scalar(prom_port, "profinfer_request_ttft_seconds_bucket{le=\"0.05\"}"), double(completed));

    // Every PromQL query the docs give answers with data.
    const std::string docs = read_file(fs::path(PROFINFER_SOURCE_DIR) / "docs/watch.md");
    const std::regex block("```promql\\n([^`]*)\\n```");
    int queries = 0;
    for (auto it = std::sregex_iterator(docs.begin(), docs.end(), block); it != std::sregex_iterator(); ++it) {
        const std::string q = (*it)[1];
        ++queries;
        EXPECT_TRUE(wait_until([&] { return !prom_query(prom_port, q).empty(); }, std::chrono::seconds(30))) << q;
    }
    EXPECT_GE(queries, 5);

    kill(prom, SIGTERM);
    reap(prom, std::chrono::seconds(30));
    kill(watch, SIGTERM);
    EXPECT_EQ(reap(watch, std::chrono::seconds(120)), std::optional<int>(0)) << read_file(d / "watch.err");
    const auto segs = segments(d / "segs");
    ASSERT_EQ(segs.size(), 1u);
    EXPECT_EQ(scalar_or_zero(segs[0], "SELECT count(*) FROM meta WHERE key = 'status' AND value = 'complete'"), 1);
    const auto manifest = nlohmann::json::parse(read_file(d / "segs/watch.json"));
    EXPECT_EQ(manifest["segments"].size(), 1u) << manifest.dump();
    EXPECT_TRUE(server.stop().has_value());
}

// Segments of 2 s (rotated by time only) under a 1 MB bound while the server answers requests, the watcher then
// killed with SIGKILL at a random moment: the server runs on and answers; the recorder of
// the segment under way stops with its parent; every segment left is readable by
// `profinfer info` and none is a torn file; the oldest were deleted whole.
TEST(Watch, AWatcherKilledOutrightLeavesTheServerAndEverySegment) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    LlamaServer server(d.path(), tiny_model("llama3.2-1b"), 2, 2048);
    ASSERT_TRUE(server.listening()) << server.log();
    const std::string load = std::string(PROFINFER_SOURCE_DIR) + "/experiments/server_load.py";
    pid_t client = spawn({"python3", load, "--url", server.url(), "--clients", "2", "--requests", "100000", "--think-ms", "100",
                          "--synthetic-vocab", "--stop-file", (d / "enough").string(), "-o", (d / "load.jsonl").string()},
                         {}, d / "load.err");
    pid_t watch = spawn({profinfer_bin(), "watch", "--pid", std::to_string(server.pid()), "--dir", (d / "segs").string(),
                         "--listen", "none", "--segment-s", "2", "--segment-mb", "100", "--max-db-mb", "1", "--poll-s", "0.5"},
                        {}, d / "watch.err");
    auto closed = [&] {
        const std::string w = read_file(d / "watch.err");
        size_t n = 0;
        for (size_t at = 0; (at = w.find("recording process", at)) != std::string::npos; ++at) ++n;
        return n;
    };
    // Until the bound has made the watcher delete a segment (whatever a segment weighs here).
    auto deleted = [&] { return read_file(d / "watch.err").find("deleted segment-") != std::string::npos; };
    ASSERT_TRUE(wait_until([&] { return closed() >= 4 && deleted(); }, std::chrono::seconds(300))) << read_file(d / "watch.err");
    std::mt19937 rng(std::random_device{}());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 2000)(rng)));
    kill(watch, SIGKILL);
    reap(watch, std::chrono::seconds(10));
    // The orphaned recorder stops with its parent and closes its segment.
    EXPECT_TRUE(wait_until([&] { return run({"pgrep", "-f", (d / "segs").string()}).status != 0; }, std::chrono::seconds(60)))
        << run({"pgrep", "-af", (d / "segs").string()}).out;
    EXPECT_FALSE(http_get(server.url() + "/health").empty()) << "the server stopped answering";
    std::ofstream(d / "enough") << "";
    int st = 0;
    waitpid(client, &st, 0);
    const auto segs = segments(d / "segs");
    ASSERT_GE(segs.size(), 1u);
    EXPECT_LT(segs.size(), closed()) << "no segment was deleted under --max-db-mb 1";
    for (const auto& s : segs) {
        auto info = run({profinfer_bin(), "info", s.string(), "--json"});
        EXPECT_EQ(info.status, 0) << s << info.err;
        auto j = nlohmann::json::parse(info.out, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << s << info.out;
        EXPECT_TRUE(j["status"] == "complete" || j["status"] == "incomplete") << s << j["status"];
        EXPECT_FALSE(fs::exists(s.string() + "-wal") && fs::file_size(s.string() + "-wal") > 0) << s << ": rows left in -wal";
    }
    const auto manifest = nlohmann::json::parse(read_file(d / "segs/watch.json"));
    EXPECT_GE(manifest["deleted"].size(), 1u) << manifest.dump();
    EXPECT_TRUE(server.stop().has_value());
}

// --pidfile: a server restarted under a supervisor that writes the pid file anew. The watcher
// records the first server, waits while none runs, then records the second: one segment
// each, each naming its own process and holding the request it served, both closed whole.
TEST(Watch, APidfileFollowsARestartedServer) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    // One request served, and recorded in the newest segment (the recorder fully attached:
    // a target stopped while its recorder still attaches leaves no segment).
    const std::string load = std::string(PROFINFER_SOURCE_DIR) + "/experiments/server_load.py";
    auto served_and_recorded = [&](LlamaServer& s, const std::string& name) {
        auto l = run({"python3", load, "--url", s.url(), "--clients", "1", "--requests", "1", "--predict", "4,4",
                      "--synthetic-vocab", "-o", (d / (name + ".jsonl")).string()});
        if (l.status != 0) return "the load generator failed: " + l.err;
        if (!wait_until([&] { return !segments(d / "segs").empty() && scalar_or_zero(segments(d / "segs").back(), "SELECT count(*) FROM calls") > 0; },
                        std::chrono::seconds(30)))
            return "no call of the " + name + " server in the newest segment: " + read_file(d / "watch.err");
        return std::string();
    };
    const fs::path pidfile = d / "server.pid";
    fs::create_directories(d / "a");
    fs::create_directories(d / "b");
    auto first = std::make_unique<LlamaServer>(d / "a", tiny_model("llama3.2-1b"), 1, 2048);
    ASSERT_TRUE(first->listening()) << first->log();
    const pid_t first_pid = first->pid();
    std::ofstream(pidfile) << first_pid << "\n";
    pid_t watch = spawn({profinfer_bin(), "watch", "--pidfile", pidfile.string(), "--dir", (d / "segs").string(),
                         "--listen", "none", "--poll-s", "0.5"},
                        {}, d / "watch.err");
    ASSERT_TRUE(wait_until([&] { return attached(d / "segs"); }, std::chrono::seconds(120))) << read_file(d / "watch.err");
    ASSERT_EQ(served_and_recorded(*first, "first"), "");
    EXPECT_TRUE(first->stop().has_value());
    first.reset();
    ASSERT_TRUE(wait_until([&] { return read_file(d / "watch.err").find("waiting for a live process named in") != std::string::npos; },
                           std::chrono::seconds(60)))
        << read_file(d / "watch.err");
    LlamaServer second(d / "b", tiny_model("llama3.2-1b"), 1, 2048);
    ASSERT_TRUE(second.listening()) << second.log();
    std::ofstream(pidfile.string() + ".tmp") << second.pid() << "\n";
    fs::rename(pidfile.string() + ".tmp", pidfile);  // as a supervisor replaces it
    ASSERT_TRUE(wait_until([&] { return segments(d / "segs").size() == 2 && attached(d / "segs"); }, std::chrono::seconds(120)))
        << read_file(d / "watch.err");
    ASSERT_EQ(served_and_recorded(second, "second"), "");
    kill(watch, SIGTERM);
    EXPECT_EQ(reap(watch, std::chrono::seconds(120)), std::optional<int>(0)) << read_file(d / "watch.err");
    const auto segs = segments(d / "segs");
    ASSERT_EQ(segs.size(), 2u);
    EXPECT_EQ(scalar_or_zero(segs[0], "SELECT value FROM meta WHERE key = 'pid'"), first_pid);
    EXPECT_EQ(scalar_or_zero(segs[1], "SELECT value FROM meta WHERE key = 'pid'"), second.pid());
    for (const auto& s : segs) {
        auto info = run({profinfer_bin(), "info", s.string(), "--json"});
        ASSERT_EQ(info.status, 0) << s << info.err;
        EXPECT_EQ(nlohmann::json::parse(info.out)["status"], "complete") << s;
    }
    EXPECT_EQ(nlohmann::json::parse(read_file(d / "segs/watch.json"))["target_pid"], second.pid());
    EXPECT_TRUE(second.stop().has_value());
}

// A disk that fills long before the size bound: the watcher deletes the oldest segment whole
// (or closes the one under way when it is the only one) and says so (stderr, watch.json's
// deleted with reason "disk"), and records on; the target decodes on throughout, and every
// segment left is readable.
TEST(Watch, AFullDiskDropsTheOldestAndSaysSo) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    TmpfsMount small(d / "segs", "10m");
    ASSERT_TRUE(small.ok) << "cannot mount a tmpfs: " << std::strerror(errno);
    // Decoding for longer than the test needs on any machine (it is killed at the end): the
    // disk fills with calls, so a faster machine fills it in fewer seconds as well.
    pid_t target = spawn({graph_dump_bin(), tiny_model("llama3.2-1b"), "Hello", "400000", "1", "--no-callback"}, d / "out");
    ASSERT_TRUE(wait_until([&] { return lines_in(d / "out") >= 3; }, std::chrono::seconds(60)));
    // The tiny model's calls at graph level: ~0.5 MB a second of segment and log here, the
    // 10 MB disk short of room within ~20 s (a machine that decodes slower takes longer).
    pid_t watch = spawn({profinfer_bin(), "watch", "--pid", std::to_string(target), "--dir", small.dir.string(),
                         "--min-free-mb", "2", "--listen", "none", "--poll-s", "0.5"},
                        {}, d / "watch.err");
    auto deleted_for_room = [&] {
        const auto m = nlohmann::json::parse(read_file(small.dir / "watch.json"), nullptr, false);
        if (m.is_discarded()) return size_t(0);
        return size_t(std::count_if(m["deleted"].begin(), m["deleted"].end(), [](const auto& e) { return e["reason"] == "disk"; }));
    };
    const bool freed = wait_until([&] { return deleted_for_room() >= 2; }, std::chrono::seconds(300));
    const int64_t calls_then = lines_in(d / "out");
    kill(watch, SIGTERM);
    const auto watch_status = reap(watch, std::chrono::seconds(120));
    const std::string err = read_file(d / "watch.err");
    // The target decoded on: more calls after the watcher has gone.
    EXPECT_TRUE(wait_until([&] { return lines_in(d / "out") > calls_then + 10; }, std::chrono::seconds(30)));
    kill(target, SIGKILL);
    reap(target, std::chrono::seconds(10));
    ASSERT_TRUE(freed) << err;
    EXPECT_EQ(watch_status, std::optional<int>(0)) << err;
    EXPECT_NE(err.find("(the oldest) for room: "), std::string::npos) << err;
    EXPECT_NE(err.find("less than --min-free-mb 2"), std::string::npos) << err;
    const auto manifest = nlohmann::json::parse(read_file(small.dir / "watch.json"));
    for (const auto& e : manifest["deleted"]) EXPECT_FALSE(fs::exists(small.dir / e["file"].get<std::string>())) << e;
    const auto segs = segments(small.dir);
    ASSERT_GE(segs.size(), 1u) << err;
    EXPECT_LE(segs.size(), manifest["segments"].size() + 1) << manifest.dump();
    for (const auto& s : segs) {
        auto info = run({profinfer_bin(), "info", s.string(), "--json"});
        EXPECT_EQ(info.status, 0) << s << info.err;
    }
}
