#include "profinfer/table.h"
#include "profinfer/number_text.h"
#include "profinfer/text_escape.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "profinfer/error.h"

namespace profinfer {

namespace {

// Text tables round to 3 decimals for reading; CSV keeps 7 significant digits, so that a
// slope of 0.0476 ns per M·N·K·H survives a CSV read back by `profinfer fit`.
std::string cell(const nlohmann::json& v, bool csv = false) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) {
        char b[32];
        std::snprintf(b, sizeof b, csv ? "%.7g" : "%.3f", v.get<double>());
        return b;
    }
    return json_text(v);
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
            std::string s = cell(r[c], true);
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

std::string Table::to_markdown() const {
    std::ostringstream o;
    o << "|";
    for (const auto& c : columns) o << " " << c << " |";
    o << "\n|";
    for (size_t c = 0; c < columns.size(); ++c) o << "---|";
    o << "\n";
    for (const auto& r : rows) {
        o << "|";
        for (const auto& v : r)
            o << " " << (v.is_string() ? v.get<std::string>() : v.is_number() ? format_double(v.get<double>()) : "–") << " |";
        o << "\n";
    }
    return o.str();
}

Table Table::from_csv(const std::string& text) {
    std::vector<std::vector<std::string>> lines;
    std::vector<std::string> cur{""};
    bool quoted = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cur.back() += '"', ++i;
            else if (c == '"') quoted = false;
            else cur.back() += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            cur.push_back("");
        } else if (c == '\n') {
            lines.push_back(std::move(cur));
            cur = {""};
        } else if (c != '\r') {
            cur.back() += c;
        }
    }
    if (cur.size() > 1 || !cur[0].empty()) lines.push_back(std::move(cur));
    if (lines.empty()) throw Error("CSV: no header line");
    Table t;
    t.columns = lines[0];
    for (size_t l = 1; l < lines.size(); ++l) {
        if (lines[l].size() != t.columns.size())
            throw Error("CSV line " + std::to_string(l + 1) + ": " + std::to_string(lines[l].size()) + " cells, the header has " +
                        std::to_string(t.columns.size()));
        std::vector<nlohmann::json> r;
        for (const auto& cell : lines[l]) {
            if (cell.empty() || cell == "null") {
                r.push_back(nullptr);
                continue;
            }
            char* end = nullptr;
            const double d = std::strtod(cell.c_str(), &end);
            if (end && *end == 0 && (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-' || cell[0] == '.'))
                cell.find_first_of(".eE") == std::string::npos ? r.push_back(int64_t(std::stoll(cell))) : r.push_back(d);
            else
                r.push_back(cell);
        }
        t.rows.push_back(std::move(r));
    }
    return t;
}

size_t Table::column(const std::string& name) const {
    auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) throw Error("table has no column '" + name + "'");
    return size_t(it - columns.begin());
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
    if (format == "json") return json_text(to_json(), 1) + "\n";
    if (format == "table") return to_text();
    throw Error("--format is table, csv or json, not '" + format + "'");
}

Table Table::read_csv_file(const std::filesystem::path& f) {
    std::ifstream in(f);
    if (!in) throw Error("cannot read " + f.string());
    try {
        return from_csv(std::string(std::istreambuf_iterator<char>(in), {}));
    } catch (const Error& e) {
        throw Error(f.string() + ": " + e.what());  // the reader is told which file is bad
    }
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace profinfer
