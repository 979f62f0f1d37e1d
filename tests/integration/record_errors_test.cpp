// profinfer record when it cannot do its job: one clear line, non-zero exit, and no DB
// or a DB marked failed; and when it is told to stop.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "profinfer/run_summary.h"
#include "profinfer/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer;
using namespace profinfer::test;


TEST(RecordErrors, LibraryWithoutTheSymbol) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    auto r = run({profinfer_bin(), "record", "-o", d / "run.db", "--", fake_llama_bin()});
    expect_one_line_failure(r, "has no symbol llama_decode");
    EXPECT_FALSE(fs::exists(d / "run.db"));
}

TEST(RecordErrors, MissingCapability) {
    PROFINFER_REQUIRE_BPF();  // needs root to drop to another user
    TempDir d;
    fs::permissions(d.path(), fs::perms::all);
    auto r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                  profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--", "/bin/true"});
    expect_one_line_failure(r, "run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN");
    EXPECT_FALSE(fs::exists(d / "run.db"));
}

// SIGTERM to profinfer: the launched target is stopped too, and the DB keeps what was
// recorded, marked incomplete. The target asks for far more tokens than it can make before
// the signal (1500 could all be made before the first tokens reached the DB on a loaded
// machine: the run then ended complete and the signal found nothing to stop).
TEST(RecordErrors, SigtermLeavesAConsistentIncompleteDb) {
    PROFINFER_REQUIRE_BPF();
    TempDir d;
    pid_t pid = spawn({profinfer_bin(), "record", "--level", "op", "-o", d / "run.db", "--",
                       llama_debug().program("llama-simple"), "-m", tiny_model("llama3.2-1b"), "-n", "100000", "Hello"});
    // Ready once decode calls are stored (counted as the summary counts them: the tokens
    // table holds the prompt's call too, and a slow board stopped at 10 decode calls).
    ASSERT_TRUE(wait_until(
        [&] { return scalar_or_zero(d / "run.db", "SELECT count(*) FROM calls WHERE phase = 'decode'") > 10; },
        std::chrono::seconds(120)));
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFEXITED(st));
    auto s = RunSummary::load(*open_trace(d / "run.db"));
    EXPECT_EQ(s.meta[store::MetaKey::Status], "incomplete");
    EXPECT_EQ(s.meta[store::MetaKey::InterruptedBy], "Terminated");
    EXPECT_GT(s.decode_calls, 10);
    EXPECT_GT(s.op_records, 100);
}
