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
#include <ostream>

#include "profinfer/store.h"

namespace profinfer {

// Writes the timeline of DB to OUT; returns the number of trace events written.
int64_t write_timeline(store::Database& db, std::ostream& out);

}  // namespace profinfer
