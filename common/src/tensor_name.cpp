#include "profinfer/tensor_name.h"

#include <cctype>

namespace profinfer {

int layer_of(const std::string& name) {
    auto dash = name.rfind('-');
    if (dash == std::string::npos || dash + 1 >= name.size() || name.size() - dash > 9) return -1;
    for (size_t i = dash + 1; i < name.size(); ++i)
        if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    return std::stoi(name.substr(dash + 1));
}

}  // namespace profinfer
