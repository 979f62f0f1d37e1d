#pragma once
// Reads the performance models `profinfer fit` writes (models.json, schema
// "profinfer.models" version 1, docs/models.md) and answers a scheduler's questions:
// how long will this MatMul take on backend X, which backend should run it, how fast will
// this model decode. Header-only; needs the C++17 standard library and nlohmann/json only.
//
//   #include "profinfer/perf_models_reader.hpp"
//   auto models = profinfer::perf::Models::load("results/host/models/models.json");
//   std::optional<double> us = models.matmul_us("cpu", "q4_0", 2, 8192, 1, 2048);
//
// A MatMul is given as its M (output features), N (tokens in the batch), K (input
// features) and H (remaining dimensions, 1 for weight MatMuls). Times are microseconds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace profinfer::perf {

inline constexpr const char* kSchema = "profinfer.models";
inline constexpr int kSchemaVersion = 1;

// One weight MatMul of a model's decode step: its shape and how often a token runs it.
struct MatMulShape {
    std::string name;
    int64_t m = 0, k = 0;
    int per_token = 1;
};

// A MatMul's batch class, the models' regimes: "n=1" (one token: the weight streamed once
// per token — decode, and a prompt's last-token MatMuls) or "n>1" (reused across tokens).
inline std::string batch_class(int64_t n) { return n == 1 ? "n=1" : "n>1"; }

class Models {
public:
    explicit Models(nlohmann::json j) : j_(std::move(j)) {
        if (j_.value("schema", "") != kSchema) throw std::runtime_error("not a profinfer models file (schema)");
        if (j_.value("version", 0) != kSchemaVersion)
            throw std::runtime_error("models file version " + std::to_string(j_.value("version", 0)) + ", this reader reads " +
                                     std::to_string(kSchemaVersion));
    }
    static Models load(const std::string& path) {
        std::ifstream in(path);
        if (!in) throw std::runtime_error("cannot open " + path);
        try {
            return Models(nlohmann::json::parse(in));
        } catch (const nlohmann::json::exception& e) {
            throw std::runtime_error(path + ": " + e.what());
        }
    }
    const nlohmann::json& json() const { return j_; }

    // The MatMul model entry for a backend, weight type, thread count and batch size, or
    // nullptr. N = 1 and N > 1 are separate regimes (a weight streamed once per token, or
    // reused across the batch's tokens).
    const nlohmann::json* matmul_entry(const std::string& backend, const std::string& type, int threads, int64_t n) const {
        const std::string batch = batch_class(n);
        for (const auto& e : list("matmul"))
            if (e.value("backend", "") == backend && e.value("type", "") == type && e.value("threads", 0) == threads &&
                e.value("batch", "") == batch)
                return &e;
        return nullptr;
    }

    // Predicted time of one MatMul by the entry's chosen model ("use": linear or roofline).
    std::optional<double> matmul_us(const std::string& backend, const std::string& type, int threads, int64_t m, int64_t n,
                                    int64_t k, int64_t h = 1) const {
        const nlohmann::json* e = matmul_entry(backend, type, threads, n);
        if (!e) return std::nullopt;
        return evaluate(*e, e->value("use", "linear"), m, n, k, h);
    }

    // The model of KIND ("linear" or "roofline") of an entry at a shape.
    static double evaluate(const nlohmann::json& e, const std::string& kind, int64_t m, int64_t n, int64_t k, int64_t h) {
        const double mnkh = double(m) * double(n) * double(k) * double(h);
        if (kind == "roofline") {
            const auto& r = e.at("roofline");
            const double bytes = double(m) * double(k) * r.at("weight_bytes_per_elem").get<double>() +
                                 4.0 * double(k) * double(n) * double(h) + 4.0 * double(m) * double(n) * double(h);
            return std::max(2.0 * mnkh / (r.at("gops").get<double>() * 1e3), bytes / (r.at("gbs").get<double>() * 1e3));
        }
        const auto& l = e.at("linear");
        return l.at("intercept_us").get<double>() + l.at("us_per_mnkh").get<double>() * mnkh;
    }

    // Among CANDIDATES (every backend with a model when empty): the one predicted fastest
    // for this MatMul, with its time; nullopt when none has a model.
    std::optional<std::pair<std::string, double>> best_backend(const std::string& type, int threads, int64_t m, int64_t n,
                                                               int64_t k, int64_t h = 1,
                                                               std::vector<std::string> candidates = {}) const {
        if (candidates.empty())
            for (const auto& e : list("matmul"))
                if (std::find(candidates.begin(), candidates.end(), e.value("backend", "")) == candidates.end())
                    candidates.push_back(e.value("backend", ""));
        std::optional<std::pair<std::string, double>> best;
        for (const auto& b : candidates)
            if (auto t = matmul_us(b, type, threads, m, n, k, h); t && (!best || *t < best->second)) best = {{b, *t}};
        return best;
    }

    // Decode time per token (ms) of a dense model: its weight MatMuls by the MatMul model
    // plus everything else by the decode entry's per-layer line; nullopt without models.
    std::optional<double> decode_ms(const std::vector<MatMulShape>& shapes, int layers, const std::string& backend,
                                    const std::string& type, int threads) const {
        const nlohmann::json* d = nullptr;
        for (const auto& e : list("decode"))
            if (e.value("backend", "") == backend && e.value("type", "") == type && e.value("threads", 0) == threads) d = &e;
        if (!d) return std::nullopt;
        double us = 0;
        for (const auto& s : shapes) {
            auto t = matmul_us(backend, type, threads, s.m, 1, s.k);
            if (!t) return std::nullopt;
            us += *t * s.per_token;
        }
        const auto& o = d->at("other_ms");
        return us / 1e3 + o.at("intercept").get<double>() + o.at("per_layer").get<double>() * layers;
    }

    // The decode model in the machine's terms for a backend and weight type ("decode_roofs",
    // fitted on the decode-speed study), or nullptr.
    const nlohmann::json* decode_roofs_entry(const std::string& backend, const std::string& type) const {
        for (const auto& e : list("decode_roofs"))
            if (e.value("backend", "") == backend && e.value("type", "") == type) return &e;
        return nullptr;
    }

    // A decode token's terms in the machine's units (ms at coefficient 1): the weight bytes it
    // streams over the triad bandwidth, its MatMul operations (2 per multiply-add) over the
    // peak of their kind, its layers, and 1 (the token's own fixed work). What belongs to the
    // model (shapes, layers, bytes per weight) and what to the machine (TRIAD_GBS, PEAK_GOPS at
    // the thread count: bench-machine's roofs) meet here only.
    static std::vector<double> decode_terms(const std::vector<MatMulShape>& shapes, int layers, double weight_bytes_per_elem,
                                            double triad_gbs, double peak_gops) {
        double bytes = 0, ops = 0;
        for (const auto& s : shapes) {
            bytes += double(s.m) * double(s.k) * weight_bytes_per_elem * s.per_token;
            ops += 2.0 * double(s.m) * double(s.k) * s.per_token;
        }
        return {bytes / (triad_gbs * 1e6), ops / (peak_gops * 1e6), double(layers), 1.0};
    }

    struct DecodeEstimate {
        double ms = 0, lo_ms = 0, hi_ms = 0;  // per token, with the fit's 95 % prediction interval
    };
    // Decode time per token (ms) of a dense model on a machine with roofs TRIAD_GBS and
    // PEAK_GOPS (of the entry's compute_kind) at the thread count, by the decode_roofs entry:
    // Σ coefficient × term; the interval multiplies by exp(±log_half_width) (the held-out
    // models' errors, so never ≤ 0). nullopt without an entry or with a roof ≤ 0.
    std::optional<DecodeEstimate> decode_ms_on(const std::vector<MatMulShape>& shapes, int layers, const std::string& backend,
                                               const std::string& type, double triad_gbs, double peak_gops) const {
        const nlohmann::json* e = decode_roofs_entry(backend, type);
        if (!e || !(triad_gbs > 0) || !(peak_gops > 0)) return std::nullopt;
        const auto t = decode_terms(shapes, layers, e->at("weight_bytes_per_elem").get<double>(), triad_gbs, peak_gops);
        const auto& c = e->at("coef");
        double ms = 0;
        for (size_t i = 0; i < t.size(); ++i) ms += c.at(i).get<double>() * t[i];
        if (!(ms > 0)) return std::nullopt;
        const double half = e->at("log_half_width").get<double>();
        return DecodeEstimate{ms, ms * std::exp(-half), ms * std::exp(half)};
    }

    // What CTX tokens of KV cache add to a decode step (ms) of a model with LAYERS layers of
    // HEADS query heads of HEAD_DIM, flash attention FA ("on" or "off"); nullopt without a
    // model for them.
    std::optional<double> context_ms(const std::string& backend, const std::string& type, int threads, const std::string& fa,
                                     int layers, int heads, int head_dim, double ctx) const {
        for (const auto& e : list("attention"))
            if (e.value("backend", "") == backend && e.value("type", "") == type && e.value("threads", 0) == threads &&
                e.value("fa", "") == fa)
                return e.at("ms_per_ctx_per_head_dim_layer").get<double>() * double(layers) * heads * head_dim * ctx;
        return std::nullopt;
    }

private:
    // The array under KEY (an empty one when absent), by reference: entries are returned
    // as pointers into the document.
    const nlohmann::json& list(const char* key) const {
        static const nlohmann::json empty = nlohmann::json::array();
        auto it = j_.find(key);
        return it == j_.end() ? empty : *it;
    }
    nlohmann::json j_;
};

}  // namespace profinfer::perf
