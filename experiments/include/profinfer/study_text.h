#pragma once
// How every study caption, table and the results README name what they show (numbers:
// format_double and format_with_interval, profinfer/number_text.h; cells: number_or_null,
// profinfer/table.h).
#include <cstddef>
#include <filesystem>
#include <string>

namespace profinfer {

// "1 round", "2 rounds", a range "1–2 rounds": as every caption, table and verdict says it.
std::string rounds_text(size_t lo, size_t hi);
std::string rounds_text(size_t n);
// The machine results are for, for captions: the CPU of results/<board>/machine.json beside
// OUT_DIR (a study's or the models' folder) and the board ("AMD EPYC (host)"); the board alone
// without one.
std::string machine_of(const std::filesystem::path& out_dir, const std::string& board);

}  // namespace profinfer
