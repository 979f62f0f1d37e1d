// The analysis commands as a security reviewer tries them, on committed golden traces
// (no eBPF needed): no shell ever runs, trace text cannot inject markup or commands,
// outputs never go through symlinks or end up truncated, bad arguments get one line,
// and partial or foreign traces are called what they are.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

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
    EXPECT_EQ(gnuplot_label("all (99)"), "all\xC2\xA0(99)");  // one token that still reads as two words
    EXPECT_EQ(html_escape("<script>'&\""), "&lt;script&gt;&#39;&amp;&quot;");

    sql(db, "UPDATE nodes SET op = 'MUL_MAT''\nsystem(\"touch pwned\")\ne' WHERE op = 'MUL_MAT'");
    InDirectory here(d.path());
    auto r = run({profinfer_bin(), "report", db, "-o", d / "report.html"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(fs::exists(d / "pwned"));
}

// Text from the target is bytes, not always UTF-8 (a Latin-1 file name in the command line, a
// tensor name): every JSON output stays valid, each such byte replaced by U+FFFD (info --json
// failed with json type_error.316, the timeline on a tensor name).
TEST(CliTrust, TextThatIsNotUtf8IsValidInEveryJsonOutput) {
    TempDir d;
    fs::path db = copy_golden(d, "llama3.2-1b-full");
    sql(db, "UPDATE meta SET value = 'llama-simple -m mod' || CAST(X'E9' AS TEXT) || 'le.gguf' WHERE key = 'command'");
    sql(db, "UPDATE nodes SET name = 'Qcur-0' || CAST(X'FF' AS TEXT) WHERE name = 'Qcur-0'");
    const std::string replacement = "\xEF\xBF\xBD";
    auto info = run({profinfer_bin(), "info", db, "--json"});
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_TRUE(nlohmann::json::accept(info.out)) << info.out;
    EXPECT_NE(info.out.find("mod" + replacement + "le.gguf"), std::string::npos) << info.out;
    auto timeline = run({profinfer_bin(), "timeline", db, "-o", d / "trace.json"});
    ASSERT_EQ(timeline.status, 0) << timeline.err;
    const std::string events = read_file(d / "trace.json");
    EXPECT_TRUE(nlohmann::json::accept(events));
    EXPECT_NE(events.find("Qcur-0" + replacement), std::string::npos);
    auto stat = run({profinfer_bin(), "stat", db, "--by", "op", "--format", "json"});
    ASSERT_EQ(stat.status, 0) << stat.err;
    EXPECT_TRUE(nlohmann::json::accept(stat.out)) << stat.out;
}

// A link is neither written through nor replaced: refused in one line, link and target
// as they were (a link to a FIFO or device, like /dev/stdout, is written into).
TEST(CliTrust, OutputsNeverGoThroughOrReplaceSymlinks) {
    TempDir d;
    std::ofstream(d / "victim") << "precious";
    fs::create_symlink(d / "victim", d / "trace.json");
    fs::create_symlink(d / "victim", d / "dag.dot");
    fs::create_symlink(d / "nothing", d / "report.html");
    expect_one_line_failure(run({profinfer_bin(), "timeline", golden_trace("llama3.2-1b-full"), "-o", d / "trace.json"}),
                            "symbolic link");
    expect_one_line_failure(run({profinfer_bin(), "dag", golden_trace("llama3.2-1b-full"), "-o", d / "dag.dot"}),
                            "symbolic link");
    expect_one_line_failure(run({profinfer_bin(), "report", golden_trace("llama3.2-1b-full"), "-o", d / "report.html"}),
                            "symbolic link to nothing");
    EXPECT_EQ(read_file(d / "victim"), "precious");
    EXPECT_TRUE(fs::is_symlink(d / "trace.json"));
    EXPECT_TRUE(fs::is_symlink(d / "dag.dot"));
    EXPECT_FALSE(fs::exists(d / "nothing"));
    // /dev/stdout is a link to the process's standard output: the DOT text arrives there.
    fs::create_symlink("/dev/stdout", d / "out.dot");
    auto r = run({profinfer_bin(), "dag", golden_trace("llama3.2-1b-full"), "-o", d / "out.dot"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("digraph"), std::string::npos);
    EXPECT_TRUE(fs::is_symlink(d / "out.dot"));
}

// Device nodes are the system's: a character device or FIFO is written into (/dev/null
// discards, /dev/full is an error), a block device or socket refused; none is replaced.
TEST(CliTrust, OutputsNeverReplaceDeviceNodes) {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: making device nodes (mknod) needs root";
    TempDir d;
    const fs::path trace = golden_trace("llama3.2-1b-full");
    ASSERT_EQ(mknod((d / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
    ASSERT_EQ(mknod((d / "null.dot").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);  // dag: by extension
    ASSERT_EQ(mknod((d / "full").c_str(), S_IFCHR | 0666, makedev(1, 7)), 0) << std::strerror(errno);
    ASSERT_EQ(mknod((d / "disk").c_str(), S_IFBLK | 0600, makedev(7, 0)), 0) << std::strerror(errno);
    ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0) << std::strerror(errno);
    auto is_char = [](const fs::path& p) { return fs::is_character_file(fs::symlink_status(p)); };
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"timeline", trace, "-o", d / "null"}, {"dag", trace, "-o", d / "null.dot"}, {"report", trace, "-o", d / "null"}}) {
        std::vector<std::string> argv{profinfer_bin()};
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = run(argv);
        EXPECT_EQ(r.status, 0) << args[0] << ": " << r.err;
        EXPECT_TRUE(is_char(args.back())) << args[0] << " replaced the device node";
    }
    expect_one_line_failure(run({profinfer_bin(), "timeline", trace, "-o", d / "full"}), "No space left on device");
    EXPECT_TRUE(is_char(d / "full"));
    expect_one_line_failure(run({profinfer_bin(), "timeline", trace, "-o", d / "disk"}), "block device");
    EXPECT_TRUE(fs::is_block_file(fs::symlink_status(d / "disk")));
    // A FIFO is written into: a reader gets the trace.
    pid_t reader = spawn({"cat", d / "fifo"}, d / "from-fifo");
    auto r = run({profinfer_bin(), "timeline", trace, "-o", d / "fifo"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(reap(reader, std::chrono::seconds(30)), 0);
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(d / "fifo")));
    EXPECT_NE(read_file(d / "from-fifo").find("traceEvents"), std::string::npos);
}

// A trace is 0600 because it may name other users' processes: what is made from it gets
// no wider permissions, whatever the umask.
TEST(CliTrust, OutputsOfAPrivateTraceArePrivate) {
    TempDir d;
    const fs::path db = copy_golden(d, "llama3.2-1b-full");  // 0600
    const mode_t old = umask(022);
    for (const auto& [cmd, out] : std::vector<std::pair<std::string, std::string>>{
             {"timeline", "t.json"}, {"dag", "g.dot"}, {"report", "r.html"}}) {
        auto r = run({profinfer_bin(), cmd, db, "-o", d / out});
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(fs::status(d / out).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write) << cmd;
    }
    fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
    EXPECT_EQ(run({profinfer_bin(), "timeline", db, "-o", d / "shared.json"}).status, 0);
    umask(old);
    EXPECT_EQ(fs::status(d / "shared.json").permissions() & fs::perms::others_read, fs::perms::others_read);
}

// On a full disk every analysis command fails in one line and leaves no truncated file.
TEST(CliTrust, FullDiskIsAnErrorNotATruncatedFile) {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: mounting a small tmpfs needs root";
    TempDir d;
    TmpfsMount mounted(d / "small", "4k");
    ASSERT_TRUE(mounted.ok) << std::strerror(errno);
    const fs::path small = mounted.dir;
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

// Numbers that are not numbers, and bounds as a person writes them: NaN is refused where
// a range is asked for, and no error prints a 309-digit bound.
TEST(CliTrust, NumbersAreCheckedAndBoundsReadable) {
    TempDir d;
    const fs::path a = golden_trace("llama3.2-1b-full");
    auto r = run({profinfer_bin(), "dag", a, "--token", "-1", "-o", d / "x.dot"});
    expect_one_line_failure(r, "at least 0");
    EXPECT_LT(r.err.size(), 200u) << r.err;
    expect_one_line_failure(run({profinfer_bin(), "diff", a, a, "--threshold", "nan"}), "--threshold");
    for (const auto& [opt, value] : std::vector<std::pair<std::string, std::string>>{
             {"--budget", "nan"}, {"--budget", "inf"}, {"--qos-min-tps", "-1"}, {"--qos-min-tps", "nan"},
             {"--memory-limit", "garbage"}}) {
        r = run({profinfer_bin(), "record", opt, value, "--level", "op", "-o", d / "r.db", "--", "/bin/true"});
        expect_one_line_failure(r, value);
        EXPECT_EQ(r.status, 2) << opt << " " << value << ": " << r.err;
        EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    }
    // A refusal that needs the other options leaves no database to block the retry.
    expect_one_line_failure(run({profinfer_bin(), "record", "--budget", "5", "--level", "token", "-o", d / "r.db", "--",
                                 "/bin/true"}),
                            "--budget needs --level op or full");
    EXPECT_FALSE(fs::exists(d / "r.db"));
    expect_one_line_failure(run({profinfer_bin(), "board", "detect", "--root", d / "nonexistent"}), "proc/cpuinfo");
}

// A damaged trace: a meta value that should be a number names the file and the key; a
// folder report leaves out the one database it cannot read and says which.
TEST(CliTrust, DamagedTracesAreNamed) {
    TempDir d;
    fs::create_directories(d / "runs");
    const fs::path good = d / "runs" / "good.db";
    fs::copy_file(golden_trace("llama3.2-1b-full"), good);
    const fs::path bad = copy_golden(d, "qwen2.5-1.5b-full");
    sql(bad, "UPDATE meta SET value = 'x7' WHERE key = 'events_version'");
    auto r = run({profinfer_bin(), "info", bad});
    expect_one_line_failure(r, bad.string());
    EXPECT_NE(r.err.find("events_version"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    std::ofstream(d / "runs" / "broken.db") << "not a database";
    r = run({profinfer_bin(), "report", d / "runs", "-o", d / "report.html"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find((d / "runs" / "broken.db").string()), std::string::npos) << r.err;
    EXPECT_NE(read_file(d / "report.html").find("good.db"), std::string::npos);
}

// diff of two runs of different models says so before its table.
TEST(CliTrust, DiffSaysWhenRunsAreUnrelated) {
    auto r = run({profinfer_bin(), "diff", golden_trace("llama3.2-1b-full"), golden_trace("qwen2.5-1.5b-full")});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("not runs of one setup"), std::string::npos) << r.err;
    r = run({profinfer_bin(), "diff", golden_trace("llama3.2-1b-full"), golden_trace("llama3.2-1b-full")});
    EXPECT_EQ(r.err.find("not runs of one setup"), std::string::npos) << r.err;
}

// Lost Vulkan records count in a run's lost total like any other record.
TEST(CliTrust, LostGpuRecordsAreCounted) {
    TempDir d;
    const fs::path db = copy_golden(d, "llama3.2-1b-full");
    sql(db, "INSERT OR REPLACE INTO lost_events(kind, count) VALUES ('gpu', 3)");
    store::Database s(db, store::Database::Mode::ReadOnly);
    EXPECT_EQ(store::run_health(s).lost_records, 3);
}

// Reading a finished trace leaves no -wal or -shm file beside it, and a trace left in
// write-ahead-log mode (its recorder died) is read where nothing can be written.
TEST(CliTrust, TracesAreReadWhereNothingCanBeWritten) {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: a read-only mount needs root";
    TempDir d;
    TmpfsMount mounted(d / "ro", "8m");
    ASSERT_TRUE(mounted.ok) << std::strerror(errno);
    const fs::path ro = mounted.dir;
    fs::copy_file(golden_trace("llama3.2-1b-full"), ro / "run.db");
    fs::copy_file(golden_trace("llama3.2-1b-full"), ro / "wal.db");
    sql(ro / "wal.db", "PRAGMA journal_mode = WAL");
    EXPECT_EQ(run({profinfer_bin(), "info", ro / "run.db"}).status, 0);
    EXPECT_FALSE(fs::exists(ro / "run.db-wal"));
    EXPECT_FALSE(fs::exists(ro / "run.db-shm"));
    ASSERT_EQ(mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);
    for (const char* f : {"run.db", "wal.db"}) {
        auto r = run({profinfer_bin(), "stat", ro / f, "--by", "op-type"});
        EXPECT_EQ(r.status, 0) << f << ": " << r.err;
        EXPECT_NE(r.out.find("MUL_MAT"), std::string::npos) << f;
    }
}
