// One UCX worker of one communicator's UCX transport (one per route, ucx_fabric.h): its
// endpoints to peers, its progress, and its event fd, which is how a rank waiting on UCX sleeps.
//
// The engine drives a communicator's endpoints from one thread at a time (its progress thread,
// or a caller that took the loop over, or the init thread during link calibration), so the
// worker is serialized by its own mutex: every call into UCX on it holds mu() (Use).
//
// UCX moves nothing without progress on both sides: a rendezvous completes at the sender once
// the receiver's UCX acknowledged it, a first send once the peer's UCX answered the connection,
// and UCX's tcp sends what the socket did not take from its own buffer. A rank whose engine has
// finished its part (its operation is done, it sleeps on other fds, it waits in the bootstrap)
// does not call UCX; a peer may then wait on it forever. So each worker has a helper thread that
// progresses it while the engine leaves it alone: once nothing used the worker for kIdleUs, the
// thread arms it and sleeps in poll() on its event fd, and progresses it when UCX has an event
// (never spinning: while the engine uses the worker, the thread only looks again after kIdleUs).
// What it moves while the engine sleeps, it tells the engine by ringing the rank's doorbell (its
// progress may have emptied the very event fd the engine sleeps on).
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
// Across nodes UCX reports a failed peer from its progress. A peer on this rank's node is watched
// with a pidfd instead (its UCP endpoints use no UCX error handling: UCX's shared-memory transports
// have none, and asking for it would move the pair to tcp).
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
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
  // Non-OK once UCX reported the peer failed or its process exited (sticky). A peer that exited
  // after its part may still have left messages for this rank: failure() alone is not an error.
  Status failure();
  // failure(), for an endpoint that fails because of it: the death goes to the cause board (once).
  Status fail();
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
  static constexpr int64_t kExitCheckUs = 2000;
  int64_t next_exit_check_us_ = 0;
  Status failed_;
  bool reported_ = false;
};

class Worker {
 public:
  // `where` names the communicator's rank for messages ("ucx: rank 2"); `doorbell` is this
  // rank's (TransportContext::doorbell_name), rung by the helper thread when it moved something
  // while the engine slept ("" for none).
  static Result<std::unique_ptr<Worker>> Create(std::shared_ptr<Context> context, Route route,
                                                std::string where, std::string doorbell = "");
  // Closes every UCP endpoint (letting what was sent leave, within a bound) and the worker.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Holds the worker's mutex and marks it as used by the engine now (the helper thread keeps
  // off while it is).
  class Use {
   public:
    explicit Use(Worker& w) : w_(w), lock_(w.mu_) {
      w.last_use_us_.store(NowMicros(), std::memory_order_relaxed);
    }

   private:
    Worker& w_;
    std::lock_guard<std::mutex> lock_;
  };
  static constexpr int64_t kIdleUs = 2000;

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
  // After the poll() that arm() prepared: whatever woke it, the next arm() progresses first.
  void disarmed() { armed_ = false; }

  // The communicator's other workers (one per route). A rank that sleeps on some of its
  // endpoints keeps every worker progressing (Endpoint::arm): a peer's first send on another
  // route waits for this rank's UCX to answer its connection (wireup), and that peer may have
  // to finish the send before it sends what this rank waits for.
  void setSiblings(std::vector<Worker*> siblings) { siblings_ = std::move(siblings); }
  const std::vector<Worker*>& siblings() const { return siblings_; }

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
  // The helper thread (see the top of this file).
  void helperLoop();

  std::shared_ptr<Context> context_;
  Route route_ = Route::kLocal;
  std::string where_;
  std::string doorbell_;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string address_;
  std::mutex mu_;
  bool armed_ = false;
  std::vector<Worker*> siblings_;
  std::atomic<int64_t> last_use_us_{0};
  std::atomic<bool> stop_{false};
  int stop_fd_ = -1;  // an eventfd that wakes the helper to stop
  std::thread helper_;
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
