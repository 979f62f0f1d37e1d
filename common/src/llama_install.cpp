#include "profinfer/llama_install.h"
#include "profinfer/knobs.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "profinfer/error.h"
#include "profinfer/subprocess.h"

namespace fs = std::filesystem;

namespace profinfer {


fs::path LlamaInstall::program(const std::string& name) const {
    if (bin_dir.empty())
        throw Error("llama.cpp flavour '" + flavour + "' ships no programs (only libraries)");
    fs::path p = bin_dir / name;
    if (!fs::exists(p)) throw Error("llama.cpp flavour '" + flavour + "' has no program " + p.string());
    return p;
}

LlamaInstall LlamaInstall::from_manifest(const fs::path& manifest) {
    std::ifstream in(manifest);
    if (!in) throw Error("cannot read llama.cpp manifest " + manifest.string());
    nlohmann::json j;
    try {
        in >> j;
    } catch (const std::exception& e) {
        throw Error("malformed llama.cpp manifest " + manifest.string() + ": " + e.what());
    }
    LlamaInstall li;
    li.flavour = j.at("flavour").get<std::string>();
    li.llama_cpp_commit = j.value("llama_cpp_commit", "unknown");
    li.debug_info = j.value("debug_info", false);
    li.bin_dir = j.value("bin_dir", "");
    li.lib_dir = j.at("lib_dir").get<std::string>();
    li.libllama = li.lib_dir / j.at("libllama").get<std::string>();
    li.libggml = li.lib_dir / j.at("libggml").get<std::string>();
    li.libggml_base = li.lib_dir / j.at("libggml_base").get<std::string>();
    for (const auto& c : j.at("libggml_cpu")) li.libggml_cpu.push_back(li.lib_dir / c.get<std::string>());
    return li;
}

LlamaInstall LlamaInstall::locate(const std::string& flavour, bool build) {
    return from_manifest(last_output_line({compiled_in(CompiledIn::LlamaScript), build ? "ensure" : "manifest", flavour}));
}

}  // namespace profinfer
