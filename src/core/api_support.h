// Shared plumbing of the C API functions: the registry of live communicator handles, error
// reporting, and running an operation (blocking, non-blocking or deferred by a group).
#pragma once

#include <memory>
#include <vector>

#include "braid/braid.h"
#include "core/comm.h"
#include "core/operation.h"
#include "core/status.h"

// The C request handle: the operation it stands for (filled at braidGroupEnd for calls made
// inside a group).
struct braidRequest {
  std::shared_ptr<braid::Operation> op;
};

namespace braid {

using CommRef = std::shared_ptr<braidComm>;

// Registers a communicator and returns its handle. Handles are never reused within a process
// (see api_support.cc), so a handle kept after braidCommDestroy is reported as not live even when
// a new communicator occupies the old one's memory.
braidComm_t RegisterComm(CommRef comm);
// Removes a handle; returns the owning reference (null when it was not live).
CommRef UnregisterComm(braidComm_t comm);
// A reference that keeps the communicator alive for the duration of an API call (so a
// concurrent braidCommAbort cannot free it under the caller). Null when not live.
CommRef LookupComm(braidComm_t comm);
// Every live communicator (references, so they stay alive while the caller uses them).
std::vector<CommRef> LiveComms();
// LookupComm + checks that it is ready for operations.
Result<CommRef> UsableComm(braidComm_t comm);

// Records `st` as the last error of `comm` (may be null) and of this thread; returns its code.
braidResult_t Fail(braidComm* comm, const Status& st);
braidResult_t Fail(const Status& st);
// The thread's last error message.
const char* ThreadLastError();

// Submits `op` on `comm`, or records it when a group is open; blocks until done unless
// `request` is non-null (then *request receives a handle).
braidResult_t RunOperation(const CommRef& comm, std::shared_ptr<Operation> op,
                           braidRequest_t* request);
// braidCommInitRankConfig, with the link model of a parent communicator when there is one
// (then the child does not measure its links again; see link_calibration.h).
braidResult_t InitComm(braidComm_t* comm, int nranks, const braidUniqueId& uniqueId, int rank,
                       const braidConfig_t* config, const LinkModel* inherited_links);
// Joins the child communicator of `parent` (split, shrink) as `rank` of `nranks`. Without a
// `config`, the child inherits the parent's timeout, transports and algorithms; it always
// inherits the parent's link model.
braidResult_t InitChildComm(const braidComm& parent, braidComm_t* child, int nranks,
                            const braidUniqueId& id, int rank, const braidConfig_t* config);

// Submits and waits, bypassing groups (internal collectives such as split's exchange).
Status RunInternal(const CommRef& comm, OpDesc desc);

}  // namespace braid
