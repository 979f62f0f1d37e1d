#pragma once
// Board profiles (boards/profiles/*.toml): what a board is — core clusters, where the
// inference threads go, the thread counts to sweep, the PMU counters of the paper's Table 3
// as the board encodes them, the backends it can run — and which profile the machine in
// front of us is, from /proc/cpuinfo's CPU part ids and the device-tree model. "host" is
// whatever machine this is, described from what it reports.
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace profinfer {

struct CoreCluster {
    std::string core;  // Cortex-A76, or the model name /proc/cpuinfo gives (host)
    std::string part;  // MIDR part id, "0xd0b"; empty where the CPU reports none (x86)
    std::vector<int> cpus;
};

struct BoardCounter {
    std::string name;   // what tables call it (Table 3): l3d_cache_refill, ...
    std::string event;  // what record --counters takes: a raw PMU code (r2a), a perf or libpfm4 name
    double bytes_per_count = 0;  // 64 for a cache-line refill; 0 where it counts no bytes
    std::string meaning;
};

struct BoardProfile {
    std::string name, description, soc, arch;
    std::map<std::string, int> detect_parts;  // part id → number of CPUs with it
    std::vector<std::string> detect_models;   // substrings of the device-tree model
    bool model_required = false;              // the model must match, not only be preferred
    std::vector<CoreCluster> clusters;
    std::vector<int> pin_cpus;                // inference threads' CPUs; empty: not pinned
    std::vector<int> threads;                 // thread counts to sweep
    std::vector<BoardCounter> counters;
    std::vector<std::string> backends;
    std::string backend_notes;
    std::string scale;  // [reproduce] scale: the model scale its studies run at (empty: each spec's)
    std::string note;   // [reproduce] note: what its results README must say first (e.g. emulated speed)
    uint64_t memory_bytes = 0;                // the machine's (host), 0 for a profile file

    // Throws profinfer::Error naming the file and key on a malformed profile.
    static BoardProfile load(const std::filesystem::path& file);
    // The list record --counters takes: "r2a,r67,...".
    std::string counter_list() const;
    nlohmann::json to_json() const;
};

// "4,5,6,7": a CPU list as taskset and the profiles' printouts write it.
std::string cpu_list(const std::vector<int>& cpus);

// boards/profiles (PROFINFER_BOARDS overrides it).
std::filesystem::path board_profiles_dir();
std::vector<BoardProfile> board_profiles();  // every profile file, by name
BoardProfile board_profile(const std::string& name);  // a profile file's name; Error listing the known ones

// What a machine says about itself, read under ROOT ("/" normally; a fixture directory in tests).
struct MachineFacts {
    std::string arch;                     // uname machine (given for fixtures: from cpuinfo)
    std::vector<std::string> cpu_parts;   // per CPU, "" where none (x86)
    std::vector<std::string> cpu_models;  // per CPU, model name where given
    std::string device_model;             // /proc/device-tree/model, "" without one
    uint64_t memory_bytes = 0;            // MemTotal
    std::string x86_model;                // "family F model M stepping S" of the first CPU (x86), else ""
    std::string vector_isa;               // the widest vector unit the flags name (avx512f, avx2, avx, sve, asimd), or ""
    std::string kernel;                   // the kernel's release (proc/sys/kernel/osrelease)
    static MachineFacts read(const std::filesystem::path& root = "/");
    // Which machine this is, as one line a study's index keeps (its rounds come from one
    // machine): the CPUs, their x86 family/model/stepping, vector unit, count, memory and the
    // kernel — two VMs both called "AMD EPYC" differ here (Zen 3 with AVX2, Zen 4 with AVX-512).
    std::string identity() const;
    // What the CPUs are, for captions and machine.json: the model name where cpuinfo gives
    // one (x86), else the CPUs by ARM part ("4x Cortex-A76 (0xd0b)") and the device model.
    std::string cpu_description() const;
};

struct BoardMatch {
    std::string name;  // a profile's name, or "host" when none matches
    std::string why;   // one line: what was seen
};
BoardMatch detect_board(const MachineFacts& facts, const std::vector<BoardProfile>& profiles);
// The machine described as a profile named "host": clusters by CPU part or model, all
// CPUs, threads 1..n, generic counters (cycles, cache-misses, stalled-cycles-backend,
// major-faults), the CPU backends.
BoardProfile host_profile(const MachineFacts& facts);

}  // namespace profinfer
