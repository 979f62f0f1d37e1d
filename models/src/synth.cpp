#include "profinfer/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
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

// One row of N values (N a whole number of blocks) in TYPE, by ggml's reference
// quantisers (quantize_row_*_ref): the values the routing rows need come back to < 0.1 %.
void encode_row(TensorType type, const float* v, size_t n, uint8_t* out) {
    auto put16 = [](uint8_t* p, uint16_t x) { std::memcpy(p, &x, 2); };
    const auto& tt = gguf::traits(type);
    for (size_t b = 0; b < n / tt.block_elems; ++b, v += tt.block_elems, out += tt.block_bytes) {
        switch (type) {
            case TensorType::F32: std::memcpy(out, v, 4); break;
            case TensorType::F16: put16(out, to_f16(*v)); break;
            case TensorType::BF16: put16(out, to_bf16(*v)); break;
            case TensorType::Q8_0: {
                float amax = 0;
                for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(v[i]));
                const float d = amax / 127, id = d ? 1 / d : 0;
                put16(out, to_f16(d));
                for (int i = 0; i < 32; ++i) out[2 + i] = uint8_t(int8_t(std::lround(v[i] * id)));
                break;
            }
            case TensorType::Q4_0: {
                float amax = 0, max = 0;
                for (int i = 0; i < 32; ++i)
                    if (std::abs(v[i]) > amax) amax = std::abs(v[i]), max = v[i];
                const float d = max / -8, id = d ? 1 / d : 0;
                put16(out, to_f16(d));
                auto q = [&](int i) { return uint8_t(std::min(15, int(v[i] * id + 8.5f))); };
                for (int i = 0; i < 16; ++i) out[2 + i] = uint8_t(q(i) | q(i + 16) << 4);
                break;
            }
            case TensorType::Q4_1: {
                float lo = v[0], hi = v[0];
                for (int i = 1; i < 32; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
                const float d = (hi - lo) / 15, id = d ? 1 / d : 0;
                put16(out, to_f16(d)), put16(out + 2, to_f16(lo));
                auto q = [&](int i) { return uint8_t(std::min(15, int((v[i] - lo) * id + 0.5f))); };
                for (int i = 0; i < 16; ++i) out[4 + i] = uint8_t(q(i) | q(i + 16) << 4);
                break;
            }
        }
    }
}

// The routing of a MoE card with MoeRouting::Kind::Zipf (see moe_routing.h): which hidden
// dimensions each layer's router reads, and each token's embedding row.
class RoutedEmbedding {
public:
    static constexpr float kA = 1024;  // the embedding's value on a chosen expert's dimension

    RoutedEmbedding(const ModelCard& c, const MoeRouting& r, uint64_t seed)
        : E_(c.experts), k_(c.experts_used), H_(c.hidden), V_(c.vocab) {
        if (H_ < E_) throw Error(c.name + ": zipf routing needs hidden >= experts (" + std::to_string(H_) + " < " +
                                 std::to_string(E_) + "); use --moe-routing random");
        blocks_ = std::min<uint32_t>(c.layers, H_ / E_);
        const auto pi = inclusion_probabilities(E_, k_, r.s);
        cum_.assign(1, 0.0);
        for (double p : pi) cum_.push_back(cum_.back() + p);
        std::mt19937_64 rng(seed ^ 0x5eed0f4011e5ull);
        for (uint32_t b = 0; b < blocks_; ++b) {
            std::vector<uint32_t> rank_to_expert(E_), order(V_);
            std::iota(rank_to_expert.begin(), rank_to_expert.end(), 0u);
            std::iota(order.begin(), order.end(), 0u);
            std::shuffle(rank_to_expert.begin(), rank_to_expert.end(), rng);  // each block its own popular experts
            std::shuffle(order.begin(), order.end(), rng);  // which token takes which stratum
            rank_to_expert_.push_back(std::move(rank_to_expert));
            order_.push_back(std::move(order));
        }
    }
    // Layer l's router reads dimensions [block(l) E, block(l) E + E).
    uint32_t block(uint32_t layer) const { return layer % (H_ / E_); }
    // The row of token t: kA on dimension b E + e for each expert e that t chooses in block b.
    void row(uint32_t t, std::vector<float>& v) const {
        v.assign(H_, 0.0f);
        for (uint32_t b = 0; b < blocks_; ++b) {
            // Systematic sampling on [0, k): points u, u + 1, ... land in k distinct ranks
            // (every pi <= 1), each rank with probability pi over the strata u.
            const double u = (order_[b][t] + 0.5) / V_;
            for (uint32_t j = 0; j < k_; ++j) {
                const double x = u + j;
                uint32_t r = uint32_t(std::upper_bound(cum_.begin(), cum_.end(), x) - cum_.begin()) - 1;
                v[size_t(b) * E_ + rank_to_expert_[b][std::min(r, E_ - 1)]] = kA;
            }
        }
    }

private:
    uint32_t E_, k_, H_, V_, blocks_ = 0;
    std::vector<double> cum_;
    std::vector<std::vector<uint32_t>> rank_to_expert_, order_;
};

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
    if (card.experts > 0) layout.set("profinfer.moe_routing", opts.routing.str());
    const std::vector<uint8_t> header = layout.header();
    const uint64_t total = header.size() + layout.data_bytes();

    SignalGuard signals;
    TempFile file(out);
    file.write(header.data(), header.size());

    std::map<TensorType, std::vector<uint8_t>> pools;
    constexpr size_t kChunk = 4u << 20;
    uint64_t written = header.size();
    auto report = [&] {
        if (opts.progress) opts.progress(written, total);
    };
    std::optional<RoutedEmbedding> routed;
    if (card.experts > 0 && opts.routing.kind == MoeRouting::Kind::Zipf) routed.emplace(card, opts.routing, opts.seed);
    auto emit = [&](const uint8_t* p, size_t n) {
        file.write(p, n);
        written += n;
        report();
    };
    for (const auto& t : layout.tensors()) {
        uint64_t left = t.bytes();
        int layer = -1;
        const bool gate = routed && std::sscanf(t.name.c_str(), "blk.%d.ffn_gate_inp.weight", &layer) == 1 &&
                          t.name == blk(uint32_t(layer), "ffn_gate_inp.weight");
        if (t.name.find("norm.weight") != std::string::npos) {
            // RMS-norm multipliers of 1.0 keep activations finite through the layers.
            std::vector<float> v(left / 4, 1.0f);
            emit(reinterpret_cast<const uint8_t*>(v.data()), left);
        } else if (routed && t.name == "token_embd.weight") {
            const uint64_t row_bytes = t.bytes() / card.vocab;
            std::vector<float> v;
            std::vector<uint8_t> rows;
            for (uint32_t tok = 0; tok < card.vocab; ++tok) {
                routed->row(tok, v);
                rows.resize(rows.size() + row_bytes);
                encode_row(t.type, v.data(), v.size(), rows.data() + rows.size() - row_bytes);
                if (rows.size() >= kChunk || tok + 1 == card.vocab) emit(rows.data(), rows.size()), rows.clear();
            }
        } else if (gate) {
            // The router of this layer: expert e reads dimension block(layer) E + e.
            std::vector<float> w(size_t(card.hidden) * card.experts, 0.0f);
            const size_t first = size_t(routed->block(uint32_t(layer))) * card.experts;
            for (uint32_t e = 0; e < card.experts; ++e) w[size_t(e) * card.hidden + first + e] = 1.0f;
            emit(reinterpret_cast<const uint8_t*>(w.data()), left);
        } else {
            auto& pool = pools[t.type];
            if (pool.empty()) pool = random_pool(t.type, opts.seed);
            const uint32_t bb = gguf::traits(t.type).block_bytes;
            // Each tensor starts at its own block of the pool so tensors differ.
            size_t pos = fnv1a(t.name) % (pool.size() / bb) * bb;
            while (left) {
                size_t n = std::min<uint64_t>(left, pool.size() - pos);
                emit(pool.data() + pos, n);
                left -= n, pos = 0;
            }
        }
        uint64_t pad = gguf::Layout::padding(t.bytes());
        if (pad) {
            static const uint8_t zeros[gguf::Layout::kAlignment] = {};
            emit(zeros, pad);
        }
    }
    file.commit();
    written = total;
    report();
    return total;
}

}  // namespace profinfer
