#pragma once
// The experiment index: index.db of a study's results folder (schema in store/src/index.sql,
// compiled in). The one way it is opened, written and read.
#include <sqlite3.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace profinfer::store {

// One (point, round) of the sweep.
struct IndexRun {
    std::string id;
    int round = 0;
    std::string key, params, status, db, command, reason;
    double started_at = 0, ended_at = 0;
    double seconds = 0;  // ended_at - started_at, as stored
    std::string bench;
    std::optional<double> cpu_s;
};

class ExperimentIndex {
public:
    // Write: created if absent (the runner). Read: an error naming the file when it is
    // absent. Reading the runs of an index from before interleaved rounds (no runs table)
    // is an error saying so.
    enum class Mode { Read, Write };
    ExperimentIndex(const std::filesystem::path& path, Mode mode);
    ~ExperimentIndex();
    ExperimentIndex(const ExperimentIndex&) = delete;
    ExperimentIndex& operator=(const ExperimentIndex&) = delete;

    const std::filesystem::path& path() const { return path_; }

    // The study's facts (name, title, paper, level, board, quick, rounds).
    void set_fact(const std::string& key, const std::string& value);
    std::map<std::string, std::string> facts();

    // "" when the (point, round) has no row.
    std::string status(const std::string& id, int round);
    // Inserts or replaces the row of (r.id, r.round); seconds = ended_at - started_at.
    void put(const IndexRun& r);
    void set_cpu(const std::string& id, int round, double cpu_s);
    // Mean seconds of the runs done so far (for an ETA); 0 when none.
    double mean_seconds();
    // The runs done, by round then id. A run's trace DB is named by the path it was written
    // to; where the study's folder holds a file of that name in points/ beside this index
    // (the folder copied or moved elsewhere), db names that file instead.
    std::vector<IndexRun> done_runs();
    // Every row, as stored (the farm merge).
    std::vector<IndexRun> all_runs();
    // The metrics a run's trace gave with its first CALLS_DROPPED calls left out (JSON text),
    // kept so that the study is summarised where its traces are not; nullopt when none are
    // kept (an index from before they were).
    void put_trace_metrics(const std::string& id, int round, int calls_dropped, const std::string& metrics);
    std::optional<std::string> trace_metrics(const std::string& id, int round, int calls_dropped);
    // llama-bench's output of the first run done that has one (its build_commit names the
    // llama.cpp the sweep ran).
    std::optional<std::string> first_bench_output();

private:
    std::vector<IndexRun> runs(const char* where);
    std::filesystem::path path_;
    sqlite3* db_ = nullptr;
};

// FARM/farm.db (store/src/farm.sql): the experiment indexes of a farm's boards in one
// database, made new by each merge.
class FarmIndex {
public:
    explicit FarmIndex(const std::filesystem::path& path);  // replaces an older farm.db
    ~FarmIndex();
    FarmIndex(const FarmIndex&) = delete;
    FarmIndex& operator=(const FarmIndex&) = delete;
    // Every fact and run of INDEX, as BOARD's STUDY.
    void add(const std::string& board, const std::string& study, ExperimentIndex& index);
    int64_t runs();
    int64_t boards();

private:
    std::filesystem::path path_;
    sqlite3* db_ = nullptr;
};

}  // namespace profinfer::store
