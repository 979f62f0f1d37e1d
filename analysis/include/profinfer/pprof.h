#pragma once
// A recording's operator time as a pprof profile (github.com/google/pprof, profile.proto
// from Debian's golang-github-google-pprof-dev), for `go tool pprof` and the tools that
// read it. One sample per (request, layer, block, operator): its value is operator time in
// nanoseconds (view block_times; a call serving several requests gives each its share by
// token count, as view request_calls does), its stack from the root:
//   request N (sequence S)   — only for calls whose batches carried sequence ids
//   layer L | outside the layers
//   attention | ffn | moe | rest
//   <block>: <OP> <node base name>   e.g. "ffn: MUL_MAT ffn_up"
// so `go tool pprof -top` ranks operators of each block, `-top -cum` the blocks, layers
// and requests, and each sample carries labels block, layer, request for `-tagfocus`.
#include <cstdint>
#include <ostream>

#include "profinfer/store.h"

namespace profinfer {

struct PprofSummary {
    int64_t samples = 0;     // distinct stacks written
    int64_t total_ns = 0;    // the sum of their values
    int64_t requests = 0;    // request frames (0 without sequence ids)
    bool sampled = false;    // --level op-sampled: CPU time estimated from samples, not operator time
};

// Writes DB's operator time as an uncompressed serialized Profile to OUT (pprof reads it
// raw or gzip-compressed).
PprofSummary write_pprof(store::Database& db, std::ostream& out);

}  // namespace profinfer
