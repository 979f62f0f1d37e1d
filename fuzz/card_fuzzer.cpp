// Model cards from anywhere (a user's file): refused with a message, never a crash, a
// hang or a card whose sizes would fill the disk.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "profinfer/model_card.h"
#include "profinfer/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = "/tmp/profinfer-fuzz-card-" + std::to_string(getpid()) + ".toml";
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(data, 1, size, f);
        std::fclose(f);
    }
    for (auto scale : {profinfer::ModelCard::Scale::Full, profinfer::ModelCard::Scale::Tiny}) {
        try {
            auto c = profinfer::ModelCard::load(path, scale);
            if (c.layers > 1024 || c.hidden > (1u << 17)) __builtin_trap();  // the bounds must hold
        } catch (const profinfer::Error&) {
        }
    }
    return 0;
}
