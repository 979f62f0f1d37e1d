// The analysis commands as a security reviewer tries them, on committed golden traces
// (no eBPF needed): no shell ever runs, trace text cannot inject markup or commands,
// outputs never go through symlinks or end up truncated, bad arguments get one line,
// and partial or foreign traces are called what they are.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "profinfer/dag.h"
#include "profinfer/store.h"
#include "profinfer/text_escape.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;

namespace {

// A writable copy of a golden trace.
fs::path copy_golden(const TempDir& d, const std::string& name) {
    fs::path p = d / (name + ".db");
    fs::copy_file(golden_trace(name), p);
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
    return p;
}

void sql(const fs::path& db, const std::string& statement) {
    store::Database d(db, store::Database::Mode::ReadOnly);  // opened only to check the schema
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h, statement.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
    sqlite3_close(h);
}

// Runs the test body's commands from DIR, so that a command injected into a shell
// would leave its trace there.
struct InDirectory {
    fs::path old = fs::current_path();
    explicit InDirectory(const fs::path& d) { fs::current_path(d); }
    ~InDirectory() { fs::current_path(old); }
};

const char* kInjection = "x'$(touch pwned)'\"`touch pwned2`\"";

}  // namespace

TEST(CliTrust, GoldenTracesAreCompleteFullLevelRecordings) {
    for (const char* name : {"llama3.2-1b-full", "qwen2.5-1.5b-full", "gemma2-2b-full", "qwen1.5-moe-a2.7b-full"}) {
        store::Database db(golden_trace(name), store::Database::Mode::ReadOnly);
        EXPECT_EQ(store::run_health(db).status, "complete") << name;
        EXPECT_GT(db.scalar("SELECT count(*) FROM ops"), 500) << name;
        EXPECT_GT(db.scalar("SELECT count(*) FROM sched_switch"), 0) << name;
    }
}

TEST(CliTrust, OutputNamesAreNeverGivenToAShell) {
    TempDir d;
    InDirectory here(d.path());
    const std::string name = std::string(kInjection) + ".svg";
    auto r = run({profinfer_bin(), "dag", golden_trace("llama3.2-1b-full"), "--layer", "1", "-o", name});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(fs::exists(d / name));
    EXPECT_NE(read_file(d / name).find("<svg"), std::string::npos);
    EXPECT_FALSE(fs::exists(d / "pwned"));
    EXPECT_FALSE(fs::exists(d / "pwned2"));
}

// report's work directory is private (mkdtemp) and its $TMPDIR is never parsed.
TEST(CliTrust, ReportWorksInAPrivateDirectoryWhateverTmpdirHolds) {
    TempDir d;
    InDirectory here(d.path());
    const fs::path tmp = d / kInjection;
    fs::create_directories(tmp);
    // A planted symlink at the old, predictable work directory name goes unused.
    fs::create_directories(d / "victim");
    auto r = run({profinfer_bin(), "report", golden_trace("qwen1.5-moe-a2.7b-full"), "-o", d / "report.html"},
                 {{"TMPDIR", tmp.string()}});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(read_file(d / "report.html").find("<svg"), std::string::npos);
    EXPECT_FALSE(fs::exists(d / "pwned"));
    EXPECT_FALSE(fs::exists(d / "pwned2"));
    EXPECT_TRUE(fs::is_empty(tmp)) << "report left its work files behind";
    EXPECT_TRUE(fs::is_empty(d / "victim"));
}

// A crafted tensor name can neither end a DOT string (and add a URL attribute) nor
// start a new line of a gnuplot script.
TEST(CliTrust, TraceTextIsEscapedInEveryOutputFormat) {
    TempDir d;
    fs::path db = copy_golden(d, "llama3.2-1b-full");
    const std::string evil = "attn_norm-1\", URL=\"javascript:alert(1)\", tooltip=\"x\\";
    sql(db, "UPDATE nodes SET name = '" + evil + "' WHERE name = 'attn_norm-1'");
    ASSERT_EQ(run({profinfer_bin(), "dag", db, "-o", d / "dag.svg"}).status, 0);
    const std::string svg = read_file(d / "dag.svg");
    EXPECT_EQ(svg.find("href"), std::string::npos);
    EXPECT_EQ(svg.find("<a "), std::string::npos);
    EXPECT_NE(svg.find("javascript:alert(1)"), std::string::npos) << "the name is kept as text";

    EXPECT_EQ(dot_escape("a\"b\\c\nd"), "a\\\"b\\\\c?d");
    EXPECT_EQ(gnuplot_quote("it's\nx"), "'it''s?x'");
    const std::string label = gnuplot_label("op\ne\nsystem('touch pwned')");
    EXPECT_EQ(label.find_first_of("\n '\"#"), std::string::npos) << label;
    EXPECT_EQ(html_escape("<script>'&\""), "&lt;script&gt;&#39;&amp;&quot;");

    sql(db, "UPDATE nodes SET op = 'MUL_MAT''\nsystem(\"touch pwned\")\ne' WHERE op = 'MUL_MAT'");
    InDirectory here(d.path());
    auto r = run({profinfer_bin(), "report", db, "-o", d / "report.html"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(fs::exists(d / "pwned"));
}

TEST(CliTrust, OutputsReplaceSymlinksInsteadOfWritingThroughThem) {
    TempDir d;
    std::ofstream(d / "victim") << "precious";
    fs::create_symlink(d / "victim", d / "trace.json");
    fs::create_symlink(d / "victim", d / "dag.dot");
    ASSERT_EQ(run({profinfer_bin(), "timeline", golden_trace("llama3.2-1b-full"), "-o", d / "trace.json"}).status, 0);
    ASSERT_EQ(run({profinfer_bin(), "dag", golden_trace("llama3.2-1b-full"), "-o", d / "dag.dot"}).status, 0);
    EXPECT_EQ(read_file(d / "victim"), "precious");
    EXPECT_FALSE(fs::is_symlink(d / "trace.json"));
    EXPECT_FALSE(fs::is_symlink(d / "dag.dot"));
    EXPECT_NE(read_file(d / "trace.json").find("traceEvents"), std::string::npos);
}

// On a full disk every analysis command fails in one line and leaves no truncated file.
TEST(CliTrust, FullDiskIsAnErrorNotATruncatedFile) {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: mounting a small tmpfs needs root";
    TempDir d;
    fs::path small = d / "small";
    fs::create_directories(small);
    ASSERT_EQ(mount("tmpfs", small.c_str(), "tmpfs", 0, "size=4k"), 0) << std::strerror(errno);
    struct Unmount {
        fs::path p;
        ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
    } unmount{small};
    const fs::path db = golden_trace("qwen1.5-moe-a2.7b-full");
    for (auto argv : std::vector<std::vector<std::string>>{
             {profinfer_bin(), "timeline", db, "-o", small / "trace.json"},
             {profinfer_bin(), "dag", db, "-o", small / "dag.svg"},
             {profinfer_bin(), "report", db, "-o", small / "report.html"}}) {
        auto r = run(argv);
        expect_one_line_failure(r, "No space left on device");
        EXPECT_TRUE(fs::is_empty(small)) << argv[1] << " left a file behind";
    }
    // Standard output redirected to the full disk.
    auto r = run({"/bin/sh", "-c", "exec \"$0\" stat \"$1\" --by thread --format json > \"$2\"", profinfer_bin(), db,
                  small / "stat.json"});
    expect_one_line_failure(r, "writing standard output: No space left on device");
}

TEST(CliTrust, BadArgumentsGetOneLine) {
    TempDir d;
    const fs::path db = golden_trace("llama3.2-1b-full");
    expect_one_line_failure(run({profinfer_bin(), "dag", db, "--token", "-1", "-o", d / "x.dot"}), "--token");
    expect_one_line_failure(run({profinfer_bin(), "stat", db, "--by", "nonsense"}), "--by");
    expect_one_line_failure(run({profinfer_bin(), "record", "--no-such-option"}), "--no-such-option");
    expect_one_line_failure(run({profinfer_bin(), "record", "--buffer-mb", "-1", "--", "/bin/true"}), "--buffer-mb");
    for (const char* mb : {"0", "3", "4096"})
        expect_one_line_failure(run({profinfer_bin(), "record", "--buffer-mb", mb, "-o", d / "r.db", "--", "/bin/true"}),
                                "power of two");
    expect_one_line_failure(run({profinfer_bin(), "record", "--pid", "0", "-o", d / "r.db"}), "no process with pid 0");
    expect_one_line_failure(run({profinfer_bin(), "record", "--pid", "999999999", "-o", d / "r.db"}), "no process");
    EXPECT_FALSE(fs::exists(d / "r.db")) << "a refused pre-flight must leave nothing that blocks a retry";
    EXPECT_EQ(run({profinfer_bin(), "--no-such"}).status, 2);
    std::ofstream(d / "huge.toml") << "name='huge'\narch='llama'\nhidden=64\nlayers=100000000\nheads=4\nkv_heads=2\n"
                                      "head_dim=16\nffn=128\nvocab=512\n";
    expect_one_line_failure(run({profinfer_bin(), "model", "synth", "--card", d / "huge.toml", "-o", d / "m.gguf"}),
                            "layers = 100000000 is above the limit");
    EXPECT_FALSE(fs::exists(d / "m.gguf"));
}

// A run whose recorder vanished reads as incomplete; every analysis command says so in
// one warning line; lossy runs too; a newer event format is refused.
TEST(CliTrust, PartialTracesAreCalledPartial) {
    TempDir d;
    fs::path db = copy_golden(d, "llama3.2-1b-full");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    pid_t gone = spawn({"/bin/true"});
    ASSERT_TRUE(reap(gone, std::chrono::seconds(10)));
    sql(db, "UPDATE meta SET value = 'running' WHERE key = 'status';"
            "UPDATE meta SET value = '" + std::string(host) + "' WHERE key = 'host';"
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('recorder_pid', '" + std::to_string(gone) + "');"
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('recorder_start', '12345');");
    for (auto argv : std::vector<std::vector<std::string>>{{profinfer_bin(), "info", db},
                                                             {profinfer_bin(), "stat", db, "--by", "op-type"},
                                                             {profinfer_bin(), "timeline", db, "-o", d / "t.json"},
                                                             {profinfer_bin(), "dag", db, "-o", d / "g.dot"},
                                                             {profinfer_bin(), "report", db, "-o", d / "r.html"}}) {
        auto r = run(argv);
        EXPECT_EQ(r.status, 0) << argv[1] << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') - (argv[1] == "info" || argv[1] == "stat" ? 0 : 1), 1)
            << argv[1] << ": " << r.err;
        EXPECT_NE(r.err.find("warning: " + db.string() + ": the run is incomplete (the recorder"), std::string::npos)
            << argv[1] << ": " << r.err;
    }
    EXPECT_NE(run({profinfer_bin(), "info", db}).out.find("incomplete"), std::string::npos);

    fs::path lossy = copy_golden(d, "qwen1.5-moe-a2.7b-full");
    sql(lossy, "UPDATE lost_events SET count = 7 WHERE kind = 'op'");
    auto r = run({profinfer_bin(), "stat", lossy, "--by", "op-type"});
    EXPECT_NE(r.err.find("lost or cut: 7 op"), std::string::npos) << r.err;

    sql(lossy, "UPDATE meta SET value = '99' WHERE key = 'events_version'");
    expect_one_line_failure(run({profinfer_bin(), "info", lossy}), "event format 99");
}
