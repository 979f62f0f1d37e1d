#pragma once
// Helpers shared by the integration tests: run a program, make a temp dir, get a
// tiny synthetic model, and the rule for tests that need root/eBPF.
#include <gtest/gtest.h>

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "profinfer/llama_install.h"

namespace profinfer::test {

struct RunResult {
    int status = -1;  // exit status, or 128+signal
    std::string out, err;
};

// Runs ARGV (argv[0] looked up in PATH) with extra environment ENV; waits for it.
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// The CLI's failure convention: non-zero exit and exactly one stderr line containing NEEDLE.
void expect_one_line_failure(const RunResult& r, const std::string& needle);

// Starts ARGV with output discarded and returns its pid, without waiting.
pid_t spawn(const std::vector<std::string>& argv);

// The profinfer binary under test.
std::filesystem::path profinfer_bin();
// tests/programs/llama_graph_dump, built against the pinned debug llama.cpp.
std::filesystem::path graph_dump_bin();

// tests/programs/llama_graph_dump built against the stock release libraries.
std::filesystem::path graph_dump_release_bin();
// A program whose libllama.so exports no llama_decode (as a stripped build would).
std::filesystem::path fake_llama_bin();

// One node as llama.cpp's eval callback reported it (llama_graph_dump's output).
struct DumpNode {
    int call = 0;  // the llama_decode call, 0 = the prompt
    std::string name, op;
    std::vector<std::string> src;
    std::vector<std::vector<int>> ids;  // MUL_MAT_ID: expert ids per token
    // Nodes ggml computes (views and reshapes are free and never reach a kernel).
    bool computed() const;
};
std::vector<DumpNode> parse_graph_dump(const std::string& out);

// A fresh directory removed at scope exit.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

// The pinned llama.cpp debug-info build (built by `make test` beforehand).
const LlamaInstall& llama_debug();

// A tiny synthetic model of CARD written by `profinfer model synth`, made once per
// test program and kept for its lifetime.
std::filesystem::path tiny_model(const std::string& card, const std::string& type = "f16");

// `profinfer record --level LEVEL -- llama-simple -m <tiny CARD> -n N_TOKENS "Hello world"`,
// made once per test program and kept for its lifetime.
std::filesystem::path tiny_recording(const std::string& card, const std::string& level, int n_tokens);

// True when the test may use eBPF. Otherwise records why: a skip on a developer
// machine, a failure under CI=true (CI runs as root and must run these for real).
bool bpf_available(std::string* why);
#define PROFINFER_REQUIRE_BPF()                                                       \
    do {                                                                              \
        std::string why_;                                                             \
        if (!::profinfer::test::bpf_available(&why_)) {                               \
            if (std::getenv("CI") && std::string(std::getenv("CI")) == "true")        \
                FAIL() << "eBPF test cannot run under CI=true: " << why_;             \
            GTEST_SKIP() << "skipped: " << why_;                                      \
        }                                                                             \
    } while (0)

}  // namespace profinfer::test
