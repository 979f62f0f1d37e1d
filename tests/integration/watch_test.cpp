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
