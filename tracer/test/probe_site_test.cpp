// Where entry probes go (probe_site.h): on x86-64 the first instruction of the function's
// straight-line start that the kernel emulates, when the handler still sees what it reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "elf_symbols.h"
#include "probe_site.h"
#include "profinfer/output_file.h"

using namespace profinfer;
namespace fs = std::filesystem;

namespace {
fs::path write_code(const fs::path& dir, const std::vector<unsigned char>& bytes) {
    const fs::path p = dir / "code.bin";
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
}
}  // namespace

// Each function below sits at file offset 8 (offset 0 means "unknown": libbpf resolves it).
uint64_t site_of(const fs::path& dir, std::vector<unsigned char> fn, uint32_t reads) {
    std::vector<unsigned char> bytes(8, 0xcc);
    bytes.insert(bytes.end(), fn.begin(), fn.end());
    return entry_probe_offset(write_code(dir, bytes), 8, fn.size(), reads) - 8;
}

#if defined(__x86_64__)
TEST(ProbeSite, GoesToTheFirstEmulatedInstructionItMay) {
    PrivateTempDir dir("profinfer-probe-site");
    const auto& d = dir.path();
    // endbr64; push %r15: on the push, whatever the handler reads.
    EXPECT_EQ(site_of(d, {0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57, 0xc3}, kReadsStack), 4u);
    EXPECT_EQ(site_of(d, {0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57, 0xc3}, kReadsArg1 | kReadsArg2), 4u);
    // A push first: where it is.
    EXPECT_EQ(site_of(d, {0x53, 0xc3}, kReadsArg1), 0u);
    // The release ggml_barrier: endbr64; mov 0x68(%rdi),%eax; movzwl %ax,%esi; cmp $1,%ax; je.
    const std::vector<unsigned char> barrier = {0xf3, 0x0f, 0x1e, 0xfa, 0x8b, 0x47, 0x68, 0x0f, 0xb7, 0xf0,
                                                0x66, 0x83, 0xf8, 0x01, 0x74, 0x01, 0x90, 0xc3};
    EXPECT_EQ(site_of(d, barrier, kReadsNothing), 14u);      // on the je
    EXPECT_EQ(site_of(d, barrier, kReadsArg2), 7u);          // movzwl writes esi: before it
    EXPECT_EQ(site_of(d, barrier, kReadsArg1), 14u);         // rdi is only read
    EXPECT_EQ(site_of(d, barrier, kReadsStack), 4u);         // a stack reader moves past endbr64 only
    // The release rms_norm_mul_fused: endbr64; lea 0x8(%rsp),%r10; and $-64,%rsp; push -0x8(%r10); push %rbp.
    const std::vector<unsigned char> realign = {0xf3, 0x0f, 0x1e, 0xfa, 0x4c, 0x8d, 0x54, 0x24, 0x08, 0x48, 0x83,
                                                0xe4, 0xc0, 0x41, 0xff, 0x72, 0xf8, 0x55, 0xc3};
    EXPECT_EQ(site_of(d, realign, kReadsArg1 | kReadsArg2 | kReadsArg3), 17u);  // on push %rbp
    EXPECT_EQ(site_of(d, realign, kReadsStack), 4u);
    // endbr64; mov %rdi,%rax; push %rbx; jmp back to the mov: the push would be hit on every
    // turn of the loop, so the probe stays on the entry.
    EXPECT_EQ(site_of(d, {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xf8, 0x53, 0xeb, 0xfa, 0xc3}, kReadsNothing), 0u);
    // A return before anything emulated: stays on the entry's first non-endbr64 instruction.
    EXPECT_EQ(site_of(d, {0xf3, 0x0f, 0x1e, 0xfa, 0x31, 0xc0, 0xc3}, kReadsNothing), 6u);
}
#else
TEST(ProbeSite, StaysOnTheEntryOnOtherArchitectures) {
    PrivateTempDir dir("profinfer-probe-site");
    EXPECT_EQ(site_of(dir.path(), {0x5f, 0x24, 0x03, 0xd5, 0xfd, 0x7b, 0xbf, 0xa9}, kReadsNothing), 0u);
}
#endif

#if defined(__x86_64__)
// The stock release libraries are built with CET: every node function begins with endbr64;
// the probes land on an instruction the kernel emulates.
TEST(ProbeSite, StockReleaseProbesLandOnEmulatedInstructions) {
    int checked = 0;
    for (const auto& e : fs::directory_iterator(PINNED_RELEASE_LIB_DIR)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("libggml-cpu-", 0) != 0) continue;
        ElfSymbols sym(e.path());
        for (auto [fn, reads] : {std::pair{"ggml_cpu_extra_compute_forward", kReadsArg1 | kReadsArg2},
                                 std::pair{"ggml_compute_forward_rms_norm_mul_fused", kReadsArg1 | kReadsArg2 | kReadsArg3},
                                 std::pair{"ggml_barrier", uint32_t(kReadsNothing)}}) {
            const uint64_t at = sym.file_offset(fn);
            ASSERT_NE(at, 0u) << name << " " << fn;
            const uint64_t probe = entry_probe_offset(e.path(), at, sym.function_size(fn), reads);
            unsigned char b[2];
            std::ifstream f(e.path(), std::ios::binary);
            f.seekg(std::streamoff(probe)).read(reinterpret_cast<char*>(b), 2);
            const bool push = (b[0] >= 0x50 && b[0] <= 0x57) || (b[0] == 0x41 && b[1] >= 0x50 && b[1] <= 0x57);
            const bool jcc = (b[0] >= 0x70 && b[0] <= 0x7f) || (b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f);
            EXPECT_TRUE(push || jcc) << name << " " << fn << ": probe at +" << probe - at << " on byte " << int(b[0]);
            ++checked;
        }
    }
    EXPECT_GT(checked, 0) << "no libggml-cpu-* in " << PINNED_RELEASE_LIB_DIR;
}
#endif
