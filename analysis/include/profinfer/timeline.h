#pragma once
// ProfTime (paper §4.2): a recording as Chrome Trace Event Format JSON for Perfetto or
// chrome://tracing. Per traced process, a track per thread with token ⊃ graph ⊃
// operator slices (and the wait after each operator at --level full), a state track
// per thread from the scheduler (running on CPU n / runnable / sleeping) with wakeups,
// and counter tracks where counters were recorded.
#include <filesystem>
#include <nlohmann/json.hpp>

namespace profinfer {

nlohmann::json timeline_json(const std::filesystem::path& db);

}  // namespace profinfer
