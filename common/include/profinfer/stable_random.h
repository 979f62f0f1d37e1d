#pragma once
// Hashes and pseudo-random numbers whose values are the same on every machine, compiler
// and library (std::hash and std::uniform_int_distribution are not): what names files,
// orders a study's rounds and resamples its intervals, so that they can be recomputed.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace profinfer {

// FNV-1a, 64 bits.
inline uint64_t fnv1a(std::string_view text) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    return h;
}

// SplitMix64.
struct StableRandom {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    size_t below(size_t n) { return size_t(next() % n); }  // n ≥ 1; the bias is below 2⁻⁵⁰ for the n used here
};

}  // namespace profinfer
