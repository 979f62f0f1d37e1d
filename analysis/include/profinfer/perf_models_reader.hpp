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

    // The roofs a decode model's terms divide by, at one thread count (bench-machine's).
    struct DecodeRoofs {
        double triad_gbs = 0;          // memory bandwidth (triad)
        double peak_gops = 0;          // the vector unit's peak for the weight type's arithmetic
        double kernel_stream_gbs = 0;  // llama.cpp's decode MatMul kernel streaming the type's weights
        // The lowest and highest kernel_stream_gbs bench-machine saw (its allocations): the
        // prediction's interval widens by them (0: not known).
        double kernel_stream_gbs_lo = 0, kernel_stream_gbs_hi = 0;
        // The kernel's rate for smaller weights (bench-machine's 2048 × 2048 and 2048 × 256 classes;
        // kernel_stream_gbs is its 2048 × 8192 class); 0: not measured, kernel_stream_gbs for all.
        double kernel_stream_mid_gbs = 0, kernel_stream_small_gbs = 0;

        // As models.json keeps them (a decode_roofs entry's fitted_on roofs, predict's machine):
        // the kernel's rates only where KERNEL (a model in the kernel's terms).
        nlohmann::json to_json(bool kernel) const {
            nlohmann::json j{{"triad_gbs", triad_gbs}, {"peak_gops", peak_gops}};
            if (kernel)
                j.update({{"kernel_stream_gbs", kernel_stream_gbs}, {"kernel_stream_gbs_lo", kernel_stream_gbs_lo},
                          {"kernel_stream_gbs_hi", kernel_stream_gbs_hi}, {"kernel_stream_mid_gbs", kernel_stream_mid_gbs},
                          {"kernel_stream_small_gbs", kernel_stream_small_gbs}});
            return j;
        }
        static DecodeRoofs from_json(const nlohmann::json& j) {
            return {j.value("triad_gbs", 0.0),          j.value("peak_gops", 0.0),
                    j.value("kernel_stream_gbs", 0.0),  j.value("kernel_stream_gbs_lo", 0.0),
                    j.value("kernel_stream_gbs_hi", 0.0), j.value("kernel_stream_mid_gbs", 0.0),
                    j.value("kernel_stream_small_gbs", 0.0)};
        }

        // The kernel's streaming rate for a weight of ELEMENTS (M × K): interpolated in
        // log(elements) between the classes measured (2048 × 256, 2048 × 2048, 2048 × 8192),
        // the nearest class's beyond them.
        double kernel_stream_for(double elements) const {
            std::vector<std::pair<double, double>> c;  // (log elements, GB/s)
            if (kernel_stream_small_gbs > 0) c.push_back({std::log(2048.0 * 256), kernel_stream_small_gbs});
            if (kernel_stream_mid_gbs > 0) c.push_back({std::log(2048.0 * 2048), kernel_stream_mid_gbs});
            c.push_back({std::log(2048.0 * 8192), kernel_stream_gbs});
            const double x = std::log(std::max(1.0, elements));
            if (x <= c.front().first) return c.front().second;
            for (size_t i = 1; i < c.size(); ++i)
                if (x <= c[i].first)
                    return c[i - 1].second + (c[i].second - c[i - 1].second) * (x - c[i - 1].first) / (c[i].first - c[i - 1].first);
            return c.back().second;
        }
    };

    // The weight bytes a decode token streams through its MatMuls.
    static double decode_weight_bytes(const std::vector<MatMulShape>& shapes, double weight_bytes_per_elem) {
        double bytes = 0;
        for (const auto& s : shapes) bytes += double(s.m) * double(s.k) * weight_bytes_per_elem * s.per_token;
        return bytes;
    }

    // A decode token's terms in the machine's units (ms at coefficient 1), by name: "stream"
    // the weight bytes it streams over the triad bandwidth, "ops" its MatMul operations (2 per
    // multiply-add) over the peak of their kind, "kernel_stream" each weight's bytes over the rate
    // llama.cpp's own kernel streams a weight of its size at, "per_layer_ms" its layers, "per_token_ms" 1 (the
    // token's own fixed work). What belongs to the model (shapes, layers, bytes per weight) and
    // what to the machine (ROOFS at the thread count) meet here only. nullopt when a term needs a
    // roof that is not there (≤ 0) or is not known.
    static std::optional<std::vector<double>> decode_terms(const std::vector<MatMulShape>& shapes, int layers, double weight_bytes_per_elem,
                                                           const std::vector<std::string>& names, const DecodeRoofs& roofs) {
        const double bytes = decode_weight_bytes(shapes, weight_bytes_per_elem);
        double ops = 0;
        for (const auto& s : shapes) ops += 2.0 * double(s.m) * double(s.k) * s.per_token;
        std::vector<double> t;
        for (const auto& n : names) {
            const double roof = n == "stream" ? roofs.triad_gbs : n == "ops" ? roofs.peak_gops : n == "kernel_stream" ? roofs.kernel_stream_gbs : 1;
            if (!(roof > 0)) return std::nullopt;
            if (n == "stream") t.push_back(bytes / (roof * 1e6));
            else if (n == "kernel_stream") {  // each weight at its size class's rate
                double ms = 0;
                for (const auto& s : shapes)
                    ms += double(s.m) * double(s.k) * weight_bytes_per_elem * s.per_token /
                          (roofs.kernel_stream_for(double(s.m) * double(s.k)) * 1e6);
                t.push_back(ms);
            }
            else if (n == "ops") t.push_back(ops / (roof * 1e6));
            else if (n == "per_layer_ms") t.push_back(double(layers));
            else if (n == "per_token_ms") t.push_back(1.0);
            else return std::nullopt;
        }
        return t;
    }

    // The term names of a decode_roofs entry (entries written before they were named: the
    // triad and peak model).
    static std::vector<std::string> decode_term_names(const nlohmann::json& e) {
        if (e.contains("terms")) return e.at("terms").get<std::vector<std::string>>();
        return {"stream", "ops", "per_layer_ms", "per_token_ms"};
    }

    struct DecodeEstimate {
        double ms = 0, lo_ms = 0, hi_ms = 0;  // per token, with the fit's 95 % prediction interval
    };
    // Decode time per token (ms) of a dense model on a machine with ROOFS at the thread count, by
    // the decode_roofs entry: Σ coefficient × term; the interval multiplies by
    // exp(±log_half_width) (the held-out models' errors, so never ≤ 0), taken from the kernel's
    // lowest and highest measured rate where ROOFS has them (the roof's own spread). nullopt
    // without an entry or without a roof its terms need.
    std::optional<DecodeEstimate> decode_ms_on(const std::vector<MatMulShape>& shapes, int layers, const std::string& backend,
                                               const std::string& type, const DecodeRoofs& roofs) const {
        const nlohmann::json* e = decode_roofs_entry(backend, type);
        if (!e) return std::nullopt;
        const auto names = decode_term_names(*e);
        auto ms_at = [&](const DecodeRoofs& r) -> double {
            const auto t = decode_terms(shapes, layers, e->at("weight_bytes_per_elem").get<double>(), names, r);
            if (!t) return NAN;
            const auto& c = e->at("coef");
            double ms = 0;
            for (size_t i = 0; i < t->size(); ++i) ms += c.at(i).get<double>() * (*t)[i];
            return ms;
        };
        const double ms = ms_at(roofs);
        if (!(ms > 0)) return std::nullopt;
        double fast = ms, slow = ms;
        if (roofs.kernel_stream_gbs_lo > 0 && roofs.kernel_stream_gbs_hi >= roofs.kernel_stream_gbs_lo) {
            // Every size class moved by the large class's spread.
            auto scaled = [&](double gbs) {
                DecodeRoofs r = roofs;
                const double f = gbs / roofs.kernel_stream_gbs;
                r.kernel_stream_gbs *= f, r.kernel_stream_mid_gbs *= f, r.kernel_stream_small_gbs *= f;
                return ms_at(r);
            };
            fast = std::min(ms, scaled(roofs.kernel_stream_gbs_hi));
            slow = std::max(ms, scaled(roofs.kernel_stream_gbs_lo));
        }
        const double half = e->at("log_half_width").get<double>();
        return DecodeEstimate{ms, fast * std::exp(-half), slow * std::exp(half)};
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
