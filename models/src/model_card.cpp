#include "profinfer/model_card.h"
#include "profinfer/knobs.h"

#include <cstdlib>
#include <set>
#include <tuple>
#include <toml++/toml.h>

#include "profinfer/error.h"
#include "profinfer/text_file.h"

namespace fs = std::filesystem;

namespace profinfer {

namespace {

const std::set<std::string> kArchitectures = {"llama", "qwen2", "gemma2", "qwen2moe"};

class CardReader {
public:
    CardReader(const toml::table& base, const toml::table* tiny, std::string file)
        : base_(base), tiny_(tiny), file_(std::move(file)) {}

    template <class T>
    void get(const char* key, T& out, bool required) {
        const toml::node* n = nullptr;
        if (tiny_) n = tiny_->get(key);
        if (!n) n = base_.get(key);
        if (!n) {
            if (required) throw Error(file_ + ": missing required key '" + std::string(key) + "'");
            return;
        }
        if constexpr (std::is_same_v<T, bool>) {
            if (auto v = n->value<bool>()) return void(out = *v);
        } else if constexpr (std::is_same_v<T, std::string>) {
            if (auto v = n->value<std::string>()) return void(out = *v);
        } else if constexpr (std::is_floating_point_v<T>) {
            if (auto v = n->value<double>()) return void(out = static_cast<T>(*v));
        } else {
            if (auto v = n->value<int64_t>(); v && *v >= 0) return void(out = static_cast<T>(*v));
        }
        throw Error(file_ + ": key '" + std::string(key) + "' has the wrong type");
    }

private:
    const toml::table& base_;
    const toml::table* tiny_;
    std::string file_;
};

}  // namespace

fs::path ModelCard::cards_dir() {
    if (const auto env = knob(Knob::Cards)) return *env;
    return compiled_in(CompiledIn::CardsDir);
}

ModelCard::Scale ModelCard::parse_scale(const std::string& name) {
    if (name == "full") return Scale::Full;
    if (name == "tiny") return Scale::Tiny;
    throw Error("unknown model scale '" + name + "' (known: full, tiny)");
}

const char* ModelCard::scale_name(Scale scale) { return scale == Scale::Tiny ? "tiny" : "full"; }

ModelCard ModelCard::load(const std::string& name_or_file, Scale scale) {
    fs::path file = name_or_file;
    if (!fs::exists(file)) {
        file = cards_dir() / (name_or_file + ".toml");
        if (!fs::exists(file)) {
            std::string known;
            if (fs::is_directory(cards_dir()))
                for (const auto& e : fs::directory_iterator(cards_dir()))
                    if (e.path().extension() == ".toml") known += (known.empty() ? "" : ", ") + e.path().stem().string();
            throw Error("no model card '" + name_or_file + "' (not a file, not in " + cards_dir().string() +
                        "; known: " + known + ")");
        }
    }
    toml::table tbl;
    try {
        tbl = toml::parse_file(file.string());
    } catch (const toml::parse_error& e) {
        throw Error(toml_error_text(file, e, "malformed card"));
    }
    const toml::table* tiny = nullptr;
    if (scale == Scale::Tiny) {
        tiny = tbl["tiny"].as_table();
        if (!tiny) throw Error(file.string() + ": card has no [tiny] table, so there is no tiny variant");
    }
    ModelCard c;
    CardReader r(tbl, tiny, file.string());
    r.get("name", c.name, true);
    c.display_name = c.name;
    r.get("display_name", c.display_name, false);
    r.get("arch", c.arch, true);
    if (!kArchitectures.count(c.arch))
        throw Error(file.string() + ": unknown architecture '" + c.arch + "' (known: gemma2, llama, qwen2, qwen2moe)");
    r.get("hidden", c.hidden, true);
    r.get("layers", c.layers, true);
    r.get("heads", c.heads, true);
    r.get("kv_heads", c.kv_heads, true);
    r.get("head_dim", c.head_dim, true);
    r.get("ffn", c.ffn, true);
    r.get("vocab", c.vocab, true);
    r.get("context", c.context, false);
    r.get("rope_base", c.rope_base, false);
    r.get("rms_eps", c.rms_eps, false);
    r.get("tied_embeddings", c.tied_embeddings, false);
    r.get("qkv_bias", c.qkv_bias, false);
    r.get("attn_softcap", c.attn_softcap, false);
    r.get("final_softcap", c.final_softcap, false);
    r.get("sliding_window", c.sliding_window, false);
    bool moe = c.arch == "qwen2moe";
    r.get("experts", c.experts, moe);
    r.get("experts_used", c.experts_used, moe);
    r.get("expert_ffn", c.expert_ffn, moe);
    r.get("shared_expert_ffn", c.shared_expert_ffn, moe);

    auto fail = [&](const std::string& why) { throw Error(file.string() + ": " + why); };
    if (!c.hidden || !c.layers || !c.heads || !c.kv_heads || !c.head_dim || !c.ffn)
        fail("hidden, layers, heads, kv_heads, head_dim and ffn must be positive");
    // Bounds well above any real model, so that a typo cannot fill the disk.
    for (auto [key, v, max] : {std::tuple{"hidden", c.hidden, 1u << 17}, std::tuple{"layers", c.layers, 1024u},
                               std::tuple{"heads", c.heads, 1024u}, std::tuple{"kv_heads", c.kv_heads, 1024u},
                               std::tuple{"head_dim", c.head_dim, 2048u}, std::tuple{"ffn", c.ffn, 1u << 19},
                               std::tuple{"vocab", c.vocab, 1u << 22}, std::tuple{"context", c.context, 1u << 24},
                               std::tuple{"experts", c.experts, 1024u}, std::tuple{"expert_ffn", c.expert_ffn, 1u << 19},
                               std::tuple{"shared_expert_ffn", c.shared_expert_ffn, 1u << 19}})
        if (v > max) fail(std::string(key) + " = " + std::to_string(v) + " is above the limit " + std::to_string(max));
    const double per_layer = 2.0 * c.hidden * (double(c.heads) + c.kv_heads) * c.head_dim +
                             3.0 * c.hidden * (moe ? double(c.experts) * c.expert_ffn + c.shared_expert_ffn : double(c.ffn));
    const double params = double(c.layers) * per_layer + 2.0 * double(c.vocab) * c.hidden;
    if (params > 1e12) fail("the card describes " + std::to_string(params / 1e9) + " billion parameters; the limit is 1000");
    if (c.heads % c.kv_heads) fail("heads must be a multiple of kv_heads");
    if (c.vocab < 259) fail("vocab must hold at least the 3 special and 256 byte tokens (259)");
    if (moe && (c.experts_used == 0 || c.experts_used > c.experts)) fail("experts_used must be in [1, experts]");
    return c;
}

}  // namespace profinfer
