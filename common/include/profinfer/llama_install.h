#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace profinfer {

// Where the pinned llama.cpp of one flavour lives (debug, blis, release). The
// paths come from the manifest written by scripts/llama.sh, the only place that
// decides them; this class never guesses a path of its own.
struct LlamaInstall {
    std::string flavour;
    std::string llama_cpp_commit;
    bool debug_info = false;
    std::filesystem::path bin_dir;  // empty for release (no programs shipped)
    std::filesystem::path lib_dir;
    std::filesystem::path libllama;
    std::filesystem::path libggml;
    std::filesystem::path libggml_base;
    std::vector<std::filesystem::path> libggml_cpu;

    // A program of the build, e.g. program("llama-simple"); throws if absent.
    std::filesystem::path program(const std::string& name) const;

    // Reads the manifest of FLAVOUR; with build=true builds or unpacks it first.
    static LlamaInstall locate(const std::string& flavour, bool build = false);
    static LlamaInstall from_manifest(const std::filesystem::path& manifest);
};

}  // namespace profinfer
