#pragma once
// `profinfer diff A.db B.db`: what got faster or slower between two recordings, per op
// type and per operator (base name and op). Times are per llama_decode call of the phase
// compared (decode by default), so runs of different lengths compare; operator time is
// node_times (docs/trace-store.md).
#include <filesystem>
#include <string>

#include "profinfer/stats.h"

namespace profinfer {

// Rows: level (op-type or op), name, op, a_ms_per_call, b_ms_per_call, change_pct
// ((b − a) / a), a_share_pct, b_share_pct, a_count_per_call, b_count_per_call, verdict
// (faster, slower, same: within ±THRESHOLD_PCT, only in A, only in B); largest absolute
// change in time first. Calls: PHASE (decode, prefill or all).
Table diff_table(store::Database& a, store::Database& b, const std::string& phase = "decode",
                 double threshold_pct = 5.0);

}  // namespace profinfer
