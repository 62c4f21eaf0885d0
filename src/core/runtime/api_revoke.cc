// braidCommRevoke (and ncclCommRevoke): stop a communicator's work without releasing it, so that
// the survivors of a failure can still shrink it, and its owner can still destroy it.
//
// Revoking is local and immediate: operations in flight (on any thread) fail with
// braidErrAborted naming the revoke, later ones fail at once, and the streams are shut down so
// that peers blocked on this rank fail in milliseconds instead of at their timeout. The control
// plane (each rank's authenticated listener) is untouched, which is what braidCommShrink uses.
// Revoking a split view is local to the view (see below).
#include <string>

#include "braid/braid.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"

using namespace braid;

extern "C" braidResult_t braidCommRevoke(braidComm_t comm) {
  if (!comm) return Fail(InvalidArgument("braidCommRevoke: comm is NULL"));
  CommRef ref = LookupComm(comm);
  if (!ref) return Fail(InvalidUsage("braidCommRevoke: the communicator handle is not live"));
  if (ref->state() != braidComm::State::kReady)
    return Fail(ref.get(), InvalidUsage(ref->where() +
                                        ": braidCommRevoke: the communicator is not initialised "
                                        "(abort or destroy a pending init instead)"));
  const Status reason = AbortedError(ref->where() + ": the communicator was revoked " +
                                     "(braidCommRevoke): shrink it or destroy it");
  ref->setAsyncError(reason);
  ref->abortOperations(reason);
  // A split view shares its root's streams and control plane: shutting them down or announcing
  // a failure would stop the root and every other view. Its own operations fail (those that had
  // not touched a stream alone; see Engine::dropAbortedView) and its peers' pending calls on it
  // end at their timeout.
  if (ref->isView()) return braidSuccess;
  // The peers that fail because of this revoke name it (unless the communicator had failed
  // already: then that cause stands).
  ref->causes().offer(ref->selfCause(FailureCause::Reason::kRevoked, ""));
  ref->causes().complete(ref->rank(), false, "", 0);
  (void)ref->announceFailure();
  ref->shutdownEndpoints();
  return braidSuccess;
}
