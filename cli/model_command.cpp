#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "profinfer/model_cache.h"
#include "profinfer/model_card.h"
#include "profinfer/synth.h"
#include "subcommands.h"

namespace profinfer::cli {

namespace {

// A one-line progress bar on a terminal; a line per 10 % otherwise (logs, CI).
class ProgressBar {
public:
    explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO)) {}
    void operator()(uint64_t done, uint64_t total) {
        int pct = total ? int(done * 100 / total) : 100;
        if (tty_) {
            if (pct == last_ && done != total) return;
            int filled = pct * 30 / 100;
            std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %.2f/%.2f GB", label_.c_str(), filled,
                         "##############################", 30 - filled, "", pct, done / 1e9, total / 1e9);
            if (done == total) std::fputc('\n', stderr);
        } else if (pct / 10 != last_ / 10 || (done == total && last_ != 100)) {
            std::fprintf(stderr, "%s %d%% (%.2f/%.2f GB)\n", label_.c_str(), pct, done / 1e9, total / 1e9);
        }
        last_ = pct;
    }

private:
    std::string label_;
    bool tty_;
    int last_ = -1;
};

}  // namespace

void add_model(CLI::App& app, std::function<int()>& action) {
    auto* model = app.add_subcommand("model", "Model cards and synthetic GGUF models");
    model->require_subcommand(1);
    auto card = std::make_shared<std::string>();
    auto type = std::make_shared<std::string>("f16");
    auto scale = std::make_shared<std::string>("full");
    auto out = std::make_shared<std::string>();
    auto seed = std::make_shared<uint64_t>(42);
    auto routing = std::make_shared<std::string>("zipf:1");
    auto* synth = model->add_subcommand(
        "synth", "Write a GGUF model with a card's architecture and shapes and seeded random weights");
    synth->footer("Cards: " + ModelCard::cards_dir().string() +
                  "\nExample: profinfer model synth --card llama3.2-1b --type q4_0 -o llama-1b-q4_0.gguf");
    synth->add_option("--card", *card, "Card name (e.g. llama3.2-1b) or path to a .toml card")->required();
    synth->add_option("--type", *type, "Type of the weight matrices: f32, f16, bf16, q8_0, q4_0, q4_1")->capture_default_str();
    synth->add_option("--scale", *scale, "full (the real shapes) or tiny (the card's test variant)")
        ->check(CLI::IsMember({"full", "tiny"}))
        ->capture_default_str();
    synth->add_option("--seed", *seed, "Seed of the random weights")->capture_default_str();
    synth->add_option("--moe-routing", *routing,
                      "MoE cards: how tokens choose experts. zipf:S = each layer's experts chosen per token with a "
                      "Zipf popularity of exponent S (uniform = zipf:0), through a router and embeddings built for it; "
                      "random = random router weights (the hidden state forgets the token: the same experts every call)")
        ->check([](const std::string& v) {
            try {
                MoeRouting::parse(v);
                return std::string();
            } catch (const std::exception& e) {
                return std::string(e.what());
            }
        })
        ->capture_default_str();
    synth->add_option("-o,--output", *out, "GGUF file to write")->required();
    auto* path = model->add_subcommand("path", "Print where the studies keep (or will synthesise) a card's model in the "
                                               "cache ($PROFINFER_CACHE, else ~/.cache/profinfer)");
    path->add_option("--card", *card, "Card name (e.g. llama3.2-1b)")->required();
    path->add_option("--type", *type, "Type of the weight matrices")->capture_default_str();
    path->add_option("--scale", *scale, "full or tiny")->check(CLI::IsMember({"full", "tiny"}))->capture_default_str();
    path->add_option("--moe-routing", *routing, "MoE cards: the routing the file was made with")->capture_default_str();
    path->callback([&action, card, type, scale, routing] {
        action = [card, type, scale, routing] {
            std::cout << cached_model_path(*card, *type, *scale, *routing).string() << "\n";
            return 0;
        };
    });
    synth->callback([&action, card, type, scale, out, seed, routing] {
        action = [card, type, scale, out, seed, routing] {
            auto c = ModelCard::load(*card, ModelCard::parse_scale(*scale));
            SynthOptions o;
            o.type = gguf::parse_type(*type);
            o.seed = *seed;
            o.routing = MoeRouting::parse(*routing);
            ProgressBar bar("synth " + c.name + " " + *type);
            o.progress = [&bar](uint64_t d, uint64_t t) { bar(d, t); };
            uint64_t bytes = synthesise_model(c, o, *out);
            std::cerr << "wrote " << *out << " (" << bytes / 1e6 << " MB)\n";
            return 0;
        };
    });
}

}  // namespace profinfer::cli
