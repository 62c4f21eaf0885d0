// The registry of live communicator handles. A handle is not the object's address (see
// comm_registry.cc), so a handle kept after braidCommDestroy is reported as not live even when a
// new communicator occupies the old one's memory.
#pragma once

#include <memory>
#include <vector>

#include "braid/braid.h"
#include "core/base/status.h"
#include "core/runtime/comm.h"

namespace braid {

using CommRef = std::shared_ptr<braidComm>;

// Registers a communicator and returns its handle (never reused within a process).
braidComm_t RegisterComm(CommRef comm);
// Removes a handle; returns the owning reference (null when it was not live).
CommRef UnregisterComm(braidComm_t comm);
// A reference that keeps the communicator alive for the duration of an API call (so a
// concurrent braidCommAbort cannot free it under the caller). Null when not live.
CommRef LookupComm(braidComm_t comm);
// Every live communicator (references, so they stay alive while the caller uses them).
std::vector<CommRef> LiveComms();
// Installs, once per process, the exit hook that leaves every live communicator of this process
// (braidComm::leave with kExited): call when a communicator is ready.
void InstallLeaveAtExit();
// LookupComm + checks that it is ready for operations.
Result<CommRef> UsableComm(braidComm_t comm);

}  // namespace braid
