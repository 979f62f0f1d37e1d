#pragma once
// The checks of record's options: everything that can be refused is refused here, before
// a database or a process exists.
#include <string>

#include "profinfer/recorder.h"
#include "profinfer/subprocess.h"  // check_command

namespace profinfer {

void check_record_options(const RecordOptions& opts);

}  // namespace profinfer
