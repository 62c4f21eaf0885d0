// The shm transport's small-message board (transport/local_board.h): this rank's side lives in
// its own segment (shm_layout.h: BoardControl, kBoardEntries small slots and two large payload
// buffers), each local peer's side in the peer's segment, which this rank maps anyway to write
// its rings. Waiting for a post sleeps on the peer's entry with a futex (shared, so it works
// across processes); waiting for a peer to consume polls.
#pragma once

#include <memory>
#include <vector>

#include "transport/local_board.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_segment.h"

namespace braid::shm {

static_assert(LocalBoard::kEntries == kBoardEntries);

class ShmBoard final : public LocalBoard {
 public:
  // This rank's side: `mine` must have a board.
  ShmBoard(int rank, int nranks, const SegmentView& mine);
  // A peer's side, from its segment; false when its board does not match this rank's (no board,
  // or another payload size: then the peer is not covered).
  bool addPeer(int peer, const SegmentView& theirs, std::shared_ptr<PeerLink> link);

  uint64_t capacity() const override { return capacity_; }
  uint64_t slotCapacity() const override { return slot_bytes_; }
  uint64_t entryCapacity() const override { return kBoardEntryPayloadBytes; }
  bool covers(int rank) const override {
    return rank >= 0 && rank < static_cast<int>(sides_.size()) && sides_[rank].ctl != nullptr;
  }
  std::byte* outbox(uint32_t seq, BoardPlace place) override { return payload(rank_, seq, place); }
  void post(uint32_t seq, const BoardSignature& sig) override;
  void publish() override;
  bool posted(int rank, uint32_t seq) const override {
    const uint32_t p = entry(rank, seq).seq.load(std::memory_order_acquire);
    return static_cast<int32_t>(p - seq) >= 0;
  }
  bool sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) override;
  BoardSignature signature(int rank, uint32_t seq) const override;
  const std::byte* inbox(int rank, uint32_t seq, BoardPlace place) const override {
    return payload(rank, seq, place);
  }
  std::byte* peerWindow(int rank, uint32_t seq, BoardPlace place) override {
    return payload(rank, seq, place);
  }
  bool armBell(int rank) override;
  void disarmBell(int rank) override;
  void prefetch(int rank, uint32_t seq, BoardPlace place) const override {
    __builtin_prefetch(&entry(rank, seq));
    if (place != BoardPlace::kEntry) __builtin_prefetch(payload(rank, seq, place));
  }
  void consume(uint32_t seq) override;
  bool consumed(int rank, uint32_t seq) override;
  bool sleepUntilConsumed(int rank, uint32_t seq, int64_t timeout_us) override;
  void countRead(int rank, uint64_t bytes) override { add(sides_[rank].mine_there, bytes, true); }
  void countWritten(int rank, uint64_t bytes) override {
    add(sides_[rank].mine_there, bytes, false);
  }
  void traffic(int rank, uint64_t* sent, uint64_t* received) const override;
  void announceStarted(uint64_t calls) override {
    sides_[static_cast<size_t>(rank_)].ctl->started.store(calls, std::memory_order_release);
  }
  uint64_t started(int rank) const override {
    return sides_[static_cast<size_t>(rank)].ctl->started.load(std::memory_order_acquire);
  }
  bool dead(int rank) override { return sides_[rank].link && sides_[rank].link->dead(); }
  Status deathError(int rank) const override;

 private:
  struct Side {
    BoardControl* ctl = nullptr;
    std::byte* slots = nullptr;  // kBoardEntries small slots, slot_bytes_ apart
    std::byte* payload[2] = {nullptr, nullptr};
    std::shared_ptr<Mapping> map;    // keeps the segment mapped
    std::shared_ptr<PeerLink> link;  // null for this rank
    uint32_t consumed_seen = 0;      // the peer's `consumed` as this rank last loaded it
    // This rank's traffic cell on the peer's side, and the peer's on this rank's (null for this
    // rank, or where a segment has no slot for the other).
    BoardTrafficCell* mine_there = nullptr;
    const BoardTrafficCell* theirs_here = nullptr;
  };
  // Only this rank writes its cell: a plain load and store, no read-modify-write.
  static void add(BoardTrafficCell* c, uint64_t bytes, bool read) {
    if (!c) return;
    std::atomic<uint64_t>& w = read ? c->read : c->written;
    w.store(w.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  void attach(Side& s, const SegmentView& view);
  std::byte* payload(int rank, uint32_t seq, BoardPlace place) const {
    const Side& s = sides_[static_cast<size_t>(rank)];
    switch (place) {
      case BoardPlace::kEntry:
        return s.ctl->entries[seq % kBoardEntries].payload;
      case BoardPlace::kSlot:
        return s.slots + uint64_t{seq % kBoardEntries} * slot_bytes_;
      default:
        return s.payload[seq & 1];
    }
  }
  BoardEntry& entry(int rank, uint32_t seq) const {
    return sides_[static_cast<size_t>(rank)].ctl->entries[seq % kBoardEntries];
  }

  int rank_;
  uint64_t capacity_;
  uint64_t slot_bytes_;
  std::vector<Side> sides_;  // indexed by rank
  SegmentView mine_;         // this rank's segment (its slots name the peers' traffic cells)
  // Rings the doorbells of the ranks that armed a bell on this rank's side.
  void ringBells();

  // Posts made since the last publish(): `unpublished_` of them, from `unpublished_from_` on.
  uint32_t unpublished_from_ = 0;
  uint32_t unpublished_ = 0;
};

}  // namespace braid::shm
