#pragma once
// Text from a trace (tensor names, commands, comms) is data, whoever wrote the trace:
// every output format gets it through one of these, never raw.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace profinfer {

// JSON text of J (INDENT as nlohmann's dump) whatever bytes its strings hold: a byte that is
// not UTF-8 (a Latin-1 file name in the command line, a tensor name) becomes U+FFFD, the
// replacement character that says a byte was replaced, instead of failing the whole output.
std::string json_text(const nlohmann::json& j, int indent = -1);

// For HTML text and attribute values.
std::string html_escape(const std::string& s);
// The inside of a double-quoted DOT string: quotes and backslashes escaped, control
// characters replaced, so a name can neither end the string nor add attributes.
std::string dot_escape(const std::string& s);
// A gnuplot single-quoted string literal, quotes included.
std::string gnuplot_quote(const std::string& s);
// A label inside a gnuplot inline data block: one token, printable, no quotes, so it
// can neither end the block nor be read as a command (a space kept as a no-break space).
std::string gnuplot_label(const std::string& s);
// One word for a POSIX shell: as it is when it has nothing a shell reads, else in single
// quotes — for printing a command a person can paste (profinfer itself never uses a shell).
std::string shell_quote(const std::string& s);
// ARGV as one line of shell words.
std::string shell_command(const std::vector<std::string>& argv);

}  // namespace profinfer
