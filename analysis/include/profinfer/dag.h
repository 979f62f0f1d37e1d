#pragma once
// ProfDAG (paper §4.1, Algorithm 1): the operator graph of one decode iteration rebuilt
// from the trace — a node per operator, an edge from the operator that produced each
// source (through views to the tensor they look into); weights and constants, produced
// by no operator, get no edge.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "profinfer/trace_graph.h"

namespace profinfer {

struct Dag {
    std::vector<Node> nodes;
    std::vector<std::pair<int, int>> edges;  // (producer index, consumer index) into nodes
    std::vector<std::string> counter_names;
    int call = 0;

    // Algorithm 1 over call CALL of the trace.
    static Dag build(TraceGraphs& trace, int call);
    // The nodes of one transformer block: LAYER, and BLOCK "attn" (from the attention norm
    // up to the residual ADD that closes it: ffn_inp-L, or sa_out-L in Gemma 2) or "ffn"
    // (from there to l_out-L), or the whole layer.
    Dag filtered(std::optional<int> layer, const std::string& block) const;

    bool acyclic() const;
    // Sources resolved to more than one candidate producer (must be none).
    int ambiguous_sources() const { return ambiguous_; }

    enum class Colour { Time, Bandwidth };
    std::string to_dot(Colour colour) const;
    nlohmann::json to_json() const;
    // Writes OUT as .dot, .json or .svg (graphviz dot), chosen by its extension.
    // SOURCE: the trace it was built from (the output gets no wider permissions).
    void write(const std::filesystem::path& out, Colour colour, const std::filesystem::path& source = {}) const;

private:
    int ambiguous_ = 0;
};

// Graphviz's SVG of a DOT text (dot -Tsvg, run without a shell).
std::string render_svg(const std::string& dot);

}  // namespace profinfer
