#pragma once
// ProfTime (paper §4.2): a recording as Chrome Trace Event Format JSON for Perfetto or
// chrome://tracing. Per traced process, a track per thread with token ⊃ graph ⊃
// operator slices (and the wait after each operator at --level full), a state track
// per thread from the scheduler (running on CPU n / runnable / sleeping) with wakeups,
// and counter tracks where counters were recorded. Only the recorded llama_decode calls
// are shown (docs/trace-store.md, call_graphs).
//
// Written as a stream in time order: memory stays bounded whatever the recording's
// size (SQLite sorts each kind of event; the writer merges them).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>

#include "profinfer/store.h"

namespace profinfer {

// The calls a timeline shows: FIRST to LAST (call numbers, as stat --by token prints them).
struct CallWindow {
    int64_t first = 0, last = 0;
};

// A long recording's JSON outgrows what a viewer loads (a one-minute --level full recording
// of a 1B model: 1.1 M operator parts, 840 MB): by default a timeline holds the calls from
// the first up to this many operator parts, and says so.
constexpr int64_t kTimelineDefaultParts = 400'000;

// The default window of DB: every call when its operator parts fit kTimelineDefaultParts,
// else the first calls that do (at least one); nothing when DB has no calls.
std::optional<CallWindow> default_call_window(store::Database& db, int64_t max_parts = kTimelineDefaultParts);

// Writes the timeline of DB to OUT, only WINDOW's calls (and the scheduler's events between
// their start and end) when given; returns the number of trace events written.
int64_t write_timeline(store::Database& db, std::ostream& out, const std::optional<CallWindow>& window = std::nullopt);

}  // namespace profinfer
