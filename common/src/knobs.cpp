#include "profinfer/knobs.h"

#include <cstdlib>
#include <sstream>

namespace profinfer {

const std::vector<KnobInfo>& knobs() {
    static const std::vector<KnobInfo> kKnobs = {
        {Knob::Cache, "PROFINFER_CACHE", "where models, llama.cpp builds and downloads are kept (default ~/.cache/profinfer)"},
        {Knob::Cards, "PROFINFER_CARDS", "the model cards' directory (default: models/cards of the source tree)"},
        {Knob::Boards, "PROFINFER_BOARDS", "the board profiles' directory (default: boards/profiles of the source tree)"},
        {Knob::LibbpfVerbose, "PROFINFER_LIBBPF_VERBOSE", "set: libbpf's messages (the verifier's log) on stderr; stats: the verifier's time and instructions for each "
         "program loaded"},
        {Knob::ThreadSlots, "PROFINFER_THREAD_SLOTS",
         "N: threads with a node under way at once the BPF side keeps (default max(64, 4 per CPU)); tests fill it"},
        {Knob::SchedSwitch, "PROFINFER_SCHED_SWITCH",
         "3arg, 4arg or both: the sched_switch program loaded, whatever the kernel's prototype (tests)"},
        {Knob::KernelFeatures, "PROFINFER_KERNEL_FEATURES",
         "old: every fallback for an older kernel's verifier taken on this one (tests); probe: the default"},
        {Knob::PerfFaults, "PROFINFER_PERF_FAULTS",
         "set: page faults counted by perf events, not read from the thread's task_struct"},
        {Knob::SqlProfile, "PROFINFER_SQL_PROFILE",
         "MS: every SQL statement on a trace that runs MS milliseconds or more, on stderr with its time (what an analysis "
         "spends its time on)"},
        {Knob::KernelRoof, "PROFINFER_KERNEL_ROOF",
         "PATH: the ggml_kernel_roof bench-machine times llama.cpp's decode MatMul kernel with (default: the one built with "
         "profinfer)"},
    };
    return kKnobs;
}

std::optional<std::string> knob(Knob k) {
    for (const auto& i : knobs())
        if (i.knob == k) {
            if (const char* v = std::getenv(i.env)) return std::string(v);
            return std::nullopt;
        }
    return std::nullopt;
}

const char* compiled_in(CompiledIn p) {
    switch (p) {
        case CompiledIn::SourceDir: return PROFINFER_SOURCE_DIR;
        case CompiledIn::LlamaScript: return PROFINFER_LLAMA_SCRIPT;
        case CompiledIn::CardsDir: return PROFINFER_CARDS_DIR;
        case CompiledIn::BoardsDir: return PROFINFER_BOARDS_DIR;
    }
    return "";
}

std::string knobs_help(const std::vector<std::pair<std::string, std::string>>& more) {
    std::ostringstream o;
    o << "Environment (PROFINFER_*; their values here):\n";
    for (const auto& i : knobs()) {
        const auto v = knob(i.knob);
        o << "  " << i.env << (v ? "=" + *v : " (unset)") << "\n      " << i.meaning << "\n";
    }
    std::vector<std::pair<std::string, std::string>> paths = {
        {"source tree", compiled_in(CompiledIn::SourceDir)},
        {"llama.cpp script", compiled_in(CompiledIn::LlamaScript)},
        {"model cards", compiled_in(CompiledIn::CardsDir)},
        {"board profiles", compiled_in(CompiledIn::BoardsDir)}};
    paths.insert(paths.end(), more.begin(), more.end());
    o << "Compiled in:\n";
    for (const auto& [name, path] : paths) o << "  " << name << ": " << path << "\n";
    return o.str();
}

}  // namespace profinfer
