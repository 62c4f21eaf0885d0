// A board in memory that every rank of a host maps: the windows of one-sided schedules (IR v3,
// algorithms/board_schedules.h) and their counters.
//
// Streams cost a message per peer and step, and a wake-up of the peer's progress loop for each.
// For a few KiB that is all the time there is. On a board each rank posts its contribution to a
// call (a signature and a payload) into its own memory, and every rank loads its peers' posts
// directly: one store, one flag, and N-1 loads per call, no syscall while the peers keep up
// (core/runtime/one_sided_run.h executes the schedules on it). A post's number is the
// schedule's kPosted counter, consume() its kConsumed; a window of post s at a place is the
// payload of post s there (outbox for this rank's, inbox / peerWindow for a peer's).
//
// Posts are numbered 1, 2, 3 ... alike on every rank (every rank makes the same calls in the same
// order; a two-shot all-reduce makes two posts per round, the second from what it read of the
// first), and every rank reads every peer's post of each call (which also lets every rank compare
// every peer's signature: a call that differs fails on every rank). A rank may post calls ahead of
// reading the ones before (a group of small calls: one wait for all of them), so it tells its
// peers how far it has read: consume(s) says it has read every peer's posts up to s.
//
// Where a post lives (BoardPlace) sets what a poster waits for before it writes post s:
// - its entry s % kEntries (signature, and the payload of a tiny call) and a small call's slot
//   s % kEntries were last used by post s - kEntries: every peer must have consumed it;
// - a large call's buffer s & 1 was last used by a post no later than s - 2: every peer must
//   have consumed s - 2.
// A call by reference (algorithms/board_schedules.h) posts addresses, not data: all its posts are
// in entries.
// Calls take their posts in the order they were issued (BoardClock, core/runtime/one_sided_run.h),
// and may post before earlier calls are read. Why no interleaving of the ranks deadlocks: let c be
// the last post every rank has consumed. Every rank's call that holds post c + 1 can make it (its
// reuse waits ask for c + 1 - 2 at most, and its window was freed), every rank then reads it (a
// read waits only for that post) and consumes it. A call's stream stage (a call on the engine
// after its board agreement) never waits for a later post, so the calls that hold the engine's
// window ahead of c + 1 complete too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"

namespace braid {

// What a rank posts about its call, compared bit for bit between ranks; the transport stores it
// and never reads it. Three words, so that a post's number and signature fit one 64-byte cache
// line (shm_layout.h).
struct BoardSignature {
  uint64_t words[3] = {};
  friend bool operator==(const BoardSignature&, const BoardSignature&) = default;
};

// Where a post's payload lives: in its entry, beside its number and signature (a tiny call: the
// reader's one cache miss brings all of it), in one of kEntries small slots, or in one of two
// large buffers.
enum class BoardPlace : uint8_t { kEntry, kSlot, kBuffer };

class LocalBoard {
 public:
  // Posts a rank may have made beyond the last one every peer has consumed.
  static constexpr uint32_t kEntries = 16;

  virtual ~LocalBoard() = default;

  // Bytes of payload one post may carry, in a large buffer (capacity()), a slot or an entry.
  virtual uint64_t capacity() const = 0;
  virtual uint64_t slotCapacity() const = 0;
  virtual uint64_t entryCapacity() const = 0;
  // Where a call whose largest post (on any rank) holds `bytes` lives: every rank must place a
  // call alike, so by that, not by its own post (a broadcast's root posts a block, the others
  // nothing).
  BoardPlace placeFor(uint64_t bytes) const {
    return bytes <= entryCapacity()  ? BoardPlace::kEntry
           : bytes <= slotCapacity() ? BoardPlace::kSlot
                                     : BoardPlace::kBuffer;
  }
  // Whether `rank` (of the communicator) has a side on this board (this rank always has).
  virtual bool covers(int rank) const = 0;

  // Where this rank writes the payload of post `seq`, placed at `place`, before post(). Windows
  // repeat every kEntries posts: outbox(seq + kEntries, p) == outbox(seq, p), and likewise
  // inbox and peerWindow (callers look them up once per board).
  virtual std::byte* outbox(uint32_t seq, BoardPlace place) = 0;
  // Makes post `seq` visible: the signature, and the payload written to outbox(seq, place) (a
  // release store of its number; spinning readers see it without more).
  virtual void post(uint32_t seq, const BoardSignature& sig) = 0;
  // Wakes the readers that sleep on the posts made since the last publish() (one fence for all
  // of them, paired with a sleeping reader's futex). A rank publishes after posting a batch and
  // before it waits for anything (a peer may sleep on one of its posts meanwhile).
  virtual void publish() = 0;

  // Whether `rank` has posted `seq` (acquire: its signature and payload are then visible).
  virtual bool posted(int rank, uint32_t seq) const = 0;
  // Sleeps until `rank` posts `seq` or about `timeout_us` passes; returns posted(rank, seq).
  // Costs a syscall: callers spin on posted() first.
  virtual bool sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) = 0;
  // The signature and payload of `rank`'s post `seq` (valid once posted, until this rank
  // consumes seq).
  virtual BoardSignature signature(int rank, uint32_t seq) const = 0;
  virtual const std::byte* inbox(int rank, uint32_t seq, BoardPlace place) const = 0;
  // The same window, writable: a put writes a peer's window in place.
  virtual std::byte* peerWindow(int rank, uint32_t seq, BoardPlace place) = 0;

  // Starts loading `rank`'s post `seq` (its entry, and the first line of its payload) into this
  // core's cache. A rank about to read several posts asks for all of them first, so that their
  // misses overlap instead of coming one after another.
  virtual void prefetch(int rank, uint32_t seq, BoardPlace place) const = 0;

  // Tells the peers that this rank has read every post up to `seq` (release).
  virtual void consume(uint32_t seq) = 0;
  // Whether `rank` has consumed `seq` (acquire); the peer's word is loaded only when what this
  // rank last saw of it is not enough.
  virtual bool consumed(int rank, uint32_t seq) = 0;
  // Sleeps a little (until `rank` consumes `seq`, at most `timeout_us`); returns
  // consumed(rank, seq). Rarely needed (a peer that keeps up has consumed what a post
  // overwrites), so it may poll.
  virtual bool sleepUntilConsumed(int rank, uint32_t seq, int64_t timeout_us) = 0;

  // A progress loop that sleeps in poll() (the engine's) rather than on a futex: armBell asks
  // `rank` to ring this rank's doorbell at its next publish(); the caller then checks once more
  // whether what it waits for happened, and polls its doorbell. disarmBell after the sleep.
  // False when the board cannot ring for this rank (the caller then polls with a short timeout).
  virtual bool armBell(int rank) = 0;
  virtual void disarmBell(int rank) = 0;

  // Traffic: this rank read `bytes` of `rank`'s posts or exposed buffers, or wrote `bytes` into
  // its windows (one store to a line only this rank writes: no cost a call would notice).
  virtual void countRead(int rank, uint64_t bytes) = 0;
  virtual void countWritten(int rank, uint64_t bytes) = 0;
  // The bytes moved through the board between this rank and `rank` since init, as a transport
  // counts them: sent (what `rank` read of this rank's and this rank wrote into `rank`'s) and
  // received (the other way). Adds to *sent and *received.
  virtual void traffic(int rank, uint64_t* sent, uint64_t* received) const = 0;

  // How many collectives of the communicator this rank has started (its engine took them up, in
  // call order, before any of their data moved): announceStarted stores it (release), started
  // reads a peer's (acquire). A rank that waits on the board for a peer that sends it stream data
  // learns from it whether that peer is in the call too (the data is for a later operation that
  // runs beside it) or has not reached it (a mismatch: Engine::failBoardStragglers).
  virtual void announceStarted(uint64_t calls) = 0;
  virtual uint64_t started(int rank) const = 0;

  // Whether `rank`'s process has exited (cheap: asks the kernel at most every few ms), and the
  // error that names it (also reported as a failure cause).
  virtual bool dead(int rank) = 0;
  virtual Status deathError(int rank) const = 0;
};

}  // namespace braid
