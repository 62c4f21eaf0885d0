#include "transport/shm/shm_board.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "core/net/doorbell.h"

namespace braid::shm {
namespace {

// Shared (not FUTEX_PRIVATE_FLAG) futexes: the word lives in a MAP_SHARED file mapping that other
// processes wait on.
long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// How long a poster waiting for a peer to consume sleeps between looks (sleepUntilConsumed).
constexpr int64_t kConsumedPollUs = 50;

bool Reached(uint32_t value, uint32_t seq) {
  return static_cast<int32_t>(value - seq) >= 0;
}

// Sleeps on `word` until it reaches `seq` or about `timeout_us` passes, counted in `waiters` so
// that the writer wakes it. seq_cst on both sides: either the sleeper sees the new value (and
// does not sleep), or the writer sees the waiter count and wakes it (the futex also re-checks the
// word). Returns whether the word reached `seq`.
bool SleepUntil(std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters, uint32_t seq,
                int64_t timeout_us) {
  waiters.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = word.load(std::memory_order_seq_cst);
  if (!Reached(seen, seq)) {
    timespec ts{static_cast<time_t>(timeout_us / 1000000),
                static_cast<long>(timeout_us % 1000000) * 1000};
    // Returns at once when the word is no longer `seen` (EAGAIN), on a wake, a signal or the
    // timeout; the caller looks again either way.
    (void)Futex(&word, FUTEX_WAIT, seen, &ts);
  }
  waiters.fetch_sub(1, std::memory_order_seq_cst);
  return Reached(word.load(std::memory_order_acquire), seq);
}

}  // namespace

ShmBoard::ShmBoard(int rank, int nranks, const SegmentView& mine)
    : rank_(rank),
      capacity_(mine.layout.board_bytes),
      slot_bytes_(mine.layout.boardSlotBytes()),
      sides_(static_cast<size_t>(nranks)),
      mine_(mine) {
  attach(sides_[static_cast<size_t>(rank)], mine);
}

void ShmBoard::attach(Side& s, const SegmentView& view) {
  s.ctl = view.board();
  s.slots = view.boardSlot(0);
  s.payload[0] = view.boardPayload(0);
  s.payload[1] = view.boardPayload(1);
  s.map = view.mapping;
}

bool ShmBoard::addPeer(int peer, const SegmentView& theirs, std::shared_ptr<PeerLink> link) {
  if (peer < 0 || peer >= static_cast<int>(sides_.size()) || peer == rank_ || !theirs.board() ||
      theirs.layout.board_bytes != capacity_)
    return false;
  Side& s = sides_[static_cast<size_t>(peer)];
  attach(s, theirs);
  s.link = std::move(link);
  if (const int slot = theirs.slotOf(rank_); slot >= 0) s.mine_there = theirs.boardTraffic(slot);
  if (const int slot = mine_.slotOf(peer); slot >= 0) s.theirs_here = mine_.boardTraffic(slot);
  return true;
}

void ShmBoard::traffic(int rank, uint64_t* sent, uint64_t* received) const {
  if (!covers(rank) || rank == rank_) return;
  const Side& s = sides_[static_cast<size_t>(rank)];
  if (s.theirs_here) {
    *sent += s.theirs_here->read.load(std::memory_order_relaxed);
    *received += s.theirs_here->written.load(std::memory_order_relaxed);
  }
  if (s.mine_there) {
    *sent += s.mine_there->written.load(std::memory_order_relaxed);
    *received += s.mine_there->read.load(std::memory_order_relaxed);
  }
}

void ShmBoard::post(uint32_t seq, const BoardSignature& sig) {
  BoardControl* ctl = sides_[static_cast<size_t>(rank_)].ctl;
  BoardEntry& e = ctl->entries[seq % kBoardEntries];
  std::memcpy(e.signature.words, sig.words, sizeof(sig.words));
  // Release, not sequentially consistent: a seq_cst store drains the store buffer, and each post
  // writes a line a peer last read (a miss), so posting a group of calls would stall once per
  // call (-m 8 in docs/performance.md: this store was a sixth of the time). publish() fences once.
  e.seq.store(seq, std::memory_order_release);
  if (unpublished_ == 0) unpublished_from_ = seq;
  ++unpublished_;
}

void ShmBoard::publish() {
  if (unpublished_ == 0) return;
  BoardControl* ctl = sides_[static_cast<size_t>(rank_)].ctl;
  // Store(s); fence; load waiters, against the sleeper's seq_cst increment of waiters and load of
  // the word (SleepUntil): either the sleeper sees the post or this rank sees the sleeper.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ctl->waiters.load(std::memory_order_relaxed) != 0) {
    // Rare (a reader outran its spin): wake the sleepers of every post published now (at most
    // kBoardEntries words; posts wrap only after their readers consumed them), and the progress
    // loops that armed a bell.
    const uint32_t n = std::min<uint32_t>(unpublished_, kBoardEntries);
    for (uint32_t k = 0; k < n; ++k)
      (void)Futex(&ctl->entries[(unpublished_from_ + unpublished_ - n + k) % kBoardEntries].seq,
                  FUTEX_WAKE, INT_MAX, nullptr);
    ringBells();
  }
  unpublished_ = 0;
}

void ShmBoard::ringBells() {
  BoardControl* ctl = sides_[static_cast<size_t>(rank_)].ctl;
  for (uint32_t w = 0; w < kBoardBellWords; ++w) {
    if (ctl->bells[w].load(std::memory_order_relaxed) == 0) continue;
    uint64_t bits = ctl->bells[w].exchange(0, std::memory_order_acq_rel);
    while (bits) {
      const int r = static_cast<int>(w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
      bits &= bits - 1;
      if (r < static_cast<int>(sides_.size()) && sides_[static_cast<size_t>(r)].link)
        Doorbell::Ring(sides_[static_cast<size_t>(r)].link->doorbell());
    }
  }
}

bool ShmBoard::armBell(int rank) {
  if (rank_ >= kBoardBellRanks) return false;
  BoardControl* ctl = sides_[static_cast<size_t>(rank)].ctl;
  // Counted in waiters first, then the bit: either the owner's publish() sees both after its
  // fence (and rings), or this rank's check after arming sees the post (seq_cst on both sides,
  // as for the futex sleepers).
  ctl->waiters.fetch_add(1, std::memory_order_seq_cst);
  ctl->bells[static_cast<uint32_t>(rank_) / 64].fetch_or(uint64_t{1} << (rank_ % 64),
                                                         std::memory_order_seq_cst);
  return true;
}

void ShmBoard::disarmBell(int rank) {
  if (rank_ >= kBoardBellRanks) return;
  BoardControl* ctl = sides_[static_cast<size_t>(rank)].ctl;
  ctl->bells[static_cast<uint32_t>(rank_) / 64].fetch_and(~(uint64_t{1} << (rank_ % 64)),
                                                          std::memory_order_relaxed);
  ctl->waiters.fetch_sub(1, std::memory_order_seq_cst);
}

bool ShmBoard::sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) {
  return SleepUntil(entry(rank, seq).seq, sides_[static_cast<size_t>(rank)].ctl->waiters, seq,
                    timeout_us);
}

BoardSignature ShmBoard::signature(int rank, uint32_t seq) const {
  BoardSignature sig;
  std::memcpy(sig.words, entry(rank, seq).signature.words, sizeof(sig.words));
  return sig;
}

void ShmBoard::consume(uint32_t seq) {
  // Release only, and no wake: a poster rarely waits for it (a peer that keeps up has read what
  // it overwrites, local_board.h), so the sleeper polls (sleepUntilConsumed) rather than make
  // every call pay a fence and a load of a waiter count.
  sides_[static_cast<size_t>(rank_)].ctl->consumed.store(seq, std::memory_order_release);
}

bool ShmBoard::consumed(int rank, uint32_t seq) {
  Side& s = sides_[static_cast<size_t>(rank)];
  if (Reached(s.consumed_seen, seq)) return true;
  s.consumed_seen = s.ctl->consumed.load(std::memory_order_acquire);
  return Reached(s.consumed_seen, seq);
}

bool ShmBoard::sleepUntilConsumed(int rank, uint32_t seq, int64_t timeout_us) {
  const int64_t us = std::min<int64_t>(timeout_us, kConsumedPollUs);
  timespec ts{0, static_cast<long>(us) * 1000};
  (void)nanosleep(&ts, nullptr);
  return consumed(rank, seq);
}

Status ShmBoard::deathError(int rank) const {
  const Side& s = sides_[static_cast<size_t>(rank)];
  if (!s.link) return InternalError("rank " + std::to_string(rank) + " has no link on the board");
  return s.link->deathError();
}

}  // namespace braid::shm
