#include "profinfer/store.h"

#include <mntent.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include <fstream>
#include <set>
#include <thread>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/knobs.h"
#include "profinfer/number_text.h"
#include "profinfer/trace_tables.h"

namespace profinfer::store {

namespace {
const char kSchema[] =
#include "schema.sql.inc"
    ;
const char kIndexes[] =
#include "indexes.sql.inc"
    ;
const char kDerivedNodes[] =
#include "derived_nodes.sql.inc"
    ;
const char kDerivedViews[] =
#include "derived.sql.inc"
    ;
const char kNodeSpans[] =
#include "node_spans.sql.inc"
    ;
}

void build_indexes(sqlite3* db) noexcept {
    sqlite3_exec(db, kIndexes, nullptr, nullptr, nullptr);
    // node_spans (node_spans.sql) kept: one transaction, so a recorder killed while it runs
    // leaves no table (readers then compute it) rather than part of one. Once. (main.: a
    // reading connection has a TEMP view of that name.) On the 11.35 M op rows of a
    // ~9-minute full-level trace: 19 s, 255 MB (the file 1.15 → 1.41 GB).
    const std::string spans =
        "BEGIN; CREATE TABLE IF NOT EXISTS main.node_spans (graph_seq INTEGER NOT NULL, tensor INTEGER NOT NULL, "
        "first_start INTEGER NOT NULL, last_compute_end INTEGER NOT NULL, nth INTEGER NOT NULL, parts INTEGER NOT NULL, "
        "next_start INTEGER, PRIMARY KEY (graph_seq, tensor)) WITHOUT ROWID; "
        "INSERT INTO main.node_spans SELECT * FROM (" + std::string(kNodeSpans) + ") WHERE NOT EXISTS (SELECT 1 FROM main.node_spans); "
        "COMMIT;";
    if (sqlite3_exec(db, spans.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
        sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
}

std::string counter_columns(const std::string& prefix) {
    std::string cols;
    for (int c = 0; c < kCounterSlots; ++c) cols += (c ? ", " : "") + prefix + "c" + std::to_string(c);
    return cols;
}

const char* to_string(RunStatus s) {
    switch (s) {
        case RunStatus::Running: return "running";
        case RunStatus::Complete: return "complete";
        case RunStatus::Incomplete: return "incomplete";
        case RunStatus::Failed: return "failed";
    }
    return "?";
}

uint64_t process_start_time(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) return 0;
    auto close = line.rfind(')');  // comm may hold spaces and parentheses
    if (close == std::string::npos) return 0;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; ++i)
        if (i == 22) return std::stoull(field);
    return 0;
}

RunHealth run_health(Database& db) {
    RunHealth h;
    const auto meta = db.meta();
    using K = MetaKey;
    if (meta.has(K::EventsVersion) && meta.integer(K::EventsVersion) > kEventsVersion)
        throw Error(db.path().string() + " was recorded with event format " + meta[K::EventsVersion] +
                    "; this profinfer reads up to " + std::to_string(kEventsVersion) + ": use a newer profinfer");
    h.status = meta[K::Status];
    h.reason = meta[K::Error];
    if (h.status == to_string(RunStatus::Running)) {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        const bool here = meta[K::Host] == host;
        const std::string pid = meta[K::RecorderPid], start = meta[K::RecorderStart];
        if (here && !pid.empty() && std::to_string(process_start_time(int(meta.integer(K::RecorderPid)))) != start) {
            h.status = to_string(RunStatus::Incomplete);
            h.reason = "the recorder (pid " + pid + ") ended without finishing the database";
        }
    }
    if (meta.has(K::CallsDropped)) h.calls_dropped = meta.integer(K::CallsDropped);
    Statement st(db.handle(), "SELECT kind, count FROM lost_events WHERE count > 0");
    while (st.step()) {
        h.losses[st.column_text(0)] = st.column_int(1);
        if (is_record_kind(st.column_text(0))) h.lost_records += st.column_int(1);
    }
    return h;
}

std::string health_warning(const std::filesystem::path& path, const RunHealth& h) {
    std::string w;
    if (h.status != to_string(RunStatus::Complete))
        w = "the run is " + h.status + (h.reason.empty() ? "" : " (" + h.reason + ")");
    std::string lost;
    for (const auto& [k, n] : h.losses) lost += (lost.empty() ? "" : ", ") + std::to_string(n) + " " + k;
    if (!lost.empty()) w += (w.empty() ? "" : "; ") + std::string("lost or cut: ") + lost;
    // Dropped by choice, not lost: said all the same, a reader's sums miss them.
    if (h.calls_dropped > 0)
        w += (w.empty() ? "" : "; ") + std::string("the oldest ") + std::to_string(h.calls_dropped) +
             " llama_decode calls were dropped to keep --max-db-mb";
    if (w.empty()) return w;
    return "profinfer: warning: " + path.string() + ": " + w + " — results cover only what was recorded";
}

Statement::Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
        throw Error(std::string("SQL error: ") + sqlite3_errmsg(db) + " in: " + sql);
}
Statement::~Statement() { sqlite3_finalize(st_); }
Statement& Statement::bind(int i, int64_t v) { return sqlite3_bind_int64(st_, i, v), *this; }
Statement& Statement::bind(int i, double v) { return sqlite3_bind_double(st_, i, v), *this; }
Statement& Statement::bind(int i, const std::string& v) {
    return sqlite3_bind_text(st_, i, v.c_str(), int(v.size()), SQLITE_TRANSIENT), *this;
}
Statement& Statement::bind_null(int i) { return sqlite3_bind_null(st_, i), *this; }
bool Statement::step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(std::string("SQL error: ") + sqlite3_errmsg(db_));
}
void Statement::run() {
    while (step()) {
    }
    reset();
}
void Statement::reset() { sqlite3_reset(st_), sqlite3_clear_bindings(st_); }
int64_t Statement::column_int(int i) const { return sqlite3_column_int64(st_, i); }
double Statement::column_double(int i) const { return sqlite3_column_double(st_, i); }
std::string Statement::column_text(int i) const {
    auto p = sqlite3_column_text(st_, i);
    return p ? reinterpret_cast<const char*>(p) : "";
}
bool Statement::column_is_null(int i) const { return sqlite3_column_type(st_, i) == SQLITE_NULL; }
int Statement::column_count() const { return sqlite3_column_count(st_); }

namespace {

// PROFINFER_SQL_PROFILE=MS: each statement that ran MS ms or more, with its time, on stderr.
void profile_statements(sqlite3* db) {
    static const int64_t threshold_ns = [] {
        const auto v = knob(Knob::SqlProfile);
        return v ? int64_t(std::atof(v->c_str()) * 1e6) : -1;
    }();
    if (threshold_ns < 0) return;
    sqlite3_trace_v2(
        db, SQLITE_TRACE_PROFILE,
        [](unsigned, void* ctx, void* p, void* x) -> int {
            const int64_t ns = *static_cast<sqlite3_int64*>(x);
            if (ns < *static_cast<const int64_t*>(ctx)) return 0;
            char* sql = sqlite3_expanded_sql(static_cast<sqlite3_stmt*>(p));
            std::string text = sql ? sql : "?";
            sqlite3_free(sql);
            for (char& c : text)
                if (c == '\n') c = ' ';
            if (text.size() > 300) text = text.substr(0, 300) + " ...";
            std::fprintf(stderr, "profinfer[sql]: %9.1f ms  %s\n", double(ns) / 1e6, text.c_str());
            return 0;
        },
        const_cast<int64_t*>(&threshold_ns));
}

}  // namespace

Database::Database(const std::filesystem::path& path, Mode mode) : path_(path) {
    if (mode != Mode::Create && !std::filesystem::exists(path)) throw Error("no such trace database: " + path.string());
    // A connection is used by one thread at a time: no per-call mutex (measured in the
    // recorder's writer: 6.5 % of its CPU went to pthread_mutex_lock/unlock).
    writer_ = mode == Mode::Create;
    int flags = SQLITE_OPEN_NOMUTEX | (mode == Mode::ReadOnly ? SQLITE_OPEN_READONLY
                                       : mode == Mode::Annotate ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW)
                                                                : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW));
    auto open = [&](const std::string& name, int extra) {
        if (sqlite3_open_v2(name.c_str(), &db_, flags | extra, nullptr) != SQLITE_OK) {
            std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
            sqlite3_close(db_);
            db_ = nullptr;
            throw Error("cannot open trace database " + path.string() + ": " + msg);
        }
        sqlite3_busy_timeout(db_, 2000);
        profile_statements(db_);
        try {
            initialise(mode);
        } catch (...) {
            sqlite3_close(db_);  // a constructor that throws runs no destructor
            db_ = nullptr;
            throw;
        }
    };
    try {
        open(path.string(), 0);
    } catch (const Error&) {
        // A trace left in write-ahead-log mode (its recorder died) on a read-only medium:
        // SQLite cannot make the -shm file it wants beside it. Nobody writes there, so it
        // is read as immutable.
        const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
        if (mode != Mode::ReadOnly || access(dir.c_str(), W_OK) == 0) throw;
        std::string uri = "file:";
        for (unsigned char c : std::filesystem::absolute(path).string()) {
            if (std::isalnum(c) || std::strchr("/._-~", c)) {
                uri += char(c);
            } else {
                char hex[4];
                std::snprintf(hex, sizeof hex, "%%%02X", c);
                uri += hex;
            }
        }
        open(uri + "?immutable=1", SQLITE_OPEN_URI);
    }
}

// A file system where SQLite's write-ahead log cannot work: the log's index is a file mapped
// shared by every connection (-shm), which network and virtual file systems do not keep
// coherent — SQLite's documentation says so for network file systems, and on 9p (a
// virtual board's shared checkout) the first write fails with "disk I/O error". Judged by the
// mount's type in /proc/self/mounts: 9p passes the host's statfs type through (ext4).
bool wal_unsafe_filesystem(const std::filesystem::path& db) {
    std::error_code ec;
    const auto dir = std::filesystem::weakly_canonical(std::filesystem::absolute(db, ec).parent_path(), ec).string();
    FILE* mounts = setmntent("/proc/self/mounts", "r");
    if (!mounts) return false;
    std::string type;
    size_t best = 0;
    while (const mntent* m = getmntent(mounts)) {
        const std::string at = m->mnt_dir;
        const bool under = dir == at || at == "/" ||
                           (dir.size() > at.size() && dir.compare(0, at.size(), at) == 0 && dir[at.size()] == '/');
        if (under && at.size() >= best) best = at.size(), type = m->mnt_type;
    }
    endmntent(mounts);
    static const std::set<std::string> unsafe = {"9p", "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "afs", "fuse.sshfs"};
    return unsafe.count(type) || type.rfind("fuse.", 0) == 0;
}

void Database::initialise(Mode mode) {
    const std::filesystem::path& path = path_;
    if (mode == Mode::Create) {
        if (scalar("SELECT count(*) FROM sqlite_master") != 0)
            throw Error(path.string() + " already holds a database; choose another -o or remove it");
        // Where the write-ahead log cannot work, the rollback journal (kept, truncated: one
        // file fewer to create per commit): slower commits, readers still welcome between them.
        exec(wal_unsafe_filesystem(path) ? "PRAGMA journal_mode = TRUNCATE" : "PRAGMA journal_mode = WAL");
        exec("PRAGMA synchronous = NORMAL");
        // Checkpoint the write-ahead log every 64 MiB (16384 pages) instead of 4: fewer
        // copies of the hot index pages while recording (trace_writer_bench, 580-node decode
        // steps: 805 k → 874–890 k records/s); the last checkpoint runs when the store closes.
        exec("PRAGMA wal_autocheckpoint = 16384");
        exec("BEGIN");
        exec(kSchema);
        if (scalar("SELECT count(*) FROM pragma_table_info('ops') WHERE name GLOB 'c[0-9]*'") != kCounterSlots)
            throw Error("schema.sql and kCounterSlots disagree on the number of counter columns");
        exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
        exec("COMMIT");
    } else {
        int64_t v = scalar("PRAGMA user_version");
        if (v < kOldestReadableSchema || v > kSchemaVersion)
            throw Error(path.string() + " has trace schema version " + std::to_string(v) + "; this profinfer reads versions " +
                        std::to_string(kOldestReadableSchema) + " to " + std::to_string(kSchemaVersion) +
                        (v == 0 ? " (is it a profinfer trace?)" : ""));
        if (v < 4)  // before sampled waits: none recorded
            exec("CREATE TEMP TABLE op_samples (op_id INTEGER PRIMARY KEY, samples INTEGER NOT NULL, "
                 "wait_samples INTEGER NOT NULL, barrier_state_samples INTEGER NOT NULL)");
        if (v < 5)  // before --budget: every call's operators recorded
            exec("CREATE TEMP TABLE ops_untraced (token_id INTEGER PRIMARY KEY)");
        if (v < kBatchSeqsSchema)  // before the batches' sequences: none recorded
            exec("CREATE TEMP TABLE batch_seqs (token_id INTEGER NOT NULL, seq INTEGER NOT NULL, pos INTEGER NOT NULL, "
                 "n_tokens INTEGER NOT NULL, outputs INTEGER NOT NULL)");
        if (v < 6)  // before the Vulkan probes: none recorded
            exec("CREATE TEMP TABLE gpu_events (id INTEGER PRIMARY KEY, graph_seq INTEGER NOT NULL, tid INTEGER NOT NULL, "
                 "kind TEXT NOT NULL, tensor INTEGER, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, ret INTEGER)");
        if (v < 9)  // before --level op-sampled: none recorded
            exec("CREATE TEMP TABLE cpu_samples (ts_ns INTEGER NOT NULL, tid INTEGER NOT NULL, cpu INTEGER NOT NULL, "
                 "graph_seq INTEGER NOT NULL, ip INTEGER NOT NULL, caller_ip INTEGER); CREATE TEMP TABLE code_ranges (lo INTEGER PRIMARY "
                 "KEY, hi INTEGER NOT NULL, library TEXT NOT NULL, function TEXT NOT NULL)");
        if (v == 9)  // samples before their callers: none recorded
            exec("CREATE TEMP VIEW cpu_samples AS SELECT ts_ns, tid, cpu, graph_seq, ip, NULL AS caller_ip FROM "
                 "main.cpu_samples");
        if (v >= kNodeDefsSchema)
            exec(kDerivedNodes);
        else  // nodes as rows: each its own label (derived_nodes.sql)
            exec("CREATE TEMP VIEW node_labels AS SELECT id AS key, op, name, type, ne0, ne1, ne2, ne3 FROM main.nodes; "
                 "CREATE TEMP VIEW node_keys AS SELECT id, graph_seq, tensor, id AS key FROM main.nodes");
        if (!scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'node_spans'"))
            exec("CREATE TEMP VIEW node_spans AS " + std::string(kNodeSpans));  // not kept by the recording
        exec(kDerivedViews);  // a snapshot of the calls so far: readers are one-shot
    }
}

void Database::drop_first_calls(int64_t n) {
    const std::string k = std::to_string(n);
    exec("CREATE TEMP TABLE IF NOT EXISTS dropped_calls (call INTEGER PRIMARY KEY); DELETE FROM temp.dropped_calls; "
         "INSERT INTO temp.dropped_calls SELECT call FROM (SELECT call, row_number() OVER (PARTITION BY phase ORDER BY "
         "call) AS k, count(*) OVER (PARTITION BY phase) AS n FROM temp.calls) WHERE k <= " + k + " AND k < n");
    drop_calls("call IN (SELECT call FROM temp.dropped_calls)");
}

void Database::keep_calls_between(int64_t first, int64_t last) {
    drop_calls("call NOT BETWEEN " + std::to_string(first) + " AND " + std::to_string(last));
}

void Database::drop_calls(const std::string& which) {
    exec("DELETE FROM temp.call_graphs WHERE " + which + "; DELETE FROM temp.calls WHERE " + which);
    if (node_times_kept_) exec("DELETE FROM temp.node_times_kept WHERE " + which);
}

void Database::keep_node_times() {
    if (node_times_kept_) return;
    exec("CREATE TEMP TABLE node_times_kept AS SELECT * FROM node_times; "
         "CREATE INDEX temp.node_times_kept_call ON node_times_kept(call); "
         "CREATE INDEX temp.node_times_kept_node ON node_times_kept(graph_seq, tensor); "
         "DROP VIEW temp.node_times; "
         "CREATE TEMP VIEW node_times AS SELECT * FROM temp.node_times_kept");
    node_times_kept_ = true;
}

Database::~Database() {
    if (writer_) finish();
    sqlite3_close(db_);
}

std::string Database::finish(std::chrono::milliseconds patience) {
    if (!writer_ || finished_) return "";
    finished_ = true;
    // A finished trace is one self-contained file: copied, moved or sent on its own it holds
    // every row, and readers leave no -wal or -shm beside it and can read it where they
    // cannot write. SQLite leaves the write-ahead log only when no other connection has the
    // file open: a reader polling it (profinfer info every 0.2 s) made the switch fail with
    // SQLITE_BUSY at the end of 5 recordings in 5, leaving a 4 KiB file and every row in -wal.
    // Readers come and go: retried until one gap between them.
    // The log goes first: the indexes are then written into the file's free pages (a
    // --max-db-mb trace's are most of what it freed), which a rollback journal does not copy,
    // rather than into a write-ahead log beside a file already at its largest.
    int rc = SQLITE_OK;
    auto journal_mode = [&](const char* sql) {
        std::string mode;
        rc = sqlite3_exec(
            db_, sql,
            [](void* out, int, char** values, char**) {
                if (values[0]) *static_cast<std::string*>(out) = values[0];
                return 0;
            },
            &mode, nullptr);
        return mode;
    };
    const auto deadline = std::chrono::steady_clock::now() + patience;
    sqlite3_busy_timeout(db_, 50);
    std::string mode = journal_mode("PRAGMA journal_mode = DELETE");
    // Only another connection is worth waiting for (a full disk is not).
    while (mode != "delete" && ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        mode = journal_mode("PRAGMA journal_mode = DELETE");
    }
    if (mode != "delete") {
        // Still in the log: at least every row copied into the file, so that the file read
        // alone (once no reader is left) has them; the log then only repeats them.
        sqlite3_busy_timeout(db_, 2000);
        sqlite3_exec(db_, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
    }
    build_indexes(db_);
    sqlite3_busy_timeout(db_, 2000);
    if (mode == "delete") return "";
    const std::string now = journal_mode("PRAGMA journal_mode");
    if (now != "wal") return "";
    return path_.string() + " stays in write-ahead-log mode (" +
           ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED
                ? "another process held it open for " + std::to_string(patience.count() / 1000) +
                      " s after the recording ended"
                : std::string(sqlite3_errstr(rc))) +
           "); copy or move " + path_.filename().string() + "-wal with it (it may hold the last rows)";
}

void Database::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw Error("SQL error on " + path_.string() + ": " + msg);
    }
}

int64_t Database::scalar(const std::string& sql) {
    Statement st(db_, sql.c_str());
    return st.step() ? st.column_int(0) : 0;
}

std::optional<HogWindow> hog_window(const Meta& meta) {
    if (!meta.has(MetaKey::HogStartNs) || !meta.has(MetaKey::HogStopNs)) return std::nullopt;
    return HogWindow{meta.integer(MetaKey::HogStartNs), meta.integer(MetaKey::HogStopNs)};
}

void note_hog_window(const std::filesystem::path& trace, const HogWindow& w) {
    Database db(trace, Database::Mode::Annotate);
    db.set_meta(MetaKey::HogStartNs, std::to_string(w.start_ns));
    db.set_meta(MetaKey::HogStopNs, std::to_string(w.stop_ns));
}

void note_predicted_slowdown(const std::filesystem::path& trace, double pct) {
    Database db(trace, Database::Mode::Annotate);
    std::ostringstream v;
    v.precision(17);
    v << pct;
    db.set_meta(MetaKey::PredictedSlowdownPct, v.str());
}

void Database::set_meta(MetaKey key, const std::string& value) {
    Statement st(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    st.bind(1, std::string(name(key))).bind(2, value).run();
}

Meta Database::meta() {
    std::map<std::string, std::string> m;
    Statement st(db_, "SELECT key, value FROM meta");
    while (st.step()) m[st.column_text(0)] = st.column_text(1);
    return Meta(path_, std::move(m));
}

std::vector<std::string> Database::counter_names() {
    std::vector<std::string> names(kCounterSlots);
    // Opened but read 0 on every operator (meta counters_read_zero): not a measurement.
    std::set<std::string> zero;
    {
        std::istringstream list(meta()[MetaKey::CountersReadZero]);
        for (std::string n; std::getline(list, n, ',');) zero.insert(n);
    }
    Statement st(db_, "SELECT idx, name FROM counters WHERE available = 1 AND idx >= 0");
    while (st.step())
        if (st.column_int(0) < kCounterSlots && !zero.count(st.column_text(1))) names[st.column_int(0)] = st.column_text(1);
    return names;
}

}  // namespace profinfer::store
