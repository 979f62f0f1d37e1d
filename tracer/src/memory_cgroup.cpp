#include "memory_cgroup.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "profinfer/error.h"
#include "profinfer/number_text.h"
#include "profinfer/recorder.h"

namespace fs = std::filesystem;

namespace profinfer {

uint64_t parse_memory_size(const std::string& text) {
    size_t used = 0;
    const double v = leading_number(text, &used).value_or(0);
    const std::string unit = used ? text.substr(used) : "";
    double scale = 0;
    if (unit.empty() || unit == "B") scale = 1;
    else if (unit == "K" || unit == "KiB") scale = 1024.0;
    else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
    if (!used || scale == 0 || !(v > 0) || !std::isfinite(v))
        throw Error("memory size '" + text + "': a positive number with K, M or G (e.g. 512M, 3G)");
    const double bytes = v * scale;
    if (bytes < 16.0 * 1024 * 1024) throw Error("memory size '" + text + "' is below 16M: the command could not even load");
    // A bound no machine has is no limit (1e30G overflowed into a meaningless number).
    if (bytes > 1024.0 * 1024 * 1024 * 1024 * 1024)
        throw Error("memory size '" + text + "' is above 1024T: give a limit this machine could reach, or leave --memory-limit out");
    return uint64_t(bytes);
}

namespace {
void write_file(const fs::path& f, const std::string& value) {
    std::ofstream o(f);
    o << value;
    o.flush();
    if (!o) throw Error("cannot write '" + value + "' to " + f.string() + ": " + std::strerror(errno));
}
}  // namespace

MemoryCgroup::MemoryCgroup(uint64_t limit) {
    const std::string name = "profinfer-" + std::to_string(getpid());
    if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
        dir_ = fs::path("/sys/fs/cgroup/memory") / name;
    } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
        v2_ = true;
        dir_ = fs::path("/sys/fs/cgroup") / name;
    } else {
        throw Error("--memory-limit: no memory cgroup here (neither /sys/fs/cgroup/memory nor a cgroup v2 hierarchy)");
    }
    std::error_code ec;
    if (!fs::create_directory(dir_, ec) && ec)
        throw Error("--memory-limit: cannot create " + dir_.string() + ": " + ec.message() + " (needs root)");
    try {
        if (v2_) {
            write_file(dir_ / "memory.max", std::to_string(limit));
            // Paging anonymous memory to swap would hide the file reads; absent without swap.
            if (fs::exists(dir_ / "memory.swap.max")) write_file(dir_ / "memory.swap.max", "0");
        } else {
            write_file(dir_ / "memory.limit_in_bytes", std::to_string(limit));
        }
    } catch (...) {
        fs::remove(dir_, ec);
        throw;
    }
}

MemoryCgroup::~MemoryCgroup() {
    // The last process may still be exiting: a few tries.
    for (int i = 0; i < 50; ++i) {
        if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void MemoryCgroup::add(pid_t pid) { write_file(dir_ / "cgroup.procs", std::to_string(pid)); }

}  // namespace profinfer
