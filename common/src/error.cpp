#include "profinfer/error.h"

#include <cerrno>
#include <cstring>

namespace profinfer {

void throw_errno(const std::string& doing) {
    throw Error(doing + ": " + std::strerror(errno));
}

}  // namespace profinfer
