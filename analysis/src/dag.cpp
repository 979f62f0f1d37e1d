#include "profinfer/dag.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/output_file.h"
#include "profinfer/subprocess.h"
#include "profinfer/text_escape.h"

namespace fs = std::filesystem;

namespace profinfer {

Dag Dag::build(TraceGraphs& trace, int call) {
    Dag d;
    d.call = call;
    d.nodes = trace.nodes(call);
    d.counter_names = trace.counter_names();
    std::map<uint64_t, std::vector<int>> producers;  // tensor address → nodes writing it
    for (const auto& n : d.nodes) {
        producers[n.tensor].push_back(n.index);
        // SET_ROWS into a view of the KV cache produces the cache's contents.
        if (n.view_src) producers[n.view_src].push_back(n.index);
    }
    std::set<std::pair<int, int>> edges;
    for (const auto& n : d.nodes) {
        for (const auto& s : n.srcs) {
            // A view is computed by nobody: its data comes from the tensor it looks into.
            for (uint64_t t : {s.tensor, s.view_src}) {
                if (!t) continue;
                auto it = producers.find(t);
                if (it == producers.end()) continue;
                std::vector<int> before;
                for (int p : it->second)
                    if (p < n.index) before.push_back(p);
                if (before.empty()) continue;
                if (before.size() > 1) ++d.ambiguous_;
                edges.insert({before.back(), n.index});
                break;
            }
        }
    }
    d.edges.assign(edges.begin(), edges.end());
    return d;
}

Dag Dag::filtered(std::optional<int> layer, const std::string& block) const {
    if (!layer && block.empty()) return *this;
    if (!block.empty() && block != "attn" && block != "ffn") throw Error("--block is attn or ffn, not '" + block + "'");
    int L = layer.value_or(-1);
    if (!layer) {  // a block without a layer: the middle layer
        int max_layer = -1;
        for (const auto& n : nodes) max_layer = std::max(max_layer, n.layer);
        L = max_layer / 2;
    }
    // The attention block ends at the residual ADD that closes it: ffn_inp-L in LLaMA, Qwen
    // and the MoE models, sa_out-L in Gemma 2 (after its post-attention norm), so every
    // architecture's block has the same boundaries (attention norm → that ADD).
    const std::string L_ = "-" + std::to_string(L);
    int first = -1, last = -1, split_at = -1;
    for (const auto& n : nodes)
        if (n.layer == L) {
            if (first < 0) first = n.index;
            last = n.index;
            if (split_at < 0 && (n.name == "ffn_inp" + L_ || n.name == "sa_out" + L_)) split_at = n.index;
        }
    if (first < 0) throw Error("no nodes of layer " + std::to_string(L) + " in this call");
    int from = first, to = last;
    if (block == "attn") to = split_at >= 0 ? split_at : last;
    if (block == "ffn") from = split_at >= 0 ? split_at : first;
    Dag out;
    out.call = call;
    out.counter_names = counter_names;
    std::map<int, int> remap;
    for (const auto& n : nodes)
        if (n.index >= from && n.index <= to) {
            remap[n.index] = int(out.nodes.size());
            out.nodes.push_back(n);
        }
    for (auto [a, b] : edges)
        if (remap.count(a) && remap.count(b)) out.edges.push_back({remap[a], remap[b]});
    for (auto& n : out.nodes) {
        n.index = remap[n.index];
        n.fused_with = remap.count(n.fused_with) ? remap[n.fused_with] : -1;
    }
    return out;
}

bool Dag::acyclic() const {
    std::vector<std::vector<int>> out(nodes.size());
    std::vector<int> indeg(nodes.size(), 0);
    for (auto [a, b] : edges) out[a].push_back(b), ++indeg[b];
    std::vector<int> ready;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (!indeg[i]) ready.push_back(int(i));
    size_t seen = 0;
    while (!ready.empty()) {
        int v = ready.back();
        ready.pop_back();
        ++seen;
        for (int w : out[v])
            if (--indeg[w] == 0) ready.push_back(w);
    }
    return seen == nodes.size();
}

namespace {

std::string shape(const std::array<int64_t, 4>& ne) {
    std::string s = "[" + std::to_string(ne[0]);
    int last = 3;
    while (last > 1 && ne[last] == 1) --last;
    for (int d = 1; d <= last; ++d) s += "," + std::to_string(ne[d]);
    return s + "]";
}

// Light yellow → dark red on a log scale over [lo, hi].
std::string heat(double v, double lo, double hi) {
    double x = (v <= 0 || hi <= lo) ? 0.0 : (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    x = std::clamp(x, 0.0, 1.0);
    int r = int(255 - 75 * x), g = int(245 - 215 * x), b = int(200 - 170 * x);
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
    return buf;
}

double bandwidth_gbs(const Node& n) { return n.time_ms() > 0 ? n.bytes() / (n.time_ms() * 1e6) : 0.0; }

}  // namespace

std::string Dag::to_dot(Colour colour) const {
    auto value = [&](const Node& n) { return colour == Colour::Time ? n.time_ms() : bandwidth_gbs(n); };
    double lo = 0, hi = 0;
    for (const auto& n : nodes) {
        double v = value(n);
        if (v <= 0) continue;
        lo = lo == 0 ? v : std::min(lo, v);
        hi = std::max(hi, v);
    }
    std::ostringstream o;
    o << "digraph profdag {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", "
         "fontsize=10];\n";
    o << "  label=\"llama_decode call " << call << " — colour: "
      << (colour == Colour::Time ? "time (ms, log scale)" : "bandwidth (GB/s, log scale)") << " " << lo << " … " << hi
      << "\";\n";
    for (const auto& n : nodes) {
        char t[64];
        std::snprintf(t, sizeof t, "%.3f ms", n.time_ms());
        char bw[64];  // "≤": the bytes are an upper bound (Traffic::estimate)
        std::snprintf(bw, sizeof bw, "%s%.2f GB/s", n.traffic().estimate ? "≤ " : "", bandwidth_gbs(n));
        o << "  n" << n.index << " [label=\"" << dot_escape(n.op) << " " << n.index << "\\n" << dot_escape(n.name) << "\\n"
          << shape(n.ne) << "\\n"
          << (n.threads.empty() ? std::string("fused with ") + std::to_string(n.fused_with) : std::string(t) + ", " + bw)
          << "\", fillcolor=\"" << heat(value(n), lo, hi) << "\"];\n";
    }
    for (auto [a, b] : edges) o << "  n" << a << " -> n" << b << ";\n";
    o << "}\n";
    return o.str();
}

nlohmann::json Dag::to_json() const {
    nlohmann::json j;
    j["call"] = call;
    j["nodes"] = nlohmann::json::array();
    for (const auto& n : nodes) {
        nlohmann::json c = nlohmann::json::object();
        for (int k = 0; k < kCounterSlots; ++k)
            if (!counter_names[k].empty()) {
                auto v = n.counter(k);
                c[counter_names[k]] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
            }
        j["nodes"].push_back({{"id", n.index},
                              {"name", n.name},
                              {"op", n.op},
                              {"type", n.type},
                              {"ne", n.ne},
                              {"layer", n.layer},
                              {"time_ms", n.time_ms()},
                              {"bytes", n.bytes()},
                              {"bytes_are", n.traffic().estimate ? "upper bound" : "moved"},
                              {"bandwidth_gbs", bandwidth_gbs(n)},
                              {"threads", n.threads.size()},
                              {"fused_with", n.fused_with},
                              {"counters", c}});
    }
    j["edges"] = edges;
    return j;
}

std::string render_svg(const std::string& dot) {
    ProcessResult r = run_process({"dot", "-Tsvg"}, dot);
    if (r.status != 0 || r.out.find("<svg") == std::string::npos)
        throw Error("graphviz 'dot' failed to render the DAG (exit status " + std::to_string(r.status) +
                    (r.status == 127 ? ": is graphviz installed?" : "") + ")");
    return r.out;
}

void Dag::write(const fs::path& out, Colour colour, const fs::path& source) const {
    const std::string ext = out.extension().string();
    const std::vector<fs::path> from = source.empty() ? std::vector<fs::path>{} : std::vector<fs::path>{source};
    if (ext == ".json")
        OutputFile::write(out, json_text(to_json(), 1) + "\n", from);
    else if (ext == ".dot")
        OutputFile::write(out, to_dot(colour), from);
    else if (ext == ".svg")
        OutputFile::write(out, render_svg(to_dot(colour)), from);
    else
        throw Error("write the DAG as .dot, .svg or .json, not '" + ext + "'");
}

}  // namespace profinfer
