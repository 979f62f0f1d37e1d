#include "stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <string>

#include "profinfer/error.h"

namespace profinfer::stop_signals {

namespace {
std::atomic<int> g_last{0};
std::atomic<int> g_count{0};
extern "C" void on_stop_signal(int sig) {
    g_last = sig;
    ++g_count;
}
}  // namespace

void install() {
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int last() { return g_last.load(); }
int count() { return g_count.load(); }

void throw_if_stopped(const char* when) {
    if (int sig = last()) throw Error(std::string("interrupted by ") + strsignal(sig) + " " + when);
}

}  // namespace profinfer::stop_signals
