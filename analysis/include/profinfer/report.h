#pragma once
// One self-contained HTML report (figures embedded, no network) for a run database or
// a directory of them: run summary, top operators, the DAG of one transformer block,
// the figures, and the roofline table with the numbers behind it.
#include <filesystem>
#include <vector>

namespace profinfer {

// The databases a report covers: INPUT itself, or every .db under the directory INPUT.
std::vector<std::filesystem::path> report_inputs(const std::filesystem::path& input);

// INPUT: a .db or a directory searched for .db files. MACHINE: roofs file, may not exist.
void write_report(const std::filesystem::path& input, const std::filesystem::path& out,
                  const std::filesystem::path& machine);

}  // namespace profinfer
