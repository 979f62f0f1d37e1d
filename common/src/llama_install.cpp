#include "profinfer/llama_install.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "profinfer/error.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

std::string run_and_read_line(const std::string& cmd) {
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
    if (!p) throw_errno("running " + cmd);
    std::array<char, 4096> buf{};
    std::string out;
    while (fgets(buf.data(), buf.size(), p.get())) out += buf.data();
    int status = pclose(p.release());
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (status != 0 || out.empty())
        throw Error("'" + cmd + "' failed (exit status " + std::to_string(status) + ")");
    return out;
}

}  // namespace

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
    std::string script = PROFINFER_LLAMA_SCRIPT;
    std::string cmd = script + (build ? " ensure " : " manifest ") + flavour;
    return from_manifest(run_and_read_line(cmd));
}

}  // namespace profinfer
