// The shm transport's small-message board (transport/local_board.h): this rank's side lives in
// its own segment (shm_layout.h, BoardControl and two payload buffers), each local peer's side in
// the peer's segment, which this rank maps anyway to write its rings. Waiting sleeps on the
// peer's `posted` word with a futex (shared, so it works across processes).
#pragma once

#include <memory>
#include <vector>

#include "transport/local_board.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_segment.h"

namespace braid::shm {

class ShmBoard final : public LocalBoard {
 public:
  // This rank's side: `mine` must have a board.
  ShmBoard(int rank, int nranks, const SegmentView& mine);
  // A peer's side, from its segment; false when its board does not match this rank's (no board,
  // or another payload size: then the peer is not covered).
  bool addPeer(int peer, const SegmentView& theirs, std::shared_ptr<PeerLink> link);

  uint64_t capacity() const override { return capacity_; }
  bool covers(int rank) const override {
    return rank >= 0 && rank < static_cast<int>(sides_.size()) && sides_[rank].ctl != nullptr;
  }
  std::byte* outbox(uint32_t seq) override { return sides_[rank_].payload[seq & 1]; }
  void post(uint32_t seq, const BoardSignature& sig) override;
  bool posted(int rank, uint32_t seq) const override {
    const uint32_t p = sides_[rank].ctl->posted.load(std::memory_order_acquire);
    return static_cast<int32_t>(p - seq) >= 0;
  }
  bool sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) override;
  BoardSignature signature(int rank, uint32_t seq) const override;
  const std::byte* inbox(int rank, uint32_t seq) const override {
    return sides_[rank].payload[seq & 1];
  }
  bool dead(int rank) override { return sides_[rank].link && sides_[rank].link->dead(); }
  Status deathError(int rank) const override;

 private:
  struct Side {
    BoardControl* ctl = nullptr;
    std::byte* payload[2] = {nullptr, nullptr};
    std::shared_ptr<Mapping> map;    // keeps the segment mapped
    std::shared_ptr<PeerLink> link;  // null for this rank
  };
  int rank_;
  uint64_t capacity_;
  std::vector<Side> sides_;  // indexed by rank
};

}  // namespace braid::shm
