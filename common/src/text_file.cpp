#include "profinfer/text_file.h"

#include <algorithm>
#include <fstream>
#include <iterator>

namespace profinfer {

std::string read_text(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::string trim(std::string s) {
    s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
    const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace profinfer
