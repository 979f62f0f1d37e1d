#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace profinfer {

// The libraries of a llama.cpp process the tracer cares about. ggml's CPU backend may
// be one of several variants loaded with dlopen (libggml-cpu-haswell.so, ...).
enum class LibRole { Llama, Ggml, GgmlBase, GgmlCpu, Other };
const char* to_string(LibRole r);
LibRole classify_library(const std::filesystem::path& path);

struct MappedLibrary {
    std::filesystem::path path;
    LibRole role;
};

// Executable file mappings of PID, each path once, in the order of /proc/PID/maps.
std::vector<MappedLibrary> mapped_libraries(pid_t pid);

// The dynamic loader this process runs under; programs we launch use the same one.
std::filesystem::path own_dynamic_loader();

bool process_exists(pid_t pid);
// The state letter of /proc/PID/stat (R, S, T, Z, ...), or 0 if the process is gone.
char process_state(pid_t pid);
std::string process_comm(pid_t pid);

}  // namespace profinfer
