#include "synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <map>
#include <random>

#include "profinfer/error.h"

namespace fs = std::filesystem;

namespace profinfer {

using gguf::TensorType;

namespace {

std::string blk(uint32_t i, const char* what) { return "blk." + std::to_string(i) + "." + what; }

void add_tokenizer(gguf::Layout& g, uint32_t vocab) {
    // An SPM ("llama") vocabulary llama.cpp accepts for any architecture: the special
    // tokens, the 256 byte tokens (type 6, so any text tokenises) and unique fillers.
    gguf::StringArray tokens{"<unk>", "<s>", "</s>"};
    gguf::I32Array types{2, 3, 3};
    char buf[16];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        tokens.emplace_back(buf), types.push_back(6);
    }
    for (uint32_t i = tokens.size(); i < vocab; ++i) tokens.push_back("\xe2\x96\x81t" + std::to_string(i)), types.push_back(1);
    g.set("tokenizer.ggml.model", std::string("llama"));
    g.set("tokenizer.ggml.tokens", std::move(tokens));
    g.set("tokenizer.ggml.scores", gguf::F32Array(vocab, 0.0f));
    g.set("tokenizer.ggml.token_type", std::move(types));
    g.set("tokenizer.ggml.unknown_token_id", uint32_t{0});
    g.set("tokenizer.ggml.bos_token_id", uint32_t{1});
    g.set("tokenizer.ggml.eos_token_id", uint32_t{2});
}

}  // namespace

gguf::Layout model_layout(const ModelCard& c, TensorType type) {
    gguf::Layout g;
    const std::string& a = c.arch;
    g.set("general.architecture", a);
    g.set("general.name", c.display_name + " (profinfer synthetic)");
    g.set("general.file_type", gguf::traits(type).llama_ftype);
    g.set(a + ".context_length", c.context);
    g.set(a + ".embedding_length", c.hidden);
    g.set(a + ".block_count", c.layers);
    g.set(a + ".feed_forward_length", c.ffn);
    g.set(a + ".attention.head_count", c.heads);
    g.set(a + ".attention.head_count_kv", c.kv_heads);
    g.set(a + ".attention.key_length", c.head_dim);
    g.set(a + ".attention.value_length", c.head_dim);
    g.set(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
    g.set(a + ".rope.freq_base", c.rope_base);
    g.set(a + ".rope.dimension_count", c.head_dim);
    g.set(a + ".vocab_size", c.vocab);
    if (c.attn_softcap > 0) g.set(a + ".attn_logit_softcapping", c.attn_softcap);
    if (c.final_softcap > 0) g.set(a + ".final_logit_softcapping", c.final_softcap);
    if (c.sliding_window > 0) g.set(a + ".attention.sliding_window", c.sliding_window);
    if (c.experts > 0) {
        g.set(a + ".expert_count", c.experts);
        g.set(a + ".expert_used_count", c.experts_used);
        g.set(a + ".expert_feed_forward_length", c.expert_ffn);
        g.set(a + ".expert_shared_feed_forward_length", c.shared_expert_ffn);
    }
    add_tokenizer(g, c.vocab);

    const uint64_t H = c.hidden, V = c.vocab, Q = uint64_t{c.heads} * c.head_dim,
                   KV = uint64_t{c.kv_heads} * c.head_dim, F = c.ffn;
    // Norm weights and biases stay f32, as llama.cpp's converters write them; so does the
    // MoE router, whose logits decide which experts run.
    const auto F32 = TensorType::F32;
    g.add_tensor("token_embd.weight", {H, V}, type);
    g.add_tensor("output_norm.weight", {H}, F32);
    // qwen2moe has no tied-embedding fallback in llama.cpp: it always needs output.weight.
    if (!c.tied_embeddings || a == "qwen2moe") g.add_tensor("output.weight", {H, V}, type);
    for (uint32_t i = 0; i < c.layers; ++i) {
        g.add_tensor(blk(i, "attn_norm.weight"), {H}, F32);
        g.add_tensor(blk(i, "attn_q.weight"), {H, Q}, type);
        g.add_tensor(blk(i, "attn_k.weight"), {H, KV}, type);
        g.add_tensor(blk(i, "attn_v.weight"), {H, KV}, type);
        if (c.qkv_bias) {
            g.add_tensor(blk(i, "attn_q.bias"), {Q}, F32);
            g.add_tensor(blk(i, "attn_k.bias"), {KV}, F32);
            g.add_tensor(blk(i, "attn_v.bias"), {KV}, F32);
        }
        g.add_tensor(blk(i, "attn_output.weight"), {Q, H}, type);
        if (a == "gemma2") g.add_tensor(blk(i, "post_attention_norm.weight"), {H}, F32);
        g.add_tensor(blk(i, "ffn_norm.weight"), {H}, F32);
        if (c.experts > 0) {
            const uint64_t E = c.experts, EF = c.expert_ffn, SF = c.shared_expert_ffn;
            g.add_tensor(blk(i, "ffn_gate_inp.weight"), {H, E}, F32);
            g.add_tensor(blk(i, "ffn_gate_exps.weight"), {H, EF, E}, type);
            g.add_tensor(blk(i, "ffn_up_exps.weight"), {H, EF, E}, type);
            g.add_tensor(blk(i, "ffn_down_exps.weight"), {EF, H, E}, type);
            g.add_tensor(blk(i, "ffn_gate_inp_shexp.weight"), {H}, F32);
            g.add_tensor(blk(i, "ffn_gate_shexp.weight"), {H, SF}, type);
            g.add_tensor(blk(i, "ffn_up_shexp.weight"), {H, SF}, type);
            g.add_tensor(blk(i, "ffn_down_shexp.weight"), {SF, H}, type);
        } else {
            g.add_tensor(blk(i, "ffn_gate.weight"), {H, F}, type);
            g.add_tensor(blk(i, "ffn_up.weight"), {H, F}, type);
            g.add_tensor(blk(i, "ffn_down.weight"), {F, H}, type);
        }
        if (a == "gemma2") g.add_tensor(blk(i, "post_ffw_norm.weight"), {H}, F32);
    }
    return g;
}

namespace {

constexpr size_t kPoolBytes = 8u << 20;  // one random pool per type, cycled through every tensor
constexpr float kStd = 0.02f;

uint16_t to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    int e = int(exp) - 127 + 15;
    if (exp == 0 || e <= 0) return sign;  // tiny values flush to zero: fine for weights
    if (e >= 31) return sign | 0x7bff;
    return sign | (e << 10) | ((man + 0x1000) >> 13);
}

uint16_t to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    return x >> 16;
}

// Bytes that decode to ~N(0, 0.02) weights in TYPE, a whole number of blocks long.
std::vector<uint8_t> random_pool(TensorType type, uint64_t seed) {
    std::mt19937_64 rng(seed ^ (uint64_t(type) * 0x9e3779b97f4a7c15ull));
    std::normal_distribution<float> normal(0.0f, kStd);
    const auto& tt = gguf::traits(type);
    size_t blocks = kPoolBytes / tt.block_bytes;
    std::vector<uint8_t> pool(blocks * tt.block_bytes);
    uint8_t* p = pool.data();
    for (size_t b = 0; b < blocks; ++b, p += tt.block_bytes) {
        switch (type) {
            case TensorType::F32: { float v = normal(rng); std::memcpy(p, &v, 4); break; }
            case TensorType::F16: { uint16_t v = to_f16(normal(rng)); std::memcpy(p, &v, 2); break; }
            case TensorType::BF16: { uint16_t v = to_bf16(normal(rng)); std::memcpy(p, &v, 2); break; }
            case TensorType::Q8_0: {  // d (f16) + 32 int8: value = q * d
                uint16_t d = to_f16(3 * kStd / 127);
                std::memcpy(p, &d, 2);
                for (int i = 0; i < 32; ++i) p[2 + i] = uint8_t(int8_t(std::clamp(normal(rng) / (3 * kStd / 127), -127.f, 127.f)));
                break;
            }
            case TensorType::Q4_0: {  // d (f16) + 16 bytes of nibbles: value = (q - 8) * d
                uint16_t d = to_f16(kStd / 3);
                std::memcpy(p, &d, 2);
                for (int i = 0; i < 16; ++i) p[2 + i] = uint8_t(rng() & 0xff);
                break;
            }
            case TensorType::Q4_1: {  // d, m (f16) + nibbles: value = q * d + m
                uint16_t d = to_f16(kStd / 3), m = to_f16(-8 * kStd / 3);
                std::memcpy(p, &d, 2), std::memcpy(p + 2, &m, 2);
                for (int i = 0; i < 16; ++i) p[4 + i] = uint8_t(rng() & 0xff);
                break;
            }
        }
    }
    return pool;
}

// Stable across compilers and runs, unlike std::hash.
uint64_t fnv1a(const std::string& s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
    return h;
}

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal = sig; }

// Restores SIGINT/SIGTERM on scope exit; while alive, a signal makes the writer stop
// at the next chunk and remove its temporary file.
class SignalGuard {
public:
    SignalGuard() {
        g_signal = 0;
        struct sigaction sa{};
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, &old_int_), sigaction(SIGTERM, &sa, &old_term_);
    }
    ~SignalGuard() { sigaction(SIGINT, &old_int_, nullptr), sigaction(SIGTERM, &old_term_, nullptr); }

private:
    struct sigaction old_int_{}, old_term_{};
};

class TempFile {
public:
    explicit TempFile(const fs::path& out) : final_(out), tmp_(out.string() + ".partial") {
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0) throw_errno("cannot write " + out.string());
    }
    ~TempFile() {
        if (fd_ >= 0) ::close(fd_), ::unlink(tmp_.c_str());
    }
    void write(const uint8_t* p, size_t n) {
        if (g_signal) throw Error("interrupted by signal " + std::to_string(g_signal.load()) + "; no file written");
        while (n) {
            ssize_t w = ::write(fd_, p, n);
            if (w < 0) {
                if (errno == EINTR) continue;
                throw_errno("writing " + final_.string());
            }
            p += w, n -= w;
        }
    }
    void commit() {
        if (::close(fd_) != 0) throw_errno("closing " + tmp_.string());
        fd_ = -1;
        if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
            ::unlink(tmp_.c_str());
            throw_errno("renaming " + tmp_.string() + " to " + final_.string());
        }
    }

private:
    fs::path final_, tmp_;
    int fd_ = -1;
};

}  // namespace

uint64_t synthesise_model(const ModelCard& card, const SynthOptions& opts, const fs::path& out) {
    gguf::Layout layout = model_layout(card, opts.type);
    const std::vector<uint8_t> header = layout.header();
    const uint64_t total = header.size() + layout.data_bytes();

    SignalGuard signals;
    TempFile file(out);
    file.write(header.data(), header.size());

    std::map<TensorType, std::vector<uint8_t>> pools;
    std::vector<uint8_t> chunk(4u << 20);
    uint64_t written = header.size();
    auto report = [&] {
        if (opts.progress) opts.progress(written, total);
    };
    for (const auto& t : layout.tensors()) {
        const bool ones = t.name.find("norm.weight") != std::string::npos;
        uint64_t left = t.bytes();
        if (ones) {
            // RMS-norm multipliers of 1.0 keep activations finite through the layers.
            std::vector<float> v(left / 4, 1.0f);
            file.write(reinterpret_cast<const uint8_t*>(v.data()), left);
        } else {
            auto& pool = pools[t.type];
            if (pool.empty()) pool = random_pool(t.type, opts.seed);
            const uint32_t bb = gguf::traits(t.type).block_bytes;
            // Each tensor starts at its own block of the pool so tensors differ.
            size_t pos = fnv1a(t.name) % (pool.size() / bb) * bb;
            while (left) {
                size_t n = std::min<uint64_t>(left, pool.size() - pos);
                file.write(pool.data() + pos, n);
                left -= n, written += n, pos = 0;
                report();
            }
        }
        written += ones ? t.bytes() : 0;
        uint64_t pad = gguf::Layout::padding(t.bytes());
        if (pad) {
            static const uint8_t zeros[gguf::Layout::kAlignment] = {};
            file.write(zeros, pad);
            written += pad;
        }
    }
    file.commit();
    written = total;
    report();
    return total;
}

}  // namespace profinfer
