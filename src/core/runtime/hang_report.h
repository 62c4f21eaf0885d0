// Hang localisation (spec/reliability.md check 8): braidCommDebugState() reports what a
// communicator is doing; BRAID_DUMP_SIGNAL makes a signal write that report for every live
// communicator to the log.
#pragma once

#include <string>

#include "core/base/status.h"

namespace braid {

// Installs the dump on that signal, once per process (later calls do nothing); "" installs
// nothing.
Status InstallDumpSignal(const std::string& name);

}  // namespace braid
