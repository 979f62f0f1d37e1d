#include "profinfer/text_escape.h"

namespace profinfer {

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
    for (char c : s) o += (is_control(c) || c == ' ' || c == '"' || c == '\'' || c == '#' || c == '\\') ? '_' : c;
    return o.empty() ? "_" : o;
}

}  // namespace profinfer
