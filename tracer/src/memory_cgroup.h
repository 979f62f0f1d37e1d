#pragma once
// A memory cgroup of its own for a launched command (record --memory-limit): the command's
// memory, page cache of the files it maps included, is held under the limit, so that a
// model larger than it pages in from disk (paper Fig. 13: MoE experts). cgroup v1 (the
// memory controller's hierarchy) or v2 (the unified one), whichever the machine mounts.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace profinfer {

class MemoryCgroup {
public:
    // Creates profinfer-<our pid> under the memory hierarchy with LIMIT bytes; throws
    // profinfer::Error naming what is missing (no memory controller, not root).
    explicit MemoryCgroup(uint64_t limit);
    // Removes the cgroup (once its processes have exited; left behind otherwise).
    ~MemoryCgroup();
    MemoryCgroup(const MemoryCgroup&) = delete;
    MemoryCgroup& operator=(const MemoryCgroup&) = delete;

    void add(pid_t pid);
    const std::filesystem::path& path() const { return dir_; }
    std::string version() const { return v2_ ? "v2" : "v1"; }

private:
    std::filesystem::path dir_;
    bool v2_ = false;
};

}  // namespace profinfer
