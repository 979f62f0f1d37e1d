#pragma once
// profinfer watch's numbers (docs/watch.md): what one trace — a watch segment, closed or
// still recording — adds to the metrics a Prometheus server scrapes, and their exposition
// (text format 0.0.4). Counters and histograms only: each segment adds to the totals, so
// the watcher's values never go down while segments rotate and the oldest are deleted.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "profinfer/store.h"

namespace profinfer {

// A cumulative histogram with fixed upper bounds (seconds), as Prometheus keeps them.
struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bound (not cumulative); observations above the last go to +Inf only
    uint64_t count = 0;
    double sum = 0;
    explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size(), 0) {}
    void observe(double v);
    void add(const Histogram& o);
};

// Per request a trace holds (views requests, request_calls): its time to first token (none
// when the trace missed its start: begun_before) and each time per output token after its
// first — the interval between the calls computing its outputs over the later call's outputs.
// stat --by request and the watcher read them here.
struct RequestLatency {
    int64_t request = 0;
    std::optional<double> ttft_ms;
    std::vector<double> tpot_ms;
};
std::vector<RequestLatency> request_latencies(store::Database& db);

struct LiveMetrics {
    Histogram ttft_s{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram tpot_s{{0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1}};
    uint64_t prefill_tokens = 0, decode_tokens = 0, prefill_calls = 0, decode_calls = 0;
    double prefill_seconds = 0, decode_seconds = 0;  // time inside llama_decode calls of each phase
    std::map<std::string, uint64_t> graphs_by_backend;  // graphs computed per backend (splits)
    std::map<std::string, uint64_t> op_samples;         // --level op-sampled: CPU-clock samples per op type
    std::map<std::string, uint64_t> block_ns;           // --level op/full: operator time per block
    std::map<std::string, uint64_t> op_ns;              // --level op/full: operator time per op type
    uint64_t preemptions = 0;                           // --level full: inference threads switched out while runnable
    uint64_t lost_records = 0, calls_dropped = 0;
    double recorder_cpu_seconds = 0;
    uint64_t segments_closed = 0, segments_deleted = 0;
    void add(const LiveMetrics& o);
};

// What TRACE holds (read-only; a trace still being recorded reads as far as it got).
LiveMetrics live_metrics_of(const std::filesystem::path& trace);

// The Prometheus text exposition (format 0.0.4) of M, every name prefixed profinfer_.
std::string prometheus_exposition(const LiveMetrics& m);

}  // namespace profinfer
