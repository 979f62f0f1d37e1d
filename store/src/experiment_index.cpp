#include "profinfer/experiment_index.h"

#include "profinfer/error.h"
#include "profinfer/store.h"

namespace profinfer::store {

namespace {
const char kIndexSchema[] =
#include "index.sql.inc"
    ;
const char kFarmSchema[] =
#include "farm.sql.inc"
    ;

void exec_or_throw(sqlite3* db, const char* sql, const std::filesystem::path& path) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "?";
        sqlite3_free(err);
        throw Error(path.string() + ": " + msg);
    }
}

// PATH opened with FLAGS and, when SCHEMA is given, that schema applied; closed again on any
// error, which names what the file was meant to be.
sqlite3* open_index(const std::filesystem::path& path, int flags, const char* schema, const char* what) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
        std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
        sqlite3_close(db);
        throw Error(std::string("cannot open ") + what + " " + path.string() + ": " + msg);
    }
    sqlite3_busy_timeout(db, 2000);
    if (schema) {
        try {
            exec_or_throw(db, schema, path);
        } catch (...) {
            sqlite3_close(db);
            throw;
        }
    }
    return db;
}
}

ExperimentIndex::ExperimentIndex(const std::filesystem::path& path, Mode mode) : path_(path) {
    if (mode == Mode::Read && !std::filesystem::exists(path))
        throw Error("no experiment index at " + path.string() + ": run the experiment first");
    db_ = mode == Mode::Read ? open_index(path, SQLITE_OPEN_READONLY, nullptr, "experiment index")
                             : open_index(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                                          kIndexSchema, "experiment index");
    if (mode == Mode::Read) {
        // SQLite opens anything; the first query finds out. Asked here, so the error names the file.
        char* err = nullptr;
        if (sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, &err) != SQLITE_OK) {
            std::string msg = err ? err : "?";
            sqlite3_free(err);
            sqlite3_close(db_);
            db_ = nullptr;
            throw Error(path.string() + " is not a readable experiment index: " + msg);
        }
    }
}

ExperimentIndex::~ExperimentIndex() { sqlite3_close(db_); }

void ExperimentIndex::put_trace_metrics(const std::string& id, int round, int calls_dropped, const std::string& metrics) {
    Statement(db_, "INSERT OR REPLACE INTO run_metrics(id, round, calls_dropped, metrics) VALUES (?, ?, ?, ?)")
        .bind(1, id)
        .bind(2, int64_t(round))
        .bind(3, int64_t(calls_dropped))
        .bind(4, metrics)
        .run();
}

std::optional<std::string> ExperimentIndex::trace_metrics(const std::string& id, int round, int calls_dropped) {
    {
        Statement kept(db_, "SELECT count(*) FROM sqlite_master WHERE name = 'run_metrics'");
        if (!kept.step() || kept.column_int(0) == 0) return std::nullopt;
    }
    Statement st(db_, "SELECT metrics FROM run_metrics WHERE id = ? AND round = ? AND calls_dropped = ?");
    st.bind(1, id).bind(2, int64_t(round)).bind(3, int64_t(calls_dropped));
    if (!st.step()) return std::nullopt;
    return st.column_text(0);
}

void ExperimentIndex::set_fact(const std::string& key, const std::string& value) {
    Statement(db_, "INSERT OR REPLACE INTO experiment(key, value) VALUES (?, ?)").bind(1, key).bind(2, value).run();
}

std::map<std::string, std::string> ExperimentIndex::facts() {
    std::map<std::string, std::string> out;
    Statement st(db_, "SELECT key, value FROM experiment");
    while (st.step()) out[st.column_text(0)] = st.column_text(1);
    return out;
}

std::string ExperimentIndex::status(const std::string& id, int round) {
    Statement st(db_, "SELECT status FROM runs WHERE id = ? AND round = ?");
    st.bind(1, id).bind(2, int64_t(round));
    return st.step() ? st.column_text(0) : "";
}

void ExperimentIndex::put(const IndexRun& r) {
    Statement st(db_,
                 "INSERT OR REPLACE INTO runs(id, round, key, params, status, db, command, reason, started_at, ended_at, "
                 "seconds, bench, cpu_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
    st.bind(1, r.id).bind(2, int64_t(r.round)).bind(3, r.key).bind(4, r.params).bind(5, r.status).bind(6, r.db);
    st.bind(7, r.command).bind(8, r.reason).bind(9, r.started_at).bind(10, r.ended_at).bind(11, r.ended_at - r.started_at);
    st.bind(12, r.bench);
    r.cpu_s ? void(st.bind(13, *r.cpu_s)) : void(st.bind_null(13));
    st.run();
}

void ExperimentIndex::set_cpu(const std::string& id, int round, double cpu_s) {
    Statement(db_, "UPDATE runs SET cpu_s = ? WHERE id = ? AND round = ?").bind(1, cpu_s).bind(2, id).bind(3, int64_t(round)).run();
}

double ExperimentIndex::mean_seconds() {
    Statement st(db_, "SELECT coalesce(avg(seconds), 0) FROM runs WHERE status = 'done'");
    return st.step() ? st.column_double(0) : 0;
}

std::vector<IndexRun> ExperimentIndex::runs(const char* where) {
    if (!Statement(db_, "SELECT 1 FROM sqlite_master WHERE name = 'runs'").step())
        throw Error(path_.string() + " is an index from before interleaved rounds: run the experiment again");
    std::vector<IndexRun> out;
    const std::string sql = std::string("SELECT id, round, key, params, status, db, command, reason, started_at, ended_at, "
                                        "seconds, bench, cpu_s FROM runs ") + where + " ORDER BY round, id";
    Statement st(db_, sql.c_str());
    while (st.step()) {
        IndexRun r;
        r.id = st.column_text(0);
        r.round = int(st.column_int(1));
        r.key = st.column_text(2);
        r.params = st.column_text(3);
        r.status = st.column_text(4);
        r.db = st.column_text(5);
        r.command = st.column_text(6);
        r.reason = st.column_text(7);
        r.started_at = st.column_double(8);
        r.ended_at = st.column_double(9);
        r.seconds = st.column_double(10);
        r.bench = st.column_text(11);
        if (!st.column_is_null(12)) r.cpu_s = st.column_double(12);
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<IndexRun> ExperimentIndex::done_runs() {
    std::vector<IndexRun> out = runs("WHERE status = 'done'");
    // A study folder copied or moved keeps its traces beside its index: that one is read.
    for (IndexRun& r : out) {
        if (r.db.empty()) continue;
        const std::filesystem::path beside = path_.parent_path() / "points" / std::filesystem::path(r.db).filename();
        if (std::filesystem::exists(beside)) r.db = beside.string();
    }
    return out;
}
std::vector<IndexRun> ExperimentIndex::all_runs() { return runs(""); }

std::optional<std::string> ExperimentIndex::first_bench_output() {
    if (!Statement(db_, "SELECT 1 FROM sqlite_master WHERE name = 'runs'").step()) return std::nullopt;
    Statement st(db_, "SELECT bench FROM runs WHERE status = 'done' AND bench != '' ORDER BY round, id LIMIT 1");
    if (st.step()) return st.column_text(0);
    return std::nullopt;
}

FarmIndex::FarmIndex(const std::filesystem::path& path) : path_(path) {
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) std::filesystem::remove(path.string() + suffix);
    db_ = open_index(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, kFarmSchema, "farm index");
}

FarmIndex::~FarmIndex() { sqlite3_close(db_); }

void FarmIndex::add(const std::string& board, const std::string& study, ExperimentIndex& index) {
    exec_or_throw(db_, "BEGIN", path_);
    for (const auto& [k, v] : index.facts())
        Statement(db_, "INSERT INTO experiment(board, study, key, value) VALUES (?, ?, ?, ?)")
            .bind(1, board).bind(2, study).bind(3, k).bind(4, v).run();
    Statement st(db_,
                 "INSERT INTO runs(board, study, id, round, key, params, status, db, command, reason, started_at, ended_at, "
                 "seconds, bench, cpu_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const auto& r : index.all_runs()) {
        st.bind(1, board).bind(2, study).bind(3, r.id).bind(4, int64_t(r.round)).bind(5, r.key).bind(6, r.params);
        st.bind(7, r.status).bind(8, r.db).bind(9, r.command).bind(10, r.reason).bind(11, r.started_at);
        st.bind(12, r.ended_at).bind(13, r.seconds).bind(14, r.bench);
        r.cpu_s ? void(st.bind(15, *r.cpu_s)) : void(st.bind_null(15));
        st.run();
    }
    exec_or_throw(db_, "COMMIT", path_);
}

int64_t FarmIndex::runs() {
    Statement st(db_, "SELECT count(*) FROM runs");
    return st.step() ? st.column_int(0) : 0;
}

int64_t FarmIndex::boards() {
    Statement st(db_, "SELECT count(DISTINCT board) FROM runs");
    return st.step() ? st.column_int(0) : 0;
}

}  // namespace profinfer::store
