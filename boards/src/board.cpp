#include "profinfer/board.h"
#include "profinfer/knobs.h"

#include <sys/utsname.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "profinfer/error.h"
#include "profinfer/text_file.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {


std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower((unsigned char)c));
    return s;
}

template <class T, class View>
std::vector<T> array_of(const View& n, const std::string& where) {
    std::vector<T> out;
    if (!n) return out;
    const auto* a = n.as_array();
    if (!a) throw Error(where + " must be an array");
    for (const auto& e : *a) {
        auto v = e.template value<T>();
        if (!v) throw Error(where + " has an element of the wrong type");
        out.push_back(*v);
    }
    return out;
}

std::string string_of(const toml::table& t, const char* key, const std::string& file, bool required = true) {
    if (auto v = t[key].value<std::string>()) return *v;
    if (required) throw Error(file + ": missing string '" + key + "'");
    return "";
}

}  // namespace

BoardProfile BoardProfile::load(const fs::path& file) {
    toml::table t;
    try {
        t = toml::parse_file(file.string());
    } catch (const toml::parse_error& e) {
        throw Error(toml_error_text(file, e, "malformed board profile"));
    }
    const std::string f = file.string();
    BoardProfile p;
    p.name = string_of(t, "name", f);
    p.description = string_of(t, "description", f);
    p.soc = string_of(t, "soc", f, false);
    p.arch = string_of(t, "arch", f);
    if (const auto* parts = t["detect"]["cpu_parts"].as_table())
        for (const auto& [k, v] : *parts) {
            auto n = v.value<int64_t>();
            if (!n || *n <= 0) throw Error(f + ": detect.cpu_parts." + std::string(k.str()) + " must be a positive count");
            p.detect_parts[lower(std::string(k.str()))] = int(*n);
        }
    if (p.detect_parts.empty()) throw Error(f + ": detect.cpu_parts is required (the CPU part ids that identify the board)");
    p.detect_models = array_of<std::string>(t["detect"]["models"], f + ": detect.models");
    p.model_required = t["detect"]["model_required"].value_or(false);
    if (p.model_required && p.detect_models.empty()) throw Error(f + ": detect.model_required without detect.models");
    if (const auto* cl = t["clusters"].as_array())
        for (const auto& c : *cl) {
            const auto* ct = c.as_table();
            if (!ct) throw Error(f + ": clusters must be tables");
            CoreCluster k{string_of(*ct, "core", f), lower(string_of(*ct, "part", f)), {}};
            for (auto v : array_of<int64_t>((*ct)["cpus"], f + ": clusters.cpus")) k.cpus.push_back(int(v));
            p.clusters.push_back(std::move(k));
        }
    for (auto v : array_of<int64_t>(t["inference"]["pin_cpus"], f + ": inference.pin_cpus")) p.pin_cpus.push_back(int(v));
    for (auto v : array_of<int64_t>(t["inference"]["threads"], f + ": inference.threads")) p.threads.push_back(int(v));
    if (p.threads.empty()) throw Error(f + ": inference.threads is required");
    if (const auto* cs = t["counters"].as_array())
        for (const auto& c : *cs) {
            const auto* ct = c.as_table();
            if (!ct) throw Error(f + ": counters must be tables");
            BoardCounter k{string_of(*ct, "name", f), string_of(*ct, "event", f), (*ct)["bytes_per_count"].value_or(0.0),
                           string_of(*ct, "meaning", f, false)};
            p.counters.push_back(std::move(k));
        }
    p.backends = array_of<std::string>(t["backends"]["available"], f + ": backends.available");
    p.backend_notes = t["backends"]["notes"].value_or(std::string());
    p.scale = t["reproduce"]["scale"].value_or(std::string());
    p.note = t["reproduce"]["note"].value_or(std::string());
    if (!p.scale.empty() && p.scale != "tiny" && p.scale != "full") throw Error(f + ": reproduce.scale must be tiny or full");
    int parts = 0;
    for (const auto& [_, n] : p.detect_parts) parts += n;
    int cpus = 0;
    for (const auto& c : p.clusters) cpus += int(c.cpus.size());
    if (cpus && cpus != parts)
        throw Error(f + ": the clusters list " + std::to_string(cpus) + " CPUs but detect.cpu_parts counts " + std::to_string(parts));
    return p;
}

std::string cpu_list(const std::vector<int>& cpus) {
    std::string s;
    for (int c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
}

std::string BoardProfile::counter_list() const {
    std::string l;
    for (const auto& c : counters) l += (l.empty() ? "" : ",") + c.event;
    return l;
}

nlohmann::json BoardProfile::to_json() const {
    nlohmann::json j{{"name", name}, {"description", description}, {"soc", soc}, {"arch", arch},
                     {"pin_cpus", pin_cpus}, {"threads", threads}, {"backends", backends}, {"backend_notes", backend_notes},
                     {"counters", nlohmann::json::array()}, {"clusters", nlohmann::json::array()}};
    for (const auto& c : clusters) j["clusters"].push_back({{"core", c.core}, {"part", c.part}, {"cpus", c.cpus}});
    for (const auto& c : counters)
        j["counters"].push_back({{"name", c.name}, {"event", c.event}, {"bytes_per_count", c.bytes_per_count}, {"meaning", c.meaning}});
    if (memory_bytes) j["memory_bytes"] = memory_bytes;
    if (!scale.empty()) j["scale"] = scale;
    if (!note.empty()) j["note"] = note;
    return j;
}

fs::path board_profiles_dir() {
    if (const auto env = knob(Knob::Boards)) return *env;
    return compiled_in(CompiledIn::BoardsDir);
}

std::vector<BoardProfile> board_profiles() {
    std::vector<fs::path> files;
    const fs::path dir = board_profiles_dir();
    if (!fs::is_directory(dir)) throw Error("no board profiles at " + dir.string() + " (set PROFINFER_BOARDS)");
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".toml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<BoardProfile> out;
    for (const auto& f : files) out.push_back(BoardProfile::load(f));
    return out;
}

BoardProfile board_profile(const std::string& name) {
    std::string known = "host";
    for (auto& p : board_profiles()) {
        if (p.name == name) return p;
        known += ", " + p.name;
    }
    throw Error("no board profile '" + name + "' (known: " + known + "; profiles in " + board_profiles_dir().string() + ")");
}

namespace {
// ARM's part numbers (MIDR_EL1 bits 15:4, implementer 0x41) of the cores boards carry.
std::string arm_core_name(const std::string& part) {
    static const std::map<std::string, std::string> names{
        {"0xd03", "Cortex-A53"}, {"0xd04", "Cortex-A35"}, {"0xd05", "Cortex-A55"}, {"0xd07", "Cortex-A57"},
        {"0xd08", "Cortex-A72"}, {"0xd09", "Cortex-A73"}, {"0xd0a", "Cortex-A75"}, {"0xd0b", "Cortex-A76"},
        {"0xd0c", "Neoverse-N1"}, {"0xd0d", "Cortex-A77"}, {"0xd40", "Neoverse-V1"}, {"0xd41", "Cortex-A78"},
        {"0xd44", "Cortex-X1"}, {"0xd46", "Cortex-A510"}, {"0xd47", "Cortex-A710"}, {"0xd48", "Cortex-X2"},
        {"0xd49", "Neoverse-N2"}, {"0xd4d", "Cortex-A715"}, {"0xd4e", "Cortex-X3"}, {"0xd80", "Cortex-A520"},
        {"0xd81", "Cortex-A720"}, {"0xd82", "Cortex-X4"}};
    auto it = names.find(part);
    return it == names.end() ? "part " + part : it->second + " (" + part + ")";
}
}  // namespace

std::string MachineFacts::cpu_description() const {
    for (const auto& m : cpu_models)
        if (!m.empty()) return m;
    std::vector<std::pair<std::string, int>> parts;  // in CPU order
    for (const auto& p : cpu_parts) {
        if (p.empty()) continue;
        auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& e) { return e.first == p; });
        if (it == parts.end())
            parts.emplace_back(p, 1);
        else
            ++it->second;
    }
    std::string d;
    for (const auto& [part, n] : parts) d += (d.empty() ? "" : " + ") + std::to_string(n) + "x " + arm_core_name(part);
    if (!device_model.empty()) d += (d.empty() ? "" : ", ") + device_model;
    return d.empty() ? "unknown" : d;
}

MachineFacts MachineFacts::read(const fs::path& root) {
    MachineFacts m;
    if (!fs::exists(root / "proc/cpuinfo"))
        throw Error("no " + (root / "proc/cpuinfo").string() + ": is " + root.string() + " the root of a Linux system?");
    std::istringstream cpuinfo(read_text(root / "proc/cpuinfo"));
    std::string line, model;
    int cpu = -1;
    auto value = [](const std::string& l) { return trim(l.substr(l.find(':') + 1)); };
    while (std::getline(cpuinfo, line)) {
        const std::string key = trim(line.substr(0, line.find(':')));
        if (line.find(':') == std::string::npos) continue;
        if (key == "processor") {
            cpu = int(m.cpu_parts.size());
            m.cpu_parts.emplace_back();
            m.cpu_models.emplace_back();
        } else if (cpu < 0) {
            continue;
        } else if (key == "CPU part") {
            m.cpu_parts[cpu] = lower(value(line));
        } else if (key == "model name") {
            m.cpu_models[cpu] = value(line);
        } else if (cpu == 0 && (key == "cpu family" || key == "model" || key == "stepping")) {
            m.x86_model += (m.x86_model.empty() ? "" : " ") + std::string(key == "cpu family" ? "family" : key) + " " + value(line);
        } else if (cpu == 0 && (key == "flags" || key == "Features")) {
            std::istringstream flags(" " + value(line) + " ");
            std::set<std::string> have;
            for (std::string f; flags >> f;) have.insert(f);
            for (const char* isa : {"avx512f", "avx2", "avx", "sve2", "sve", "asimd"})
                if (have.count(isa)) {
                    m.vector_isa = isa;
                    break;
                }
        }
        if (key == "CPU architecture" && m.arch.empty()) m.arch = value(line) == "8" ? "aarch64" : "";
    }
    if (m.cpu_parts.empty()) throw Error((root / "proc/cpuinfo").string() + " lists no processor");
    m.device_model = trim(read_text(root / "proc/device-tree/model"));
    m.kernel = trim(read_text(root / "proc/sys/kernel/osrelease"));
    std::istringstream meminfo(read_text(root / "proc/meminfo"));
    while (std::getline(meminfo, line))
        if (line.rfind("MemTotal:", 0) == 0) m.memory_bytes = std::stoull(line.substr(9)) * 1024;
    if (root == "/" || m.arch.empty()) {
        utsname u{};
        if (root == "/" && uname(&u) == 0) m.arch = u.machine;
        else if (m.arch.empty()) m.arch = "x86_64";  // a fixture without an ARM "CPU architecture"
    }
    return m;
}

std::string MachineFacts::identity() const {
    std::string id = cpu_description();
    if (!x86_model.empty()) id += ", " + x86_model;
    if (!vector_isa.empty()) id += ", " + vector_isa;
    id += ", " + std::to_string(cpu_parts.size()) + (cpu_parts.size() == 1 ? " CPU" : " CPUs");
    if (memory_bytes) id += ", " + std::to_string((memory_bytes + (1ull << 29)) >> 30) + " GiB";
    if (!kernel.empty()) id += ", Linux " + kernel;
    return id;
}

BoardMatch detect_board(const MachineFacts& facts, const std::vector<BoardProfile>& profiles) {
    std::map<std::string, int> parts;
    for (const auto& p : facts.cpu_parts)
        if (!p.empty()) ++parts[p];
    std::string seen;
    for (const auto& [p, n] : parts) seen += (seen.empty() ? "" : ", ") + std::to_string(n) + "x part " + p;
    if (seen.empty()) seen = std::to_string(facts.cpu_parts.size()) + " CPUs without part ids";
    if (!facts.device_model.empty()) seen += "; device-tree model '" + facts.device_model + "'";
    const BoardProfile* best = nullptr;
    bool best_model = false;
    for (const auto& p : profiles) {
        if (p.detect_parts != parts) continue;
        bool model = false;
        for (const auto& m : p.detect_models) model |= lower(facts.device_model).find(lower(m)) != std::string::npos;
        if (p.model_required && !model) continue;
        if (!best || (model && !best_model)) best = &p, best_model = model;
    }
    if (!best) return {"host", "no board profile matches (" + seen + "): this machine is 'host'"};
    return {best->name, best->description + " (" + seen + ")"};
}

BoardProfile host_profile(const MachineFacts& facts) {
    BoardProfile p;
    p.name = "host";
    p.arch = facts.arch;
    p.description = "this machine: " + std::to_string(facts.cpu_parts.size()) + " CPUs (" + facts.arch + ")";
    for (size_t cpu = 0; cpu < facts.cpu_parts.size(); ++cpu) {
        const std::string core = facts.cpu_parts[cpu].empty() ? facts.cpu_models[cpu] : "part " + facts.cpu_parts[cpu];
        auto it = std::find_if(p.clusters.begin(), p.clusters.end(),
                               [&](const CoreCluster& c) { return c.part == facts.cpu_parts[cpu] && c.core == core; });
        if (it == p.clusters.end()) p.clusters.push_back({core, facts.cpu_parts[cpu], {}}), it = p.clusters.end() - 1;
        it->cpus.push_back(int(cpu));
        ++p.detect_parts[facts.cpu_parts[cpu]];
    }
    for (int t = 1; t <= int(facts.cpu_parts.size()); t *= 2) p.threads.push_back(t);
    if (!p.threads.empty() && p.threads.back() != int(facts.cpu_parts.size())) p.threads.push_back(int(facts.cpu_parts.size()));
    // perf's generic names: the kernel maps them to this CPU's PMU, or says it has none.
    p.counters = {{"cycles", "cycles", 0, "CPU cycles"},
                  {"cache-misses", "cache-misses", 64, "last-level cache misses (one line each)"},
                  {"stalled-cycles-backend", "stalled-cycles-backend", 0, "cycles stalled at the backend"},
                  {"major-faults", "major-faults", 0, "major page faults (software event)"}};
    p.backends = {"cpu", "blis", "openblas", "vulkan"};
    p.backend_notes = "Vulkan where a device is listed (Mesa's lavapipe runs it on the CPU)";
    p.memory_bytes = facts.memory_bytes;
    return p;
}

}  // namespace profinfer
