// The shm transport's Endpoint: a pair of lock-free single-producer single-consumer rings in
// shared memory (ours inbound, the peer's outbound-for-us), doorbells to wake a sleeping side,
// and a pidfd to learn that the peer died.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace braid::shm {

// What the endpoints (channels) of one peer share: who it is, how to ring it, whether it died.
class PeerLink {
 public:
  // Opens a pidfd on `pid` (Linux >= 5.3; without one, death is polled with kill(pid, 0)).
  // A peer that is already gone is a RemoteError. `causes` (may be null) hears of the peer's
  // death and of streams it shuts down (see TransportContext::causes).
  static Result<std::shared_ptr<PeerLink>> Open(int rank, int pid, std::string host,
                                                std::string doorbell, CauseBoard* causes);
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // Whether the peer has gone: it left the communicator with every call complete (its segment's
  // OwnerControl::departed, read at every call), or its process exited (the kernel is asked at
  // most once per kCheckIntervalUs: hot paths call this; a death is remembered for good).
  bool dead();
  // "rank 3 (pid 1234) on host h1 exited during the operation" (or how it left: destroyed the
  // communicator, exited without destroying it); reports that as the cause.
  Status deathError() const;
  // Where the peer says how it left: its segment's owner block (kept mapped by `mapping`).
  void watchDeparture(std::shared_ptr<Mapping> mapping, const OwnerControl* owner) {
    departure_map_ = std::move(mapping);
    departure_ = owner;
  }
  // The reason the peer left with (FailureCause::Reason), 0 while it has not.
  uint32_t departed() const {
    return departure_ ? departure_->departed.load(std::memory_order_acquire) : 0;
  }
  // Reports a failure of `reason` of this peer as a cause (no-op without a board).
  void report(FailureCause::Reason reason) const;
  int pidfd() const { return pidfd_.get(); }
  int rank() const { return rank_; }
  int pid() const { return pid_; }
  const std::string& host() const { return host_; }
  const std::string& doorbell() const { return doorbell_; }

  static constexpr int64_t kCheckIntervalUs = 2000;

 private:
  PeerLink() = default;
  int rank_ = -1;
  int pid_ = 0;
  std::string host_;
  std::string doorbell_;
  CauseBoard* causes_ = nullptr;
  std::shared_ptr<Mapping> departure_map_;
  const OwnerControl* departure_ = nullptr;
  OwnedFd pidfd_;
  std::atomic<bool> dead_{false};
  std::atomic<int64_t> next_check_us_{0};
};

// One ring as seen from one side, and the segment that holds it.
struct RingRef {
  RingControl* ctl = nullptr;
  std::shared_ptr<Mapping> map;  // keeps the segment mapped
  SegmentLayout layout;
  // The data area (shm_arena.h): null until the writer claims it (writer side) or until bytes
  // first show (reader side).
  std::byte* data = nullptr;
  uint64_t size = 0;  // power of two
};

// Sends go into the peer's segment (`tx`: its inbound ring for us), receives come from ours
// (`rx`). send() may run on one thread while recv()/peek()/consume() run on another; arm() and
// disarm() must not overlap either. The first send claims the ring's data area from the peer's
// arena; the reader finds it with the first bytes.
//
// peek() relies on the engine's framing for speed but not for correctness: the engine pads every
// message to a multiple of 8 bytes and ring sizes are powers of two >= 1 KiB, so an 8-aligned
// read position always has >= 8 contiguous bytes before the wrap point and the view is always
// in place. If a reader consumes odd amounts and a short run is split by the wrap, peek() copies
// up to 8 bytes across it into a small bounce buffer, keeping Endpoint's >= min(max, 8) promise.
class ShmEndpoint final : public Endpoint {
 public:
  ShmEndpoint(std::shared_ptr<PeerLink> peer, RingRef tx, RingRef rx);
  ~ShmEndpoint() override;

  Result<size_t> send(const void* data, size_t len) override;
  Result<size_t> recv(void* data, size_t len) override;
  Result<std::span<const std::byte>> peek(size_t max) override;
  void consume(size_t len) override;
  bool arm(bool want_send, bool want_recv, std::vector<pollfd>& fds) override;
  void disarm(std::span<const pollfd> polled) override;
  void shutdown() override;
  std::string describe() const override;
  bool hasUnreadBytes() const override {
    return rx_.ctl->head.load(std::memory_order_acquire) !=
           rx_.ctl->tail.load(std::memory_order_acquire);
  }

 private:
  // Refreshes rx_head_cache_ (and attaches the data area when bytes first show); false when the
  // peer's counter or area is impossible.
  bool refreshHead();
  bool checkHead();
  // Before any byte arrived the ring has no data area: looks again; true once bytes are there
  // (and the area attached), an error for a dead peer, a closed stream or a bad area.
  Result<bool> firstBytes();
  // Claims the data area of the ring we write (once, before the first byte).
  Status claimTx();
  // Outcome of a read that found the ring empty: 0 bytes, or the peer's death once the ring is
  // drained for good.
  Status emptyStatus();
  Status closedError() const;
  Status corruptError(const char* which, uint64_t used, uint64_t size) const;
  // Publishes the new tail and wakes a writer sleeping on a full ring.
  void advanceTail(uint64_t n);

  std::shared_ptr<PeerLink> peer_;
  RingRef tx_;
  RingRef rx_;
  // Writer side (send thread).
  uint64_t tx_head_ = 0;        // our own counter; the shared one is a published copy
  uint64_t tx_tail_cache_ = 0;  // last tail seen: saves a shared read while space is known
  // Reader side (recv thread).
  uint64_t rx_tail_ = 0;
  uint64_t rx_head_cache_ = 0;
  size_t peek_len_ = 0;  // bytes the last peek() offered
  alignas(8) std::byte bounce_[8];
  bool armed_send_ = false;
  bool armed_recv_ = false;
};

}  // namespace braid::shm
