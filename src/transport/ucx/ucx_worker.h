// One UCX worker of one communicator's UCX transport (one per route, ucx_fabric.h): its
// endpoints to peers, its progress, and its event fd, which is how a rank waiting on UCX sleeps.
//
// The engine drives a communicator's endpoints from one thread at a time (its progress thread,
// or a caller that took the loop over, or the init thread during link calibration), so the
// worker is serialized by its own mutex: every call into UCX on it holds mu().
//
// Sleeping: ucp_worker_arm() may only be called once progress has nothing left to do; it then
// makes the event fd readable when anything arrives or completes. arm() below does both, and
// remembers that the worker is armed until the next call into UCX, so that the many endpoints
// of one worker that the engine arms before one poll() cost one arm, not one each.
//
// Peers: a PeerLink per peer, shared by its channels, with a UCP endpoint per channel (made when
// the channel is first used: lazily) and UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER).
// An endpoint per channel, not per peer, because a channel's send is accepted once its UCP
// endpoint is flushed (ucx_endpoint.h): on a shared one, the flush would wait for the other
// channels' transfers too, and tie channels together that the schedules keep independent.
// UCX reports a failed peer from its progress; a peer on this rank's node is also watched with a
// pidfd, since UCX's shared-memory transports learn of a death only by their keepalive.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/failure_cause.h"
#include "core/base/status.h"
#include "transport/ucx/ucx_context.h"

namespace braid::ucx {

class Worker;

// Who a peer is, for messages and failure causes.
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string host;
  bool same_host = false;        // watch its pid too
  std::string address;           // its worker's UCX address on this route (binary)
  CauseBoard* causes = nullptr;  // may be null (tests of the transport alone)
};

// The UCP endpoints to one peer, one per channel. Methods need the worker's mutex.
class PeerLink {
 public:
  PeerLink(Worker* worker, PeerInfo info, int nchannels);
  ~PeerLink();  // hands the UCP endpoints to the worker, which closes them
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // The channel's UCP endpoint, made on first use; an error (naming the peer) when it cannot be
  // made.
  Result<ucp_ep_h> ep(int channel);
  // Non-OK once UCX reported the peer failed or its process exited (sticky); reports the death
  // to the cause board the first time.
  Status failure();
  // The descriptors that wake a sleeper when the peer dies (its pidfd), appended to `fds`.
  void addFds(std::vector<pollfd>& fds) const;
  const PeerInfo& info() const { return info_; }
  // "rank 3 on host h2"
  std::string name() const;
  // Reports `reason` for this peer to the cause board (no-op without one).
  void report(FailureCause::Reason reason) const;

  // Shared with UCX's error callback, which may run after the link is gone (the worker keeps the
  // slot until the endpoint is closed).
  struct ErrorSlot {
    std::atomic<int> status{0};  // ucs_status_t; UCS_OK until UCX reports the peer failed
  };

 private:
  Worker* worker_;
  PeerInfo info_;
  std::vector<ucp_ep_h> eps_;                      // per channel; null until first used
  std::vector<std::shared_ptr<ErrorSlot>> slots_;  // per channel
  int pidfd_ = -1;
  Status failed_;
  bool reported_ = false;
};

class Worker {
 public:
  // `where` names the communicator's rank for messages ("ucx: rank 2").
  static Result<std::unique_ptr<Worker>> Create(std::shared_ptr<Context> context, Route route,
                                                std::string where);
  // Closes every UCP endpoint (letting what was sent leave, within a bound) and the worker.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::mutex& mu() { return mu_; }
  const Library& lib() const { return context_->lib(); }
  const Context& context() const { return *context_; }
  std::shared_ptr<Context> contextRef() const { return context_; }
  ucp_worker_h get() const { return worker_; }
  Route route() const { return route_; }
  const std::string& where() const { return where_; }
  // This worker's UCX address (binary), published in the transport's blob.
  const std::string& address() const { return address_; }

  // ucp_worker_progress (mu() held): the number of events it handled.
  unsigned progress();
  // Any call into UCX on this worker (mu() held) may leave work for progress: the worker is no
  // longer armed.
  void touched() { armed_ = false; }
  // Prepares to sleep (mu() held): true when events are pending (the caller must look again
  // instead of sleeping), else the event fd is armed and appended to `fds`.
  bool arm(std::vector<pollfd>& fds);

  // Takes over a UCP endpoint of a peer link that is going away (mu() held), and requests that
  // nobody waits for any more with the memory they use (kept until the worker is gone): the
  // destructor closes and frees them. `wait`: a send the peer may still need (an eager message
  // the engine counted as sent), which the destructor lets leave (bounded) before closing;
  // otherwise it is cancelled.
  void retire(ucp_ep_h ep, std::shared_ptr<PeerLink::ErrorSlot> slot);
  void retire(void* request, std::shared_ptr<void> keep_alive, bool wait);

 private:
  Worker() = default;
  // Waits (bounded) for retired requests, then closes every retired endpoint.
  void closeAll();

  std::shared_ptr<Context> context_;
  Route route_ = Route::kLocal;
  std::string where_;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string address_;
  std::mutex mu_;
  bool armed_ = false;
  struct RetiredEp {
    ucp_ep_h ep;
    std::shared_ptr<PeerLink::ErrorSlot> slot;
  };
  std::vector<RetiredEp> retired_eps_;
  struct RetiredRequest {
    void* request;
    std::shared_ptr<void> keep_alive;
    bool wait;
  };
  std::vector<RetiredRequest> retired_requests_;
};

}  // namespace braid::ucx
