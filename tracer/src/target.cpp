#include "target.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "profinfer/error.h"

namespace fs = std::filesystem;

namespace profinfer {

const char* to_string(LibRole r) {
    switch (r) {
        case LibRole::Llama: return "libllama";
        case LibRole::Ggml: return "libggml";
        case LibRole::GgmlBase: return "libggml-base";
        case LibRole::GgmlCpu: return "libggml-cpu";
        case LibRole::GgmlVulkan: return "libggml-vulkan";
        case LibRole::Other: return "other";
    }
    return "?";
}

LibRole classify_library(const fs::path& path) {
    const std::string n = path.filename().string();
    auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
    // libllama.so, libllama.so.0.4.0, libllama.v0.4.0.so — not libllama-common.so & co.
    if (starts("libllama.")) return LibRole::Llama;
    if (starts("libggml-base")) return LibRole::GgmlBase;
    if (starts("libggml-cpu")) return LibRole::GgmlCpu;
    if (starts("libggml-vulkan")) return LibRole::GgmlVulkan;
    if (starts("libggml.")) return LibRole::Ggml;
    return LibRole::Other;
}

namespace {
// Where PID's files are for us: its paths as they are when it shares our root, else under
// /proc/PID/root (a container's own root filesystem).
std::string root_of(pid_t pid) {
    const std::string root = "/proc/" + std::to_string(pid) + "/root";
    struct stat theirs{}, ours{};
    if (::stat(root.c_str(), &theirs) != 0 || ::stat("/", &ours) != 0) return "";
    return theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino ? "" : root;
}
}  // namespace

std::vector<MappedLibrary> mapped_libraries(pid_t pid) {
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    if (!maps) throw Error("cannot read /proc/" + std::to_string(pid) + "/maps: no such process, or no permission");
    const std::string root = root_of(pid);
    std::vector<MappedLibrary> out;
    std::set<std::string> seen;
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream ls(line);
        std::string range, perms, offset, dev, inode, path;
        ls >> range >> perms >> offset >> dev >> inode;
        std::getline(ls >> std::ws, path);
        if (path.empty() || path[0] != '/' || perms.size() < 3 || perms[2] != 'x') continue;
        const auto dash = range.find('-');
        const MappedLibrary::Segment seg{std::stoull(range.substr(0, dash), nullptr, 16),
                                         std::stoull(range.substr(dash + 1), nullptr, 16), std::stoull(offset, nullptr, 16)};
        // A file replaced or removed on disk since it was mapped (an upgrade under a running
        // server): the path now names another file, or none. The process still runs the old
        // one, which /proc/PID/map_files reaches (root only): probes and symbols go there.
        const bool deleted = path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0;
        if (deleted) path.resize(path.size() - 10);
        const std::string name = root + path;
        if (seen.insert(name).second) {
            const fs::path at = deleted ? fs::path("/proc/" + std::to_string(pid) + "/map_files/" + range) : fs::path(name);
            out.push_back({at, classify_library(name), {}, deleted ? name : std::string()});
        }
        for (auto& lib : out)
            if ((lib.replaced_on_disk.empty() ? lib.path.string() : lib.replaced_on_disk) == name) lib.exec.push_back(seg);
    }
    return out;
}

uint64_t MappedLibrary::address_of(uint64_t file_offset) const {
    for (const auto& s : exec)
        if (file_offset >= s.offset && file_offset < s.offset + (s.end - s.start)) return s.start + (file_offset - s.offset);
    return 0;
}

fs::path dynamic_loader_of(pid_t pid) {
    for (const auto& lib : mapped_libraries(pid)) {
        auto n = lib.path.filename().string();
        if (n.rfind("ld-linux", 0) == 0 || n.rfind("ld64", 0) == 0 || n.rfind("ld-", 0) == 0) return lib.path;
    }
    throw Error("cannot find the dynamic loader in /proc/" + std::to_string(pid) +
                "/maps (a statically linked program? profinfer needs llama.cpp's shared libraries)");
}

fs::path own_dynamic_loader() { return dynamic_loader_of(getpid()); }

bool process_exists(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

namespace {
std::string read_stat(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(f, s);
    return s;
}
}  // namespace

char process_state(pid_t pid) {
    std::string s = read_stat(pid);
    auto p = s.rfind(')');  // comm may contain spaces and parentheses
    return (p == std::string::npos || p + 2 >= s.size()) ? 0 : s[p + 2];
}

std::string process_comm(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(f, s);
    return s;
}

std::string read_cmdline(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::string s((std::istreambuf_iterator<char>(f)), {});
    std::replace(s.begin(), s.end(), '\0', ' ');
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

}  // namespace profinfer
