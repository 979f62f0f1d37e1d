// `profinfer model synth` as a user runs it: errors, atomicity, determinism.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "test_support.h"

namespace fs = std::filesystem;
using namespace profinfer::test;

TEST(SynthCli, UnwritableOutputIsOneErrorLineAndNoFile) {
    TempDir d;
    fs::path out = d / "no-such-dir" / "m.gguf";
    auto r = run({profinfer_bin(), "model", "synth", "--card", "llama3.2-1b", "--scale", "tiny", "-o", out});
    expect_one_line_failure(r, "profinfer: error: cannot write");
    EXPECT_FALSE(fs::exists(out));
}

TEST(SynthCli, MalformedOrUnknownCardsAreRefusedWithoutWriting) {
    TempDir d;
    std::ofstream(d / "bad.toml") << "name = \"x\"\narch = [\n";
    std::ofstream(d / "rwkv.toml") << "name='x'\narch='rwkv7'\nhidden=64\nlayers=1\nheads=4\nkv_heads=2\n"
                                      "head_dim=16\nffn=128\nvocab=300\n";
    for (const char* card : {"bad.toml", "rwkv.toml"}) {
        SCOPED_TRACE(card);
        fs::path out = d / "m.gguf";
        auto r = run({profinfer_bin(), "model", "synth", "--card", d / card, "-o", out});
        expect_one_line_failure(r, "profinfer: error: ");
        EXPECT_FALSE(fs::exists(out));
    }
    auto r = run({profinfer_bin(), "model", "synth", "--card", d / "rwkv.toml", "-o", d / "m.gguf"});
    EXPECT_NE(r.err.find("unknown architecture 'rwkv7'"), std::string::npos) << r.err;
}

TEST(SynthCli, SameSeedSameBytesOtherSeedOtherBytes) {
    TempDir d;
    auto synth = [&](const char* seed, const char* name) {
        auto r = run({profinfer_bin(), "model", "synth", "--card", "qwen2.5-1.5b", "--scale", "tiny", "--type", "q4_0",
                      "--seed", seed, "-o", d / name});
        EXPECT_EQ(r.status, 0) << r.err;
        return read_file(d / name);
    };
    auto a = synth("7", "a.gguf"), b = synth("7", "b.gguf"), c = synth("8", "c.gguf");
    EXPECT_GT(a.size(), 50000u);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a.size(), c.size());
    EXPECT_NE(a, c);
}

TEST(SynthCli, InterruptedWriteLeavesNoFile) {
    TempDir d;
    fs::path out = d / "big.gguf";
    // The full-size model at f32 is ~6 GB: interrupted once it is writing.
    pid_t pid = spawn({profinfer_bin(), "model", "synth", "--card", "llama3.2-1b", "--type", "f32", "-o", out});
    const fs::path partial = out.string() + ".partial";
    ASSERT_TRUE(wait_until([&] { return fs::exists(partial) && fs::file_size(partial) > (1u << 20); },
                           std::chrono::seconds(60)));
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".partial"));
}
