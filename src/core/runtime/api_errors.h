// Error reporting of the C API: the last error of a communicator and of the calling thread.
#pragma once

#include "braid/braid.h"
#include "core/base/status.h"

struct braidComm;

namespace braid {

// Records `st` as the last error of `comm` (may be null) and of this thread; returns its code.
braidResult_t Fail(braidComm* comm, const Status& st);
braidResult_t Fail(const Status& st);
// The thread's last error message.
const char* ThreadLastError();

}  // namespace braid
