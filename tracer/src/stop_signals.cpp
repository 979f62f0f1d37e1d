#include "stop_signals.h"

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
int g_fd = -1;
extern "C" void on_stop_signal(int sig) {
    g_last = sig;
    ++g_count;
    if (g_fd >= 0) {
        const int saved = errno;
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(g_fd, &one, sizeof one);  // async-signal-safe
        errno = saved;
    }
}
}  // namespace

void install() {
    if (g_fd < 0) g_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int last() { return g_last.load(); }
int count() { return g_count.load(); }
int fd() { return g_fd; }

void throw_if_stopped(const char* when) {
    if (int sig = last()) throw Error(std::string("interrupted by ") + strsignal(sig) + " " + when);
}

}  // namespace profinfer::stop_signals
