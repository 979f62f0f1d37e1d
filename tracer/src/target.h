#pragma once
#include <sys/types.h>

#include <cstdint>

#include <filesystem>
#include <string>
#include <vector>

namespace profinfer {

// The libraries of a llama.cpp process the tracer cares about. ggml's CPU backend may
// be one of several variants loaded with dlopen (libggml-cpu-haswell.so, ...).
enum class LibRole { Llama, Ggml, GgmlBase, GgmlCpu, GgmlVulkan, Other };
const char* to_string(LibRole r);
LibRole classify_library(const std::filesystem::path& path);

struct MappedLibrary {
    std::filesystem::path path;
    LibRole role;
    struct Segment {
        uint64_t start, end, offset;  // addresses [start, end) map the file from offset
    };
    std::vector<Segment> exec;  // its executable mappings
    // The file was replaced or removed on disk since it was mapped: its path then, while
    // `path` is /proc/PID/map_files/RANGE, the file the process runs (empty otherwise).
    std::string replaced_on_disk;
    // Where the byte at FILE_OFFSET of the file is in the process (0 if not mapped).
    uint64_t address_of(uint64_t file_offset) const;
};

// Executable file mappings of PID, each path once, in the order of /proc/PID/maps.
std::vector<MappedLibrary> mapped_libraries(pid_t pid);

// The dynamic loader this process runs under; programs we launch use the same one.
std::filesystem::path own_dynamic_loader();
// The dynamic loader PID runs (a path we can open: in its root, see mapped_libraries).
std::filesystem::path dynamic_loader_of(pid_t pid);

bool process_exists(pid_t pid);
// The state letter of /proc/PID/stat (R, S, T, Z, ...), or 0 if the process is gone.
char process_state(pid_t pid);
std::string process_comm(pid_t pid);
// Its command line, arguments joined by spaces.
std::string read_cmdline(pid_t pid);

}  // namespace profinfer
