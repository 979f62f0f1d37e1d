#pragma once
// record --max-db-mb: a recording that may run for days (an attach to a server) keeps its
// trace under a size by dropping its oldest llama_decode calls whole.
//
// Checked after each drain of the ring buffer, and within a drain after every kCheckEvery
// of the bound in records. The database's pages in use are kept between
// kLow and kHigh of the bound: above kHigh the oldest calls go, as many as bring it to kLow
// at the recording's average bytes per call. Freed pages are reused before the file grows,
// so the file stays near kHigh; the indexes readers need are built when the recording ends
// (indexes.sql: about a quarter of the operator rows' size), which kHigh leaves room for.
// The write-ahead log is checkpointed and truncated whenever it passes a twentieth of the bound,
// and after each step of a prune. Measured (tests: a 4 MB bound, 1500 op-level calls of the
// tiny model): the database file stays at its high-water mark, the log adds a few percent.
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "profinfer/trace_tables.h"

namespace profinfer {

class DbBound {
public:
    static constexpr double kHigh = 0.6, kLow = 0.45, kLog = 0.05;
    // The recorder checks again after records of this fraction of the bound (ring-buffer
    // bytes: a record's row takes less than its record).
    static constexpr double kCheckEvery = 0.05;
    static constexpr double kStep = 0.03;

    DbBound(store::TraceTables& tables, int64_t max_bytes) : tables_(tables), max_(max_bytes) {}

    // KEEP_DEFS: the node details the writer still points new graphs at; COMMIT: ends the
    // writer's transaction (its pending rows in) before anything is deleted.
    template <class KeepDefs, class Commit>
    void settle(KeepDefs&& keep_defs, Commit&& commit) {
        if (max_ <= 0) return;
        const int64_t live = tables_.live_bytes();
        if (live <= int64_t(kHigh * double(max_))) {
            // The writer's open transaction is in memory until it commits, then all in the
            // log: what grew since the last checkpoint is what the log will hold.
            if (live - checkpointed_ > int64_t(kLog * double(max_)) || tables_.log_bytes() > int64_t(kLog * double(max_)))
                commit(), tables_.checkpoint(), checkpointed_ = live;
            return;
        }
        commit();
        // In steps of kStep of the bound, each committed and its log truncated: a delete
        // writes the pages it changes to the log, about twice what it frees.
        const std::vector<int64_t> keep = keep_defs();
        int64_t now = live;
        while (now > int64_t(kLow * double(max_))) {
            const int64_t calls = tables_.calls_recorded();
            const double step = std::min(kStep * double(max_), double(now) - kLow * double(max_));
            const auto n = std::max<int64_t>(1, int64_t(std::ceil(double(calls) * step / double(now))));
            const int64_t gone = tables_.drop_oldest_calls(std::min(n, calls - 1), keep);
            tables_.checkpoint();
            if (gone == 0) break;  // one call left: it stays
            dropped_ += gone;
            const int64_t before = now;
            now = tables_.live_bytes();
            if (now >= before) break;  // nothing freed (what is left is not calls): next time
        }
        ++prunes_;
        checkpointed_ = now;
    }
    int64_t calls_dropped() const { return dropped_; }
    int64_t prunes() const { return prunes_; }

private:
    store::TraceTables& tables_;
    int64_t max_;
    int64_t dropped_ = 0, prunes_ = 0;
    int64_t checkpointed_ = 0;  // pages in use at the last checkpoint
};

}  // namespace profinfer
