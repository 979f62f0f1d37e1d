#pragma once
// What results/<board>/ says as a whole: its README, and a farm's boards side by side.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace profinfer {

// RESULTS_DIR/README.md (results/<board>/ or its quick/), generated whole from the studies
// summarised there (their index.db, verdicts.csv, table.csv) and machine.json: the verdict of
// every claim, each study's rounds and run-to-run spread, links to the rest. Returns its path.
std::filesystem::path write_results_readme(const std::filesystem::path& results_dir);

// `make farm`'s last step: FARM/<board>/<study>/index.db merged into FARM/farm.db, and per
// study the boards side by side in FARM/compare/ (experiments/src/farm_merge.cpp).
struct FarmMerge {
    int64_t runs = 0, boards = 0;
    std::vector<std::filesystem::path> written;
};
FarmMerge merge_farm(const std::filesystem::path& farm);

}  // namespace profinfer
