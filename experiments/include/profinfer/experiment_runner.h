#pragma once
#include <cmath>
// Running a study: each sweep point a llama.cpp workload, recorded by `profinfer record` into
// its own trace DB (or run alone, or by a peer), in interleaved rounds, listed in the study's
// index DB (index.db: point parameters → DB, status, command, timings, the program's own
// output).
#include <sys/types.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "profinfer/experiment_spec.h"

namespace profinfer {

struct RunOptions {
    std::filesystem::path profinfer;  // this binary
    std::filesystem::path out_dir;    // results/<board>/<experiment>
    std::string board = "host";
    bool quick = false, dry_run = false;
    int rounds = 0;                   // interleaved rounds; 0: the spec's (rounds_for(quick))
    std::filesystem::path model;      // every point's model file; empty: the card's, synthesised in the cache
    // From the board's profile (boards/profiles): the CPUs the inference threads are pinned
    // to (taskset; empty: not pinned), the counters --level full records, and the backends
    // it can run (empty: any this machine has) with the profile's word on the others.
    std::vector<int> pin_cpus;
    std::string counters;
    std::vector<std::string> backends;
    std::string backend_notes;
    // The machine recording (MachineFacts::identity; empty: not checked) and its uprobe trap
    // (ns, probe-cost measure; NAN: not measured): a study's index keeps both, and a study
    // recorded on one machine is not resumed on another (its rounds would mix the two).
    std::string machine;
    double trap_ns = NAN;
};

// What a point needs that this machine (or its board's profile) does not have; empty when it can run. With
// INSTALL, the llama.cpp build of its backend is built or unpacked first if missing.
std::string missing_for(const SweepPoint& p, const RunOptions& opt, bool install);

// The eval-callback peer the studies run (experiments/peers/evalcb_peer.cpp), as built.
std::filesystem::path evalcb_peer();
// llama.cpp's decode MatMul kernel timed alone (boards/tools/kernel_roof.cpp), as built: program
// kernel-roof, the roof measured in a study's own rounds beside the runs it explains.
std::filesystem::path kernel_roof_tool();
// This process's own binary (/proc/self/exe): the profinfer the runner records with.
std::filesystem::path self_executable();

struct RunReport {
    int points = 0, rounds = 0, done = 0, already_done = 0, skipped = 0, failed = 0;
};

// The order round ROUND (1-based) visits N points in: a permutation that differs from
// round to round and is the same on every run of the spec (a resume follows it).
std::vector<size_t> round_order(const std::string& spec_name, int round, size_t n);

// What one run of a point executes (experiments/src/workload.cpp).
struct Workload {
    std::vector<std::string> program;  // the program's own command (what the index shows)
    std::vector<std::string> argv;     // what runs: the program, or profinfer record -- program
    std::vector<std::pair<std::string, std::string>> env;  // set for the run (ablations, NODE_PATH)
    std::string bpftrace;              // a bpftrace program to run beside it (the floor); empty: none
    bool stream = false;               // bpftrace prints a line per hit, read to the end
    bool traced = false;               // argv records into the run's DB
    std::filesystem::path nodes_csv;   // program evalcb under tracer evalcb: the callback's node times
    std::string predict_level;         // after the run: `profinfer estimate` on its trace, for this level
};
// Whether the point's run records a trace DB (profinfer record around the program) rather
// than running the program alone. Program attach records its own windows and keeps no DB.
bool is_traced(const SweepPoint& p);
Workload workload(const ExperimentSpec& spec, const RunOptions& opt, const SweepPoint& p,
                  const std::filesystem::path& model, const std::filesystem::path& db);

// bpftrace beside a run: started and attached before it, stopped (SIGINT) after it.
class BpftraceFloor {
public:
    BpftraceFloor(const std::string& script, bool stream);
    ~BpftraceFloor();
    BpftraceFloor(const BpftraceFloor&) = delete;
    BpftraceFloor& operator=(const BpftraceFloor&) = delete;
    int stop();  // exit status

private:
    pid_t pid_ = -1;
    FILE* out_ = nullptr;
    std::thread reader_;
    int status_ = 0;
};

// Runs (or resumes) the experiment in interleaved rounds: each round records every point
// once (points/<id>-r<round>.db), in round_order; runs already done are kept, with one
// progress line each on stderr. A point whose backend is missing is refused before
// anything runs, or, with quick, skipped with its reason.
RunReport run_experiment(const ExperimentSpec& spec, const RunOptions& opt);

// The llama.cpp command of a point, with the model file it needs.
std::vector<std::string> point_command(const SweepPoint& p, const std::filesystem::path& model);
// The GGUF file of a point's model (synthesised into the cache when missing, by PROFINFER).
std::filesystem::path point_model(const SweepPoint& p, const std::string& scale, const std::filesystem::path& profinfer,
                                  bool create);

}  // namespace profinfer
