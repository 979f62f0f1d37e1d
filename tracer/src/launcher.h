#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace profinfer {

// A command started by `profinfer record -- CMD ...`, held before exec until the
// tracer has attached what must be in place from its first instruction.
class LaunchedProcess {
public:
    explicit LaunchedProcess(const std::vector<std::string>& argv);
    ~LaunchedProcess();
    LaunchedProcess(const LaunchedProcess&) = delete;
    LaunchedProcess& operator=(const LaunchedProcess&) = delete;

    pid_t pid() const { return pid_; }
    // Whether the command runs (release() succeeded): from then on it is the user's
    // process, which profinfer never kills on its own account.
    bool released() const { return released_; }
    // Exit status of a child that was never released.
    static constexpr int kNotReleased = 125;
    // Lets the child exec; if exec fails, throws with the reason.
    void release();
    // The exit status (shell convention: 128+signal when killed), once it has exited.
    std::optional<int> poll_exit();
    int wait_exit();
    void signal(int sig);

private:
    pid_t pid_ = -1;
    int gate_fd_ = -1;    // write end: closing it lets the child go on
    int status_fd_ = -1;  // read end: the child writes errno here if exec fails
    std::optional<int> exit_status_;
    bool released_ = false;
    std::string program_;
};

}  // namespace profinfer
