// braidCommShrink: survivors build a communicator without the excluded ranks.
//
// The data streams of a failed communicator may be left mid-message, so the new unique id does
// not travel over them. Instead the lowest surviving rank starts a rendezvous and hands its id
// to every other survivor over that survivor's control listener (opened at init, bound like the
// bootstrap, authenticated with the communicator's secret: purpose kShrinkPurpose). The listener
// is a HandshakeListener, served from init to destroy: strangers on it are dropped within a
// second whenever they come, however many, so they cannot delay the leader's connection.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/runtime/api_errors.h"
#include "core/runtime/api_submit.h"
#include "core/runtime/comm_registry.h"
#include "core/net/bootstrap.h"
#include "core/net/handshake.h"
#include "core/net/handshake_listener.h"
#include "core/base/log.h"
#include "core/net/socket.h"

using namespace braid;

namespace {

constexpr uint32_t kShrinkPurpose = 3;

Status SendId(braidComm* comm, int to, const braidUniqueId& id, int nsurvivors, Deadline deadline) {
  Status last;
  // The survivor may still be finishing its own failed operation: retry until the deadline.
  while (!deadline.expired()) {
    auto fd = ConnectWithDeadline(comm->controlAddress(to), deadline);
    if (!fd.ok()) {
      last = fd.status();
      usleep(20000);
      continue;
    }
    HandshakeHello hello;
    hello.purpose = kShrinkPurpose;
    hello.rank = comm->rank();
    hello.nranks = nsurvivors;
    Status st = HandshakeClient(fd->get(), comm->secret(), hello, deadline);
    if (st.ok()) st = SendAll(fd->get(), &id, sizeof(id), deadline);
    if (st.ok()) {
      char ack = 0;
      st = RecvAll(fd->get(), &ack, 1, deadline);
      if (st.ok()) return Status::Ok();
    }
    last = st;
    usleep(20000);
  }
  return TimeoutError("could not hand the new id to rank " + std::to_string(to) +
                      " before the deadline: " + last.message());
}

Result<braidUniqueId> ReceiveId(braidComm* comm, int leader, Deadline deadline) {
  // Only holders of the communicator's secret get here: the listener has authenticated them.
  for (;;) {
    auto conn = comm->control().next(deadline);
    if (!conn.ok())
      return TimeoutError("rank " + std::to_string(leader) +
                          " (the shrink leader) did not send the new id in time");
    const HandshakeHello& h = conn->hello;
    if (h.purpose != kShrinkPurpose || h.rank != leader) {
      BRAID_WARN(
          "%s: dropped a connection on the control listener from %s: rank %d, purpose %u, "
          "is not the shrink leader (rank %d)",
          comm->where().c_str(), conn->peer.c_str(), h.rank, h.purpose, leader);
      continue;
    }
    braidUniqueId id;
    Status st = RecvAll(conn->fd.get(), &id, sizeof(id), deadline);
    if (st.ok()) {
      char ack = 1;
      (void)SendAll(conn->fd.get(), &ack, 1, deadline);
      return id;
    }
    // The leader gave up on this connection (it retries with a new one).
  }
}

}  // namespace

extern "C" braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks,
                                         int excludeCount, braidComm_t* newcomm,
                                         const braidConfig_t* config, int flags) {
  if (!newcomm) return Fail(InvalidArgument("braidCommShrink: newcomm is NULL"));
  *newcomm = nullptr;
  CommRef ref = LookupComm(comm);
  if (!ref) return Fail(InvalidUsage("braidCommShrink: the communicator handle is not live"));
  braidComm* raw = ref.get();
  if (ref->state() != braidComm::State::kReady)
    return Fail(raw, InvalidUsage("braidCommShrink: the communicator's init did not complete"));
  if (flags != 0 && flags != 1)
    return Fail(raw, InvalidArgument("braidCommShrink: flags must be 0 (wait) or 1 (abort), not " +
                                     std::to_string(flags)));
  if (excludeCount < 0 || (excludeCount > 0 && !excludeRanks))
    return Fail(
        raw, InvalidArgument("braidCommShrink: excludeRanks is NULL or excludeCount is negative"));
  const int n = raw->nranks(), me = raw->rank();
  std::vector<bool> excluded(n, false);
  for (int i = 0; i < excludeCount; ++i) {
    int r = excludeRanks[i];
    if (r < 0 || r >= n)
      return Fail(raw, InvalidArgument("braidCommShrink: excluded rank " + std::to_string(r) +
                                       " is outside [0, " + std::to_string(n) + ")"));
    if (excluded[r])
      return Fail(
          raw, InvalidArgument("braidCommShrink: rank " + std::to_string(r) + " is listed twice"));
    excluded[r] = true;
  }
  if (excluded[me])
    return Fail(raw, InvalidUsage("braidCommShrink: the calling rank is in excludeRanks"));
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (!excluded[r]) survivors.push_back(r);

  // Old operations first: abort them, or let them finish (a failed communicator fails them fast).
  if (flags == 1)
    raw->abortOperations(AbortedError("aborted by braidCommShrink on " + raw->where()));
  else
    (void)raw->drain();

  Deadline deadline = Deadline::After(raw->config().timeout_ms);
  braidUniqueId id;
  const int leader = survivors[0];
  if (me == leader) {
    RendezvousOptions o;
    o.ifname = raw->config().socket_ifname;
    o.timeout_ms = raw->config().timeout_ms;
    auto data = StartRendezvous(o);
    if (!data.ok()) return Fail(raw, Status(data.status()).prepend("braidCommShrink: "));
    EncodeUniqueId(*data, &id);
    for (size_t i = 1; i < survivors.size(); ++i) {
      Status st = SendId(raw, survivors[i], id, static_cast<int>(survivors.size()), deadline);
      if (!st.ok()) return Fail(raw, st.prepend("braidCommShrink: "));
    }
  } else {
    auto got = ReceiveId(raw, leader, deadline);
    if (!got.ok())
      return Fail(raw, Status(got.status()).prepend("braidCommShrink: " + raw->where() + ": "));
    id = *got;
  }
  const int new_rank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), me) - survivors.begin());
  return InitChildComm(*raw, newcomm, static_cast<int>(survivors.size()), id, new_rank, config);
}
