#pragma once
// The checks of record's options: everything that can be refused is refused here, before
// a database or a process exists.
#include <string>

#include "profinfer/recorder.h"

namespace profinfer {

void check_record_options(const RecordOptions& opts);
// A launch command: the same PATH lookup execvp does; an error naming why it cannot run.
void check_command(const std::string& program);

}  // namespace profinfer
