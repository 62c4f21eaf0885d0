// Running operations for the C API: blocking, non-blocking (a request) or deferred by an open
// group; internal collectives (split's exchange); joining a child communicator.
#pragma once

#include <memory>

#include "braid/braid.h"
#include "core/base/status.h"
#include "core/runtime/comm_registry.h"
#include "core/runtime/operation.h"

// The C request handle: the operation it stands for (filled at braidGroupEnd for calls made
// inside a group).
struct braidRequest {
  std::shared_ptr<braid::Operation> op;
  // The communicator that runs it, for braidWait to drive its loop: weak, since a request may
  // outlive its communicator (destroy waits for the operation, not for the request).
  std::weak_ptr<braidComm> comm;
  // Allocated with its operation (braid::RequestedOperation): released by dropping `op`, which
  // owns the block, not by delete.
  bool with_op = false;
  // braid::CompletedRequest(): shared by every call that completed before it returned, never
  // freed.
  bool shared = false;
};

namespace braid {

// A non-blocking call's operation and its request in one allocation (a small call's second
// malloc and free were about 250 instructions): the request's `op` shares ownership of the block,
// so that the block lives while the engine or the request holds the operation.
struct RequestedOperation {
  explicit RequestedOperation(OpDesc desc) : op(std::move(desc)) {}
  Operation op;
  braidRequest request;
};

// The request of a call that completed successfully before its function returned (a no-op, a
// small call whose peers had posted: Engine::startCall). One object for all of them, completed
// and never freed, so that such a call allocates nothing: requests are tokens for braidWait and
// braidTest, not identities (braid.h).
braidRequest* CompletedRequest();

// Frees a request the caller is done with (braidWait, braidTest).
inline void ReleaseRequest(braidRequest* r) {
  if (r->shared) return;
  if (!r->with_op) {
    delete r;
    return;
  }
  // Dropping the last reference may free the block, `r` with it: nothing touches `r` after.
  r->comm.reset();
  std::shared_ptr<Operation> self = std::move(r->op);
}

// Runs collective `desc` on `comm` as RunOperation does, its operation allocated here (with its
// request, for a non-blocking call outside a group).
braidResult_t RunOperation(const CommRef& comm, OpDesc desc, braidRequest_t* request);

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
