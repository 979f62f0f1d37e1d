#include "profinfer/stats.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "profinfer/error.h"
#include "profinfer/store.h"

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

std::string Table::formatted(const std::string& format) const {
    if (format == "csv") return to_csv();
    if (format == "json") return to_json().dump(1) + "\n";
    if (format == "table") return to_text();
    throw Error("--format is table, csv or json, not '" + format + "'");
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
    // Every quantity below is defined once, in the store's derived views
    // (store/src/derived.sql, docs/trace-store.md): node_times, calls, thread_parts,
    // expert_uses.
    if (by == "op-type") {
        return rows({"op", "count", "total_ms", "mean_ms", "share_pct"},
                    "SELECT op, count(*), sum(dur_ns) / 1e6, avg(dur_ns) / 1e6, "
                    "100.0 * sum(dur_ns) / (SELECT max(1, sum(dur_ns)) FROM node_times) "
                    "FROM node_times GROUP BY op ORDER BY sum(dur_ns) DESC");
    }
    if (by == "op") {
        return rows({"name", "op", "count", "total_ms", "mean_ms", "share_pct"},
                    "SELECT base, op, count(*), sum(dur_ns) / 1e6, avg(dur_ns) / 1e6, "
                    "100.0 * sum(dur_ns) / (SELECT max(1, sum(dur_ns)) FROM node_times) "
                    "FROM node_times GROUP BY base, op ORDER BY sum(dur_ns) DESC");
    }
    if (by == "token") {
        // Per call: its duration and what the operators inside it took; attention (KQ and
        // KQV, or FLASH_ATTN_EXT) is what grows with the context (paper Fig. 9).
        return rows({"call", "phase", "n_tokens", "ms", "op_ms", "mul_mat_ms", "attention_ms", "mul_mat_share_pct"},
                    "WITH t AS (SELECT call, sum(dur_ns) AS op, "
                    "sum(CASE WHEN op IN ('MUL_MAT', 'MUL_MAT_ID') THEN dur_ns ELSE 0 END) AS mm, "
                    "sum(CASE WHEN attention THEN dur_ns ELSE 0 END) AS attn FROM node_times GROUP BY call) "
                    "SELECT c.call, c.phase, c.n_tokens, c.dur_ns / 1e6, coalesce(t.op, 0) / 1e6, coalesce(t.mm, 0) / 1e6, "
                    "coalesce(t.attn, 0) / 1e6, 100.0 * coalesce(t.mm, 0) / max(1, coalesce(t.op, 0)) "
                    "FROM calls c LEFT JOIN t ON t.call = c.call ORDER BY c.call");
    }
    if (by == "thread") {
        // Paper Fig. 6: per op type and thread index, compute and wait time.
        return rows({"op", "ith", "compute_ms", "wait_ms", "wait_share_pct"},
                    "SELECT op, ith, sum(compute_ns) / 1e6, sum(wait_ns) / 1e6, "
                    "100.0 * sum(wait_ns) / max(1, sum(compute_ns + wait_ns)) FROM thread_parts "
                    "GROUP BY op, ith ORDER BY op, ith");
    }
    if (by == "expert") {
        // Per MoE node name, layer and expert: activations, and the mean reuse distance (in
        // llama_decode calls since the expert was last used by the same node).
        return rows({"layer", "node", "expert", "activations", "mean_reuse_distance"},
                    "WITH x AS (SELECT DISTINCT layer, base AS node, expert, call FROM expert_uses), "
                    "d AS (SELECT layer, node, expert, call - lag(call) OVER (PARTITION BY layer, node, expert ORDER BY call) "
                    "AS dist FROM x) "
                    "SELECT layer, node, expert, count(*), avg(dist) FROM d GROUP BY layer, node, expert "
                    "ORDER BY layer, node, expert");
    }
    throw Error("--by is op-type, op, token, thread or expert, not '" + by + "'");
}

}  // namespace profinfer
