#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace profinfer {

// The hyperparameters of one model architecture instance, read from models/cards/*.toml.
// A card describes the full-size model; its [tiny] table overrides keys for the
// few-MB test variant of the same architecture.
struct ModelCard {
    std::string name;          // card name, e.g. "llama3.2-1b"
    std::string display_name;  // e.g. "LLaMA3.2-1B"
    std::string arch;          // llama.cpp architecture: llama, qwen2, gemma2, qwen2moe
    uint32_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
    uint32_t context = 4096;
    float rope_base = 10000.0f;
    float rms_eps = 1e-6f;
    bool tied_embeddings = true;
    // qwen2 / qwen2moe
    bool qkv_bias = false;
    // gemma2
    float attn_softcap = 0.0f, final_softcap = 0.0f;
    uint32_t sliding_window = 0;
    // qwen2moe
    uint32_t experts = 0, experts_used = 0, expert_ffn = 0, shared_expert_ffn = 0;

    enum class Scale { Full, Tiny };
    // The scale's name as models.json, the study index and the command line spell it: "full" or
    // "tiny"; parse_scale throws on any other name.
    static Scale parse_scale(const std::string& name);
    static const char* scale_name(Scale scale);
    // NAME_OR_FILE: a path to a .toml card, or the name of a card in the cards directory
    // ($PROFINFER_CARDS or the source tree's models/cards).
    static ModelCard load(const std::string& name_or_file, Scale scale);
    static std::filesystem::path cards_dir();
};

}  // namespace profinfer
