#include "profinfer/stop_signals.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "profinfer/error.h"

namespace profinfer::stop_signals {

namespace {
std::atomic<int> g_last{0};
std::atomic<int> g_count{0};
std::atomic<bool> g_from_terminal{false};
std::atomic<bool> g_end{false};
int g_fd = -1;
void wake() {
    if (g_fd >= 0) {
        const int saved = errno;
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(g_fd, &one, sizeof one);  // async-signal-safe
        errno = saved;
    }
}
extern "C" void on_end_signal(int) {
    g_end = true;
    wake();
}
extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
    // The tty driver (^C, ^\\, a hangup) signals the whole foreground process group with
    // SI_KERNEL; kill(2) and sigqueue(3) say SI_USER / SI_QUEUE.
    g_from_terminal = info && info->si_code == SI_KERNEL;
    g_last = sig;
    ++g_count;
    wake();
}
}  // namespace

void install() {
    if (g_fd < 0) g_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct sigaction sa{};
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
    struct sigaction end{};
    end.sa_handler = on_end_signal;
    sigaction(SIGUSR1, &end, nullptr);
}

bool end_requested() { return g_end.load(); }

int last() { return g_last.load(); }
int count() { return g_count.load(); }
bool last_from_terminal() { return g_from_terminal.load(); }
int fd() { return g_fd; }

void throw_if_stopped(const char* when) {
    if (int sig = last()) throw Error(std::string("interrupted by ") + strsignal(sig) + " " + when);
}

}  // namespace profinfer::stop_signals
