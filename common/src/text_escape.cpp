#include "profinfer/text_escape.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstring>

namespace profinfer {

std::string json_text(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
bool is_control(char c) { return (unsigned char)c < 0x20 || c == 0x7f; }
}  // namespace

std::string html_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '&': o += "&amp;"; break;
            case '"': o += "&quot;"; break;
            case '\'': o += "&#39;"; break;
            default: o += c;
        }
    }
    return o;
}

std::string dot_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\')
            o += '\\', o += c;
        else
            o += is_control(c) ? '?' : c;
    }
    return o;
}

std::string gnuplot_quote(const std::string& s) {
    std::string o = "'";
    for (char c : s) {
        if (c == '\'')
            o += "''";
        else
            o += is_control(c) ? '?' : c;
    }
    return o + "'";
}

std::string gnuplot_label(const std::string& s) {
    std::string o;
    // A space as a no-break space (U+00A0, which gnuplot's data reader does not split on):
    // "all (99)" stays readable as one token; the characters that could end the token or the
    // block as '_'.
    for (char c : s) {
        if (c == ' ')
            o += "\xC2\xA0";
        else
            o += (is_control(c) || c == '"' || c == '\'' || c == '#' || c == '\\') ? '_' : c;
    }
    return o.empty() ? "_" : o;
}

std::string shell_quote(const std::string& s) {
    bool plain = !s.empty();
    for (unsigned char c : s) plain = plain && (std::isalnum(c) || (c && std::strchr("_-./=:,+@%", c)));
    if (plain) return s;
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return o + "'";
}

std::string shell_command(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) s += (s.empty() ? "" : " ") + shell_quote(a);
    return s;
}

}  // namespace profinfer
