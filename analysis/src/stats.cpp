#include "profinfer/stats.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/store.h"
#include "profinfer/trace_graph.h"

namespace profinfer {

namespace {

std::string cell(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) {
        char b[32];
        std::snprintf(b, sizeof b, "%.3f", v.get<double>());
        return b;
    }
    return v.dump();
}

// Per-thread records joined to their node, over decode calls and prefill alike:
// op name is the node's op; time is the thread's compute, wait what follows it.
const char* kOpsJoined =
    "SELECT o.*, n.op AS op, n.name AS name FROM ops o JOIN nodes n ON n.graph_seq = o.graph_seq AND n.tensor = o.tensor";

}  // namespace

std::string Table::to_text() const {
    std::vector<size_t> w(columns.size());
    for (size_t c = 0; c < columns.size(); ++c) w[c] = columns[c].size();
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], cell(r[c]).size());
    std::ostringstream o;
    auto line = [&](auto get) {
        for (size_t c = 0; c < columns.size(); ++c) {
            std::string s = get(c);
            o << (c ? "  " : "") << s << std::string(w[c] - s.size(), ' ');
        }
        o << "\n";
    };
    line([&](size_t c) { return columns[c]; });
    for (const auto& r : rows) line([&](size_t c) { return cell(r[c]); });
    return o.str();
}

std::string Table::to_csv() const {
    std::ostringstream o;
    for (size_t c = 0; c < columns.size(); ++c) o << (c ? "," : "") << columns[c];
    o << "\n";
    for (const auto& r : rows) {
        for (size_t c = 0; c < r.size(); ++c) {
            std::string s = cell(r[c]);
            if (s.find_first_of(",\"") != std::string::npos) {
                std::string q = "\"";
                for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
                s = q + "\"";
            }
            o << (c ? "," : "") << s;
        }
        o << "\n";
    }
    return o.str();
}

nlohmann::json Table::to_json() const {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : rows) {
        nlohmann::json obj;
        for (size_t c = 0; c < columns.size(); ++c) obj[columns[c]] = r[c];
        a.push_back(obj);
    }
    return a;
}

Table stats_table(const std::filesystem::path& path, const std::string& by) {
    store::Database db(path, store::Database::Mode::ReadOnly);
    auto rows = [&](const std::vector<std::string>& cols, const std::string& sql) {
        Table t{cols, {}};
        store::Statement st(db.handle(), sql.c_str());
        while (st.step()) {
            std::vector<nlohmann::json> r;
            for (size_t c = 0; c < cols.size(); ++c) {
                if (st.column_is_null(int(c))) {
                    r.push_back(nullptr);
                } else {
                    // Integers stay integers; REALs and TEXT keep their kind.
                    std::string text = st.column_text(int(c));
                    double d = st.column_double(int(c));
                    int64_t i = st.column_int(int(c));
                    if (text == std::to_string(i))
                        r.push_back(i);
                    else if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-') &&
                             text.find_first_not_of("0123456789.-eE+") == std::string::npos)
                        r.push_back(d);
                    else
                        r.push_back(text);
                }
            }
            t.rows.push_back(std::move(r));
        }
        return t;
    };
    const std::string ops = std::string("(") + kOpsJoined + ")";
    // The critical-path time of a node: first thread start to last thread compute end.
    const std::string node_times =
        "(SELECT o.graph_seq, o.tensor, n.op, n.name, min(o.start_ns) AS s, max(o.compute_end_ns) AS e, "
        "max(o.end_ns) AS w FROM ops o JOIN nodes n ON n.graph_seq = o.graph_seq AND n.tensor = o.tensor "
        "GROUP BY o.graph_seq, o.tensor)";
    if (by == "op-type") {
        return rows({"op", "count", "total_ms", "mean_ms", "share_pct"},
                    "WITH t AS " + node_times +
                        " SELECT op, count(*), sum(e - s) / 1e6, avg(e - s) / 1e6, "
                        "100.0 * sum(e - s) / (SELECT sum(e - s) FROM t) FROM t GROUP BY op ORDER BY sum(e - s) DESC");
    }
    if (by == "op") {
        // Operator names without the layer suffix: ffn_out-3 → ffn_out.
        return rows({"name", "op", "count", "total_ms", "mean_ms", "share_pct"},
                    "WITH t AS " + node_times +
                        " , u AS (SELECT CASE WHEN name GLOB '*-[0-9]*' AND rtrim(name, '0123456789') GLOB '*-' "
                        "THEN rtrim(rtrim(name, '0123456789'), '-') ELSE name END AS base, op, s, e FROM t) "
                        "SELECT base, op, count(*), sum(e - s) / 1e6, avg(e - s) / 1e6, "
                        "100.0 * sum(e - s) / (SELECT sum(e - s) FROM u) FROM u GROUP BY base, op ORDER BY sum(e - s) DESC");
    }
    if (by == "token") {
        // Per call: its duration and what the operators inside it took; KQ and KQV are the
        // attention MatMuls whose cost grows with the context (paper Fig. 9).
        return rows({"call", "phase", "n_tokens", "ms", "op_ms", "mul_mat_ms", "kq_kqv_ms", "mul_mat_share_pct"},
                    "WITH t AS " + node_times +
                        ", c AS (SELECT row_number() OVER (ORDER BY start_ns) - 1 AS call, phase, n_tokens, start_ns, end_ns "
                        "FROM tokens) "
                        "SELECT c.call, c.phase, c.n_tokens, (c.end_ns - c.start_ns) / 1e6, "
                        "coalesce(sum(t.e - t.s), 0) / 1e6, "
                        "coalesce(sum(CASE WHEN t.op IN ('MUL_MAT', 'MUL_MAT_ID') THEN t.e - t.s END), 0) / 1e6, "
                        "coalesce(sum(CASE WHEN t.name GLOB 'kq-*' OR t.name GLOB 'kqv-*' THEN t.e - t.s END), 0) / 1e6, "
                        "100.0 * coalesce(sum(CASE WHEN t.op IN ('MUL_MAT', 'MUL_MAT_ID') THEN t.e - t.s END), 0) / "
                        "max(1, sum(t.e - t.s)) "
                        "FROM c LEFT JOIN t ON t.s >= c.start_ns AND t.e <= c.end_ns GROUP BY c.call ORDER BY c.call");
    }
    if (by == "thread") {
        // Paper Fig. 6: per op type and thread index, compute and wait time.
        return rows({"op", "ith", "compute_ms", "wait_ms", "wait_share_pct"},
                    "SELECT op, ith, sum(compute_end_ns - start_ns) / 1e6, sum(end_ns - compute_end_ns) / 1e6, "
                    "100.0 * sum(end_ns - compute_end_ns) / max(1, sum(end_ns - start_ns)) FROM " + ops +
                        " GROUP BY op, ith ORDER BY op, ith");
    }
    if (by == "expert") {
        // Per MoE node name, layer and expert: activations, and the mean reuse distance (in
        // llama_decode calls since the expert was last used by the same node).
        return rows({"layer", "node", "expert", "activations", "mean_reuse_distance"},
                    "WITH c AS (SELECT row_number() OVER (ORDER BY start_ns) - 1 AS call, start_ns, end_ns FROM tokens), "
                    "x AS (SELECT DISTINCT e.layer, rtrim(rtrim(e.name, '0123456789'), '-') AS node, e.expert, c.call "
                    "FROM experts e JOIN graphs g ON g.seq = e.graph_seq JOIN c ON g.start_ns BETWEEN c.start_ns AND c.end_ns), "
                    "d AS (SELECT layer, node, expert, call - lag(call) OVER (PARTITION BY layer, node, expert ORDER BY call) "
                    "AS dist FROM x) "
                    "SELECT layer, node, expert, count(*), avg(dist) FROM d GROUP BY layer, node, expert "
                    "ORDER BY layer, node, expert");
    }
    throw Error("--by is op-type, op, token, thread or expert, not '" + by + "'");
}

}  // namespace profinfer
