#include "profinfer/diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "profinfer/error.h"
#include "profinfer/store.h"

namespace profinfer {

namespace {

struct Side {
    int64_t calls = 0;
    double total_ms = 0;
    // (level, name, op) → total ms, nodes
    std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, int64_t>> rows;
};

Side read_side(store::Database& db, const std::string& phase) {
    const auto& path = db.path();
    const std::string where = phase == "all" ? "" : " WHERE phase = '" + phase + "'";
    Side s;
    s.calls = db.scalar("SELECT count(*) FROM calls" + where);
    if (s.calls == 0) throw Error(path.string() + " has no " + (phase == "all" ? "" : phase + " ") + "calls to compare");
    store::Statement st(db.handle(), ("SELECT op, base, sum(dur_ns), count(*) FROM node_times" + where +
                                      " GROUP BY op, base").c_str());
    while (st.step()) {
        const double ms = st.column_int(2) / 1e6;
        const int64_t n = st.column_int(3);
        auto& t = s.rows[{"op-type", st.column_text(0), st.column_text(0)}];
        t.first += ms, t.second += n;
        auto& o = s.rows[{"op", st.column_text(1), st.column_text(0)}];
        o.first += ms, o.second += n;
        s.total_ms += ms;
    }
    return s;
}

}  // namespace

Table diff_table(store::Database& a_path, store::Database& b_path, const std::string& phase,
                 double threshold_pct) {
    if (phase != "decode" && phase != "prefill" && phase != "all")
        throw Error("--phase is decode, prefill or all, not '" + phase + "'");
    const Side a = read_side(a_path, phase), b = read_side(b_path, phase);
    std::set<std::tuple<std::string, std::string, std::string>> keys;
    for (const auto& [k, v] : a.rows) keys.insert(k);
    for (const auto& [k, v] : b.rows) keys.insert(k);
    struct Line {
        std::tuple<std::string, std::string, std::string> key;
        double a_ms, b_ms, a_share, b_share, a_n, b_n;
        bool in_a, in_b;
    };
    std::vector<Line> lines;
    for (const auto& k : keys) {
        auto ia = a.rows.find(k), ib = b.rows.find(k);
        Line l{k, 0, 0, 0, 0, 0, 0, ia != a.rows.end(), ib != b.rows.end()};
        if (l.in_a) {
            l.a_ms = ia->second.first / double(a.calls);
            l.a_share = a.total_ms > 0 ? 100.0 * ia->second.first / a.total_ms : 0;
            l.a_n = double(ia->second.second) / double(a.calls);
        }
        if (l.in_b) {
            l.b_ms = ib->second.first / double(b.calls);
            l.b_share = b.total_ms > 0 ? 100.0 * ib->second.first / b.total_ms : 0;
            l.b_n = double(ib->second.second) / double(b.calls);
        }
        lines.push_back(l);
    }
    // op types first, then operators; within each the largest change in time first.
    std::sort(lines.begin(), lines.end(), [](const Line& x, const Line& y) {
        if (std::get<0>(x.key) != std::get<0>(y.key)) return std::get<0>(x.key) == "op-type";
        return std::abs(x.b_ms - x.a_ms) > std::abs(y.b_ms - y.a_ms);
    });
    Table t{{"level", "name", "op", "a_ms_per_call", "b_ms_per_call", "change_pct", "a_share_pct", "b_share_pct",
             "a_count_per_call", "b_count_per_call", "verdict"},
            {}};
    for (const auto& l : lines) {
        nlohmann::json change = nullptr;
        std::string verdict = !l.in_a ? "only in B" : !l.in_b ? "only in A" : "same";
        if (l.in_a && l.in_b && l.a_ms > 0) {
            const double pct = 100.0 * (l.b_ms - l.a_ms) / l.a_ms;
            change = pct;
            if (pct < -threshold_pct) verdict = "faster";
            if (pct > threshold_pct) verdict = "slower";
        }
        t.rows.push_back({std::get<0>(l.key), std::get<1>(l.key), std::get<2>(l.key), l.a_ms, l.b_ms, change, l.a_share,
                          l.b_share, l.a_n, l.b_n, verdict});
    }
    return t;
}

}  // namespace profinfer
