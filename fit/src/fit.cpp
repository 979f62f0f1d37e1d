#include "profinfer/fit.h"

#include <chrono>
#include <ctime>

#include "fit_parts.h"
#include "profinfer/error.h"
#include "profinfer/study_text.h"
#include "profinfer/experiment_index.h"
#include "profinfer/output_file.h"

namespace profinfer {

using namespace fit;

namespace {
// What every held-out figure's caption starts with: the machine the sweep ran on (its results
// folder's machine.json: never one found above the output folder), the level and the rounds of
// that sweep.
std::string heldout_caption(const fs::path& study, const std::string& board,
                            const std::map<std::string, std::string>& facts) {
    size_t lo = SIZE_MAX, hi = 0;
    if (fs::exists(study / "table.csv")) {
        const Table t = read_table(study / "table.csv");
        for (const auto& r : t.rows) {
            const auto n = size_t(r[t.column("n")].get<int64_t>());
            lo = std::min(lo, n), hi = std::max(hi, n);
        }
    }
    const auto level = facts.find("level");
    return machine_of(study, board) + "; --level " + (level == facts.end() ? std::string("op") : level->second) +
           " (matmul-dims)" + (hi > 0 ? "; n = " + rounds_text(lo, hi) + " per point" : "");
}
}  // namespace

FitResult fit_models(const fs::path& results_dir, const fs::path& out_dir) {
    const fs::path study = results_dir / "matmul-dims";
    const MatMulGroups groups = read_matmul_groups(study / "matmuls.csv");
    FitContext c;
    c.results_dir = results_dir;
    c.out_dir = out_dir;
    if (fs::exists(results_dir / "machine.json")) c.machine = MachineBench::load(results_dir / "machine.json");
    auto& out = c.out;
    const auto& machine = c.machine;
    out["schema"] = perf::kSchema;
    out["version"] = perf::kSchemaVersion;
    {
        const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        char b[32];
        std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        out["created_utc"] = b;
    }
    // The board the sweep ran on (results/<board>/quick/ is not a board named "quick").
    const auto facts = study_facts(study);
    const std::string board = facts.count("board") ? facts.at("board") : results_dir.filename().string();
    out["board"] = board;
    // The models the lines were fitted on: at tiny scale their shapes are not the real models'.
    out["scale"] = ModelCard::scale_name(study_scale(study));
    out["llama_cpp_commit"] = llama_commit(study / "index.db");
    out["source"] = "matmul-dims/matmuls.csv (median time per weight-MatMul shape), matmul-dims/points.csv (decode speed)";
    out["units"] = {{"time", "microseconds per call (matmul), milliseconds per token (decode)"},
                    {"mnkh", "M*N*K*H: multiply-adds of the MatMul"},
                    {"m", "output features"}, {"n", "tokens in the batch"}, {"k", "input features"}, {"h", "remaining dims"}};
    if (machine) out["machine"] = {{"cpu", machine->cpu}};
    out["matmul"] = nlohmann::json::array();
    const Table matmul_heldout = fit_matmul(c, groups);
    fit_offload(c);
    const Table decode_heldout = fit_decode(c, groups);
    const Table roofs_heldout = fit_decode_roofs(c);
    fit_context(c);
    fit_moe(c);
    FitResult res;
    fs::create_directories(out_dir);
    OutputFile::write(out_dir / "matmul-heldout.csv", matmul_heldout.to_csv());
    OutputFile::write(out_dir / "decode-heldout.csv", decode_heldout.to_csv());
    res.written = {out_dir / "matmul-heldout.csv", out_dir / "decode-heldout.csv"};
    if (!roofs_heldout.rows.empty()) {
        OutputFile::write(out_dir / "decode-roofs-heldout.csv", roofs_heldout.to_csv());
        res.written.push_back(out_dir / "decode-roofs-heldout.csv");
        const auto speed_facts = study_facts(results_dir / "decode-speed");
        const auto rounds = speed_facts.find("rounds");
        std::string formula = "a·bytes/triad + b·ops/peak + c·layers + d";
        for (const auto& e : out["decode_roofs"])
            for (const auto& t : e.value("terms", nlohmann::json::array()))
                if (t == "kernel_stream")
                    formula = "a·Σ bytes/(llama.cpp's kernel streaming rate for the weight's size) + c·layers + d";
        for (const auto& f : draw_decode_roofs(out_dir, roofs_heldout,
                                               machine_of(results_dir / "decode-speed", board) + "; untraced, warm (decode-speed" +
                                                   (rounds == speed_facts.end() ? "" : ", " + rounds->second + " rounds") + ")",
                                               formula))
            res.written.push_back(f);
    }
    for (const auto& f : draw_heldout(out_dir, matmul_heldout, decode_heldout,
                                      heldout_caption(study, board, facts)))
        res.written.push_back(f);
    res.models = out;
    res.summary_md = c.md.str();
    return res;
}

}  // namespace profinfer
