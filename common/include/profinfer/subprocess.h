#pragma once
// Child processes without a shell: argv goes to execvp as is, so no character of a
// file name, tensor name or environment variable is ever interpreted by /bin/sh.
#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

namespace profinfer {

struct ProcessResult {
    int status = -1;  // exit status, or 128 + signal
    std::string out;  // standard output
    std::string err;  // standard error
};

// Runs ARGV (argv[0] looked up in PATH), feeds INPUT on its standard input, collects
// its output. Throws profinfer::Error if it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input = {});

// In a child between fork and exec: every descriptor above 2 is closed at exec, so the
// program gets only standard input, output and error — never a database, a BPF object or a
// pipe of ours, nor a high descriptor a tool chokes on (dash refuses `>&12`: mmdebstrap's
// apt hook failed when a test's leaked descriptors pushed its own to 12). Async-signal-safe.
void close_inherited_fds_at_exec() noexcept;

// A command to launch: the same PATH lookup execvp does; profinfer::Error naming why it
// cannot run (not found in PATH, not executable).
void check_command(const std::string& program);

// The last line ARGV prints on its standard output (what a helper script answers, e.g. a
// path); throws profinfer::Error naming the command and its last error line when it fails
// or prints nothing.
std::string last_output_line(const std::vector<std::string>& argv);

// A child whose standard input is a stream we write to (gnuplot reading a script);
// its output goes to /dev/null. wait() closes the stream (if still ours) and returns
// the exit status.
class PipedProcess {
public:
    explicit PipedProcess(const std::vector<std::string>& argv);
    ~PipedProcess();
    PipedProcess(const PipedProcess&) = delete;
    PipedProcess& operator=(const PipedProcess&) = delete;

    // The child's standard input; the caller now owns it and closes it when done.
    FILE* release_input() { FILE* f = in_; in_ = nullptr; return f; }
    int wait();

private:
    pid_t pid_ = -1;
    FILE* in_ = nullptr;
    std::string program_;
};

}  // namespace profinfer
