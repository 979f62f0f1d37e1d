#pragma once
#include <stdexcept>
#include <string>

namespace profinfer {

// An error the user can act on: the message is printed as one line and the program
// exits non-zero. Never wrap a bare errno without saying what was being done.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// "doing X: strerror(errno)"
[[noreturn]] void throw_errno(const std::string& doing);

}  // namespace profinfer
