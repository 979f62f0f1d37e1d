#pragma once
// SIGINT, SIGTERM and SIGHUP while recording: noted, never fatal, so that every way out
// passes through the recorder's cleanup (the probes go, the target goes on).
namespace profinfer::stop_signals {

// Installed before anything else happens: a ^C while the BPF objects load must reach
// the cleanup, not kill profinfer mid-way.
void install();
int last();   // the last stop signal, 0 if none arrived
int count();  // how many arrived
// The last one came from the terminal (^C, a hangup): it reached the whole foreground
// process group, a command launched in ours included.
bool last_from_terminal();
// An eventfd that each stop signal writes to (after noting it): readable from the first
// one on, so that a loop sleeping in epoll wakes for it instead of polling a flag on a
// timer. Valid after install(); reading it is the caller's choice (level: stays readable).
int fd();
// SIGUSR1 arrived: a recording with --duration ends now as it would at its end (an attach
// detaches, the trace complete) — how profinfer watch closes a segment early. Not a stop
// signal: last() and count() do not see it.
bool end_requested();
// The stop signal, if one arrived, as an error: used before the command starts.
void throw_if_stopped(const char* when);

}  // namespace profinfer::stop_signals
