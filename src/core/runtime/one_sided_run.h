// Executing one rank's one-sided schedule (IR v3, algorithms/board_schedules.h) over the host's
// board (transport/local_board.h): the engine's mode for steps over exposed memory.
//
// A OneSidedRun holds where one call's schedule is: its step, which waits of the step are met,
// and what it bound (the user's buffers, scratch, the call's epoch on the board). advance() runs
// steps until one waits for a peer, and returns: it never blocks. Whoever drives calls it: the
// engine's progress loop (the thread, or a caller in braidWait), or, for a blocking call on an
// idle engine, the caller itself through RunToCompletion, which spins on the peer's flag, then
// sleeps on it (futex), without a message, a syscall or a progress thread while peers keep up.
//
// What it does per op kind: copy / scale / reduce / divide locally; get from a peer's window (a
// load from its mapped memory) or from a buffer the peer exposed (a cross-memory read); put into
// a peer's window; combine two operands into a third; expose a buffer (its address goes into the
// record that the call's first post carries); signal kPosted (post: the call's signature with
// it) or kConsumed (through the communicator's BoardClock, which publishes only a number every
// earlier post has reached); wait for a peer's counter. The first time a wait sees a peer's post
// it compares the peer's signature with this rank's: the call agreement. A difference fails the
// call with invalid usage on every rank, before the call writes a user buffer (the lowering
// checks that every one-sided schedule waits for every peer's first post before it writes one),
// and the call then takes one post, whatever its schedule would have taken, so that every rank
// numbers the next call alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/base/status.h"
#include "core/runtime/operation.h"
#include "transport/local_board.h"

struct braidComm;

namespace braid {

// Posts on a communicator's board: which number the next call takes, and how far this rank has
// consumed (LocalBoard::consume), for calls that run at once (a group posted ahead, operations in
// flight). Touched only by whoever drives the communicator's engine.
class BoardClock {
 public:
  // The next call's epoch, or 0 while it is not known yet: a call of several posts decides at its
  // agreement how many it takes (all of them, or one after a mismatch).
  uint32_t next() const { return open_ ? 0 : next_; }
  // Takes `posts` numbers from next() for a call; `known` false: the call will say how many at its
  // agreement (settle). Returns the call's epoch.
  uint32_t take(uint32_t posts, bool known);
  // The call of `epoch` took `posts` posts (its agreement is over).
  void settle(uint32_t epoch, uint32_t posts);
  // The call of `epoch` has read every post through `through`; `done` once it reads no more.
  // Returns the number every post up to which every call has read (to publish), or 0.
  uint32_t consumed(uint32_t epoch, uint32_t through, bool done);

 private:
  struct Call {
    uint32_t epoch = 0;
    uint32_t through = 0;  // posts read (absolute); epoch - 1: none yet
    uint32_t last = 0;     // its last post, once known
    bool done = false;
  };
  static constexpr size_t kCalls = 64;
  uint32_t next_ = 1;
  bool open_ = false;  // the newest call's post count is not known yet
  uint32_t published_ = 0;
  Call calls_[kCalls];  // calls in flight, a ring in epoch order
  size_t head_ = 0, count_ = 0;
};

// The call's signature on the board (LocalBoard::post): what every rank must have called,
// compared bit for bit; `form` tells the schedule every rank built (a board form, or the engine).
BoardSignature BoardSignatureOf(const OpDesc& d, int nranks, uint8_t form);
// "allreduce(count=8, float, sum) (two-shot)" for a peer's signature.
std::string DescribeBoardSignature(const BoardSignature& s);

class OneSidedRun {
 public:
  // Starts `s` (this rank's lowered schedule, posts > 0) for the call `d` of `comm`, on its board:
  // takes the call's posts from comm.boardClock() (whose next() must not be 0). `slots` holds
  // the base of every buffer slot that is not a window (user buffers, scratch; windows are bound
  // here); `scratch` is memory for pieces read across processes. Neither allocates once the
  // vectors have grown (a run is reused call after call).
  void start(braidComm& comm, const RankSchedule& s, const OpDesc& d, const BoardSignature& sig,
             std::span<std::byte* const> slots, std::vector<std::byte>* scratch);

  // Runs steps until the schedule ends or a wait is not met; *moved when anything ran. An error
  // is the call's: a mismatch (invalid usage; mismatched() then holds) or a failed read across
  // processes.
  Status advance(bool* moved);
  bool finished() const { return step_ >= steps_->size(); }
  bool mismatched() const { return mismatch_; }
  uint32_t epoch() const { return epoch_; }
  // Posts this call takes: the schedule's, or one after a mismatch at its first post.
  uint32_t posts() const { return mismatch_ ? 1 : sched_->posts; }
  // Whether the run has made its last post (what is left reads, and consumes).
  bool pastLastPost() const { return step_ > sched_->last_post_step; }
  // Whether the call's agreement is over (every peer's first post seen and compared).
  bool agreed() const { return agreed_; }

  // What the current step waits for (valid while !finished() after advance() returned).
  struct Blocked {
    int peer = -1;
    Counter counter = Counter::kPosted;
    uint32_t value = 0;  // absolute post number
  };
  Blocked blocked() const { return blocked_; }
  // Whether the peer's counter has reached what the run waits for (cheap: one load).
  bool blockedReady() const;
  std::string describe() const;  // "step 3/7, waiting for rank 2's post 41"
  // Publishes this rank's posts made so far (wakes sleeping peers).
  void publish();

 private:
  Status runOp(const StepOp& op);
  // The board's traffic counters: the bytes `op` (run) read from peers or wrote into them.
  void count(const StepOp& op);
  std::byte* local(const Slice& sl) const {
    return slots_[sl.buffer] + sl.offset * elsize_[sl.buffer];
  }
  // Where a window of this schedule is: this rank's, or peer `rank`'s.
  std::byte* window(uint16_t buf, int rank) const;
  // The address of slice `sl` when it is readable in this process (a local slice, or a peer's
  // window); null for a peer's exposed buffer (read across processes: pull()).
  const std::byte* readable(const Slice& sl) const;
  Status pull(const Slice& sl, uint64_t from, uint64_t n, std::byte* dst);
  // dst = src2 op src (kCombine), or dst = dst op src (src2 null: kReduce), where either source may
  // be a peer's exposed buffer, read in pieces.
  Status reduce(const StepOp& op, bool combine);
  bool waitMet(const StepOp& op);
  // Every post of the call read: the clock may publish past it.
  void finish();

  braidComm* comm_ = nullptr;
  LocalBoard* board_ = nullptr;
  const RankSchedule* sched_ = nullptr;
  const std::vector<Step>* steps_ = nullptr;
  const OpDesc* d_ = nullptr;
  uint32_t epoch_ = 0;
  BoardSignature sig_;
  std::vector<std::byte*> slots_;
  std::vector<uint32_t> elsize_;
  std::vector<std::byte>* scratch_ = nullptr;
  size_t step_ = 0;
  uint64_t met_ = 0;  // the current step's ops done (a bit per op; ops past 64 are redone)
  bool mismatch_ = false;
  bool agreed_ = false;
  bool settled_ = false;  // the clock knows how many posts the call takes
  int first_waits_ = 0;   // peers whose first post was seen
  std::vector<uint8_t> seen_first_;
  // Exposed buffers of peers (their first post's record): [peer][slot] addresses.
  std::vector<uint64_t> exposed_;
  Blocked blocked_;
  bool unpublished_ = false;
};

}  // namespace braid
