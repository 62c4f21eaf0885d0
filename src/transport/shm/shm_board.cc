#include "transport/shm/shm_board.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

namespace braid::shm {
namespace {

// Shared (not FUTEX_PRIVATE_FLAG) futexes: the word lives in a MAP_SHARED file mapping that other
// processes wait on.
long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

}  // namespace

ShmBoard::ShmBoard(int rank, int nranks, const SegmentView& mine)
    : rank_(rank), capacity_(mine.layout.board_bytes), sides_(static_cast<size_t>(nranks)) {
  Side& s = sides_[static_cast<size_t>(rank)];
  s.ctl = mine.board();
  s.payload[0] = mine.boardPayload(0);
  s.payload[1] = mine.boardPayload(1);
  s.map = mine.mapping;
}

bool ShmBoard::addPeer(int peer, const SegmentView& theirs, std::shared_ptr<PeerLink> link) {
  if (peer < 0 || peer >= static_cast<int>(sides_.size()) || peer == rank_ || !theirs.board() ||
      theirs.layout.board_bytes != capacity_)
    return false;
  Side& s = sides_[static_cast<size_t>(peer)];
  s.ctl = theirs.board();
  s.payload[0] = theirs.boardPayload(0);
  s.payload[1] = theirs.boardPayload(1);
  s.map = theirs.mapping;
  s.link = std::move(link);
  return true;
}

void ShmBoard::post(uint32_t seq, const BoardSignature& sig) {
  BoardControl* ctl = sides_[static_cast<size_t>(rank_)].ctl;
  std::memcpy(ctl->signatures[seq & 1].words, sig.words, sizeof(sig.words));
  // seq_cst store and load: either a peer about to sleep sees the new number (and does not
  // sleep), or this rank sees its waiter count and wakes it (the futex also re-checks the word).
  ctl->posted.store(seq, std::memory_order_seq_cst);
  if (ctl->waiters.load(std::memory_order_seq_cst) != 0)
    (void)Futex(&ctl->posted, FUTEX_WAKE, INT_MAX, nullptr);
}

bool ShmBoard::sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) {
  BoardControl* ctl = sides_[static_cast<size_t>(rank)].ctl;
  ctl->waiters.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = ctl->posted.load(std::memory_order_seq_cst);
  if (static_cast<int32_t>(seen - seq) < 0) {
    timespec ts{static_cast<time_t>(timeout_us / 1000000),
                static_cast<long>(timeout_us % 1000000) * 1000};
    // Returns at once when the word is no longer `seen` (EAGAIN), on a wake, a signal or the
    // timeout; the caller looks again either way.
    (void)Futex(&ctl->posted, FUTEX_WAIT, seen, &ts);
  }
  ctl->waiters.fetch_sub(1, std::memory_order_seq_cst);
  return posted(rank, seq);
}

BoardSignature ShmBoard::signature(int rank, uint32_t seq) const {
  BoardSignature sig;
  std::memcpy(sig.words, sides_[static_cast<size_t>(rank)].ctl->signatures[seq & 1].words,
              sizeof(sig.words));
  return sig;
}

Status ShmBoard::deathError(int rank) const {
  const Side& s = sides_[static_cast<size_t>(rank)];
  if (!s.link) return InternalError("rank " + std::to_string(rank) + " has no link on the board");
  return s.link->deathError();
}

}  // namespace braid::shm
