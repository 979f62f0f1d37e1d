#pragma once
// Reading small text files and the text in them: a whole file, a trimmed line, a TOML
// parse error as a user reads it.
#include <filesystem>
#include <string>

namespace profinfer {

// The whole file, bytes as they are; "" when it cannot be read.
std::string read_text(const std::filesystem::path& path);
// S without surrounding whitespace, and cut at the first NUL (device-tree strings end in one).
std::string trim(std::string s);

// A toml++ parse error as "FILE, line N: WHAT: DESCRIPTION" (WHAT: what the file was meant to
// be, e.g. "malformed card"). A template, so that only its callers need toml++.
template <class ParseError>
std::string toml_error_text(const std::filesystem::path& file, const ParseError& e, const std::string& what) {
    return file.string() + ", line " + std::to_string(e.source().begin.line) + ": " + what + ": " + std::string(e.description());
}

}  // namespace profinfer
