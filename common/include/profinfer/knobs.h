#pragma once
// Every PROFINFER_* variable profinfer reads from its environment, and every path compiled
// into it, in one table: read only through knob(), printed by `profinfer --help`
// (knobs_help). A knob changes where profinfer looks or forces a path a test needs; what a
// recording does is chosen by options, never by the environment.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace profinfer {

enum class Knob {
    Cache,           // PROFINFER_CACHE
    Cards,           // PROFINFER_CARDS
    Boards,          // PROFINFER_BOARDS
    LibbpfVerbose,   // PROFINFER_LIBBPF_VERBOSE
    ThreadSlots,     // PROFINFER_THREAD_SLOTS
    SchedSwitch,     // PROFINFER_SCHED_SWITCH
    KernelFeatures,  // PROFINFER_KERNEL_FEATURES
    PerfFaults,      // PROFINFER_PERF_FAULTS
    SqlProfile,      // PROFINFER_SQL_PROFILE
    KernelRoof,      // PROFINFER_KERNEL_ROOF
};

struct KnobInfo {
    Knob knob;
    const char* env;      // the variable
    const char* meaning;  // what setting it does
};
const std::vector<KnobInfo>& knobs();

// The environment's value of K; nothing when it is unset.
std::optional<std::string> knob(Knob k);

// The paths compiled into profinfer: where the source tree it was built from keeps what it
// reads at run time. Each is read only through compiled_in().
enum class CompiledIn {
    SourceDir,    // the source tree (experiments/peers, scripts/ort.sh, models/cards/*.toml)
    LlamaScript,  // scripts/llama.sh: builds and finds the pinned llama.cpp
    CardsDir,     // models/cards: the model cards (unless PROFINFER_CARDS)
    BoardsDir,    // boards/profiles: the board profiles (unless PROFINFER_BOARDS)
};
const char* compiled_in(CompiledIn p);

// The table as --help prints it: every knob with its meaning and its value here, then the
// compiled-in paths, and MORE (name, path) pairs from the layers above (a peer's build).
std::string knobs_help(const std::vector<std::pair<std::string, std::string>>& more = {});

}  // namespace profinfer
