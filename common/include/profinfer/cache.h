#pragma once
// Where profinfer keeps what it builds and makes (the pinned llama.cpp, synthetic models,
// ONNX Runtime): $PROFINFER_CACHE, else ~/.cache/profinfer. The C++ side's one definition;
// the shell scripts read the same rule from scripts/cache.sh (they run before profinfer is
// built), and Make asks profinfer (`profinfer model path`).
#include <filesystem>

namespace profinfer {

std::filesystem::path cache_dir();

}  // namespace profinfer
