// A board in memory that every rank of a host maps: the small-message path (issue 11).
//
// Streams cost a message per peer and step, and a wake-up of the peer's progress loop for each.
// For a few KiB that is all the time there is. On a board each rank posts its contribution to a
// call (a signature and a payload) into its own memory, and every rank loads its peers' posts
// directly: one store, one flag, and N-1 loads per call, no syscall while the peers keep up
// (core/runtime/one_shot.h runs the collectives on it).
//
// Posts are numbered 1, 2, 3 ... alike on every rank (every rank makes the same calls in the same
// order). A rank's payload has two buffers, used by odd and even numbers: a rank posts call s + 1
// only after it has read every post of call s, so when a rank posts s + 2 every peer has finished
// reading its post s, which is what that buffer held. That holds as long as every rank waits for
// every peer's post of each call, which is what the one-shot collectives do (it also lets every
// rank compare every peer's signature: a call that differs fails on every rank).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"

namespace braid {

// What a rank posts about its call, compared bit for bit between ranks; the transport stores it
// and never reads it. Three words, so that the post number and both signatures fit one 64-byte
// cache line (shm_layout.h).
struct BoardSignature {
  uint64_t words[3] = {};
  friend bool operator==(const BoardSignature&, const BoardSignature&) = default;
};

class LocalBoard {
 public:
  virtual ~LocalBoard() = default;

  // Bytes of payload one post may carry.
  virtual uint64_t capacity() const = 0;
  // Whether `rank` (of the communicator) has a side on this board (this rank always has).
  virtual bool covers(int rank) const = 0;

  // Where this rank writes the payload of post `seq` (capacity() bytes), before post().
  virtual std::byte* outbox(uint32_t seq) = 0;
  // Publishes post `seq`: the signature, and the payload written to outbox(seq) (release).
  virtual void post(uint32_t seq, const BoardSignature& sig) = 0;

  // Whether `rank` has posted `seq` (acquire: its signature and payload are then visible).
  virtual bool posted(int rank, uint32_t seq) const = 0;
  // Sleeps until `rank` posts `seq` or about `timeout_us` passes; returns posted(rank, seq).
  // Costs a syscall: callers spin on posted() first.
  virtual bool sleepUntilPosted(int rank, uint32_t seq, int64_t timeout_us) = 0;
  // The signature and payload of `rank`'s post `seq` (valid once posted, until this rank posts
  // seq + 1).
  virtual BoardSignature signature(int rank, uint32_t seq) const = 0;
  virtual const std::byte* inbox(int rank, uint32_t seq) const = 0;

  // Whether `rank`'s process has exited (cheap: asks the kernel at most every few ms), and the
  // error that names it (also reported as a failure cause).
  virtual bool dead(int rank) = 0;
  virtual Status deathError(int rank) const = 0;
};

}  // namespace braid
