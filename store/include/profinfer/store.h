#pragma once
// The trace store: one SQLite database per run. The schema is declared once, in
// store/src/schema.sql (compiled in), versioned by PRAGMA user_version and documented
// in docs/trace-store.md; every derived quantity (calls, node times, base names,
// layers, attention) once, in store/src/derived.sql, as TEMP views on every reading
// connection. The tracer writes through TraceTables (trace_tables.h), meta keys through
// their registry (meta_keys.h); readers open a Database.
#include <sqlite3.h>

#include <cstdint>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "profinfer/meta_keys.h"

namespace profinfer::store {

constexpr int kSchemaVersion = 10;
// From version 10 a sample outside the named code carries its caller (cpu_samples.caller_ip).
constexpr int kSampleCallerSchema = 10;
// From version 8 the sequences each batch served (batch_seqs).
constexpr int kBatchSeqsSchema = 8;
// From version 7 a node's details are stored once per change (node_defs, node_def_srcs)
// and each graph's nodes as narrow rows pointing at them (graph_nodes); readers see the
// schema-6 tables nodes and node_srcs as views (derived_nodes.sql).
constexpr int kNodeDefsSchema = 7;
// Version 2 differs only by two derived columns (tokens.phase, experts.layer) that
// readers no longer use: it is read through the same derived views.
constexpr int kOldestReadableSchema = 2;
// Counter slots per operator record: columns c0 .. c5 of ops (events.h checks its own
// count against this).
constexpr int kCounterSlots = 6;
// "PREFIXc0, PREFIXc1, ...": the counter columns, for SQL that reads or writes them all.
std::string counter_columns(const std::string& prefix = "");
// The readers' indexes (store/src/indexes.sql), built when a recording ends — by the
// writer's Database as it closes, or for a recorder that died — not row by row.
void build_indexes(sqlite3* db) noexcept;
// The newest event record format (tracer/include/profinfer/events.h) whose data this
// schema holds; a trace from a newer recorder is refused rather than misread.
constexpr int kEventsVersion = 9;

// A statement bound positionally; step() returns true while rows come.
class Statement {
public:
    Statement(sqlite3* db, const char* sql);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int i, int64_t v);
    Statement& bind(int i, double v);
    Statement& bind(int i, const std::string& v);
    Statement& bind_null(int i);
    bool step();
    void run();  // step to completion, then reset for reuse
    void reset();
    int64_t column_int(int i) const;
    double column_double(int i) const;
    std::string column_text(int i) const;
    bool column_is_null(int i) const;
    int column_count() const;

private:
    sqlite3* db_;
    sqlite3_stmt* st_ = nullptr;
};

// True where DB's directory is on a file system whose shared memory SQLite's write-ahead
// log cannot rely on (9p, NFS, SMB, FUSE, ...): a new trace there uses the rollback journal.
bool wal_unsafe_filesystem(const std::filesystem::path& db);

class Database {
public:
    // Annotate: an existing trace opened to add meta keys after its recording (set_meta).
    enum class Mode { ReadOnly, Create, Annotate };
    Database(const std::filesystem::path& path, Mode mode);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    void exec(const std::string& sql);
    sqlite3* handle() const { return db_; }
    const std::filesystem::path& path() const { return path_; }
    int64_t scalar(const std::string& sql);  // first column of the first row, 0 if none
    Meta meta();
    // The counters that filled ops columns c0.. : name by slot, "" where unused or where the
    // counter read 0 on every operator (meta counters_read_zero: not a measurement).
    std::vector<std::string> counter_names();
    void set_meta(MetaKey key, const std::string& value);
    // A reader's view without the first N llama_decode calls of each phase (prefill, decode),
    // a phase keeping its last call however few it has (llama-bench's one measured prompt after
    // its warm-up prompt): those calls leave calls, call_graphs and every view joining them
    // (node_times, thread_parts, ...), the others keep their numbers — a run's warm-up calls
    // apart (their first page faults, first touches). For this connection only; the trace is
    // not changed.
    void drop_first_calls(int64_t n);

    // Only calls FIRST to LAST (their numbers in calls) stay, for this connection: the rest
    // leave calls, call_graphs and every view joining them (a timeline's window).
    void keep_calls_between(int64_t first, int64_t last);

    // node_times computed once into a TEMP table of this connection (indexed by call and by
    // graph and tensor), the view then reading it: for a reader that scans the whole view
    // several times (a report, a study's metrics of a trace), each scan otherwise computes
    // its windows again. Calls dropped later leave it too. A reader of a few graphs does
    // better without it (the view's window is pushed into their graph_seq).
    void keep_node_times();

    // View block_times (node_times' rows with each node's block_layer and block: attention,
    // ffn, moe or rest; store/src/node_blocks.cpp) made for this connection: computed per
    // call into a TEMP table on the first call, a join of node_times with it after. Readers
    // of block_times call it first (until then the view does not exist).
    void keep_block_times();

    // A trace made here (Create), written to its end: made one self-contained file — out of
    // the write-ahead log (retried while readers hold the file, up to PATIENCE), its indexes
    // built. Returns "" when the file alone holds every row, or one line saying what is still
    // beside it and what to do. Once; the destructor calls it when nobody did.
    std::string finish(std::chrono::milliseconds patience = std::chrono::seconds(60));

private:
    void initialise(Mode mode);  // schema (Create) or its version check (ReadOnly)
    std::filesystem::path path_;
    sqlite3* db_ = nullptr;
    bool writer_ = false;  // made by us (Create): left in rollback-journal mode when closed
    bool finished_ = false;
    bool node_times_kept_ = false;
    bool block_times_kept_ = false;
    // The calls WHICH (a condition on call) leave calls, call_graphs and node_times_kept.
    void drop_calls(const std::string& which);
};

// Run status written to meta.status: recording is in progress; it ended normally;
// it was cut short (target crash, signal) but what was recorded is consistent; or
// nothing useful was recorded because recording could not start.
enum class RunStatus { Running, Complete, Incomplete, Failed };
const char* to_string(RunStatus s);

// Start time of PID in clock ticks since boot (/proc/PID/stat field 22), 0 if gone:
// with the pid it names one process for good, whatever pids get reused.
uint64_t process_start_time(int pid);

// What a reader must know about a recording before trusting it: its status as it
// really is (a run still marked "running" whose recorder process is gone on this host
// is "incomplete"), and every kind of lost or cut data with its count.
struct RunHealth {
    std::string status;
    std::string reason;                      // why it is not complete, when known
    std::map<std::string, int64_t> losses;   // kind → count, non-zero only
    int64_t lost_records = 0;                // records lost to a full ring buffer
    int64_t calls_dropped = 0;               // the oldest calls dropped whole to keep --max-db-mb
};
RunHealth run_health(Database& db);
// lost_events' kind for operator records of the graph under way when recording stopped
// (an interrupted attach): cut at the end, not lost to a full ring buffer.
inline constexpr const char* kOpsCutAtEnd = "op_cut_at_end";
// Paper Fig. 8's interfering task, as the experiment runner notes it in the trace after the
// run (meta keys hog_start_ns / hog_stop_ns, the tracer's clock: CLOCK_MONOTONIC): when the
// CPU hog ran. Empty without a hog.
struct HogWindow {
    int64_t start_ns = 0, stop_ns = 0;
};
std::optional<HogWindow> hog_window(const Meta& meta);
void note_hog_window(const std::filesystem::path& trace, const HogWindow& w);
// The experiment runner's: what `profinfer estimate` predicted for the recording's level.
void note_predicted_slowdown(const std::filesystem::path& trace, double pct);
// One line for stderr when the run is not complete or lost anything, else empty.
std::string health_warning(const std::filesystem::path& path, const RunHealth& h);

}  // namespace profinfer::store
