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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/base/status.h"
#include "core/runtime/operation.h"
#include "device/cpu/reduce_kernels.h"
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
  // here); `scratch` is memory for pieces read across processes. The schedule is compiled into
  // the run's program the first time the run sees it (the run keeps it alive, so a later call
  // of the same plan, the common case, reuses the program); nothing allocates then.
  void start(braidComm& comm, const std::shared_ptr<const RankSchedule>& s, const OpDesc& d,
             const BoardSignature& sig, std::span<std::byte* const> slots,
             std::vector<std::byte>* scratch);
  // The call's description moved to `d` (an equal copy: Engine::startCall makes the operation
  // of a started call only once it waits).
  void rebind(const OpDesc& d) { d_ = &d; }

  // Runs steps until the schedule ends or a wait is not met; *moved when anything ran. An error
  // is the call's: a mismatch (invalid usage; mismatched() then holds) or a failed read across
  // processes. The run publishes its posts itself (a step that posted, before it polls a peer)
  // unless `defer_publish`: then the caller publishes the board once for a batch of calls, after
  // advancing them all and before it waits (LocalBoard::publish).
  Status advance(bool* moved, bool defer_publish = false);
  bool finished() const { return step_ >= steps_.size(); }
  bool mismatched() const { return mismatch_; }
  uint32_t epoch() const { return epoch_; }
  // Posts this call takes: the schedule's, or one after a mismatch at its first post.
  uint32_t posts() const { return mismatch_ ? 1 : posts_; }
  // Whether the run has made its last post (what is left reads, and consumes).
  bool pastLastPost() const { return step_ > last_post_step_; }
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
  // The schedule compiled for this executor (compile()): every slice resolved to a base (one of
  // the call's slots, or a window on the board bound at start()) and a byte offset, element
  // sizes and traffic worked out, each step's waits before its data ops. Interpreting the
  // schedule's ops directly cost about three times the instructions of the board's old
  // hand-written executor per small call (docs/performance.md "One IR").
  struct Ref {
    uint32_t base = 0;    // index into base_ (exposed: the buffer slot)
    int16_t peer = -1;    // >= 0: a buffer that peer exposed (read across processes)
    uint64_t offset = 0;  // bytes
  };
  struct Op {
    StepOpKind kind = StepOpKind::kCopy;
    Counter counter = Counter::kPosted;
    DataType dtype = DataType::kUint8;  // of dst (reductions, scale, divide)
    bool first_post = false;            // kWait: a peer's first post of the call (its agreement)
    int32_t peer = -1;                  // kWait
    int32_t value = 0;                  // kSignal, kWait: relative to the epoch
    uint64_t count = 0;                 // elements (of dst; of src for copies)
    uint64_t bytes = 0;                 // src bytes (copy, get, put)
    Ref src, src2, dst;
    // Traffic (LocalBoard::countRead / countWritten): a peer read from, a second one, a peer
    // written into; -1 none.
    int16_t read_peer = -1, read_peer2 = -1, write_peer = -1;
    bool traffic = false;  // any of the three: count() has something to add
    uint64_t read_bytes = 0, read_bytes2 = 0;
  };
  struct StepRange {
    uint32_t begin = 0, data = 0, end = 0;  // waits [begin, data), the rest [data, end)
  };
  struct WindowBinding {
    uint32_t base = 0;  // index into base_
    uint16_t buffer = 0;
    int16_t rank = -1;  // -1: this rank's
    BoardPlace place = BoardPlace::kEntry;
    uint32_t post = 0;
    // Its address for a call whose epoch + post is k modulo LocalBoard::kEntries (a window's
    // address repeats with that period), looked up once per board (tables_for_): two virtual
    // calls per window and call were a twentieth of an 8-byte call's instructions.
    std::byte* at[LocalBoard::kEntries] = {};
  };
  void compile(const RankSchedule& s, int me);
  // Inlined into advance(): out of line, its call (the whole switch's registers saved, a Status
  // returned through memory) was about 100 instructions of an 8-byte call's 2 100.
  [[gnu::always_inline]] inline Status runOp(const Op& op);
  [[gnu::always_inline]] inline void count(const Op& op);
  std::byte* at(const Ref& r) const { return base_[r.base] + r.offset; }
  // The address of `r` when it is readable in this process; null for a peer's exposed buffer.
  const std::byte* readable(const Ref& r) const { return r.peer >= 0 ? nullptr : at(r); }
  Status pull(const Ref& r, uint64_t from, uint64_t bytes, std::byte* dst);
  // dst = src2 op src (kCombine), or dst = dst op src (src2 null: kReduce), where either source may
  // be a peer's exposed buffer, read in pieces.
  Status reduce(const Op& op, bool combine);
  bool waitMet(const Op& op) const;
  // A kPosted wait met: the peer's signature compared (an error on a mismatch), its first post's
  // exposure record taken.
  [[gnu::always_inline]] inline Status agreeWith(const Op& op);
  // The call's signature differs from `theirs` (rank op.peer's): fails the call on this rank
  // (every rank finds a difference at this call).
  Status mismatchWith(const Op& op, const BoardSignature& theirs);
  // Every post of the call read: the clock may publish past it.
  void finish();

  // The program (valid while `compiled_` is kept alive).
  std::shared_ptr<const RankSchedule> compiled_;
  int compiled_rank_ = -1;
  std::vector<Op> ops_;
  std::vector<StepRange> steps_;
  std::vector<WindowBinding> windows_;
  const LocalBoard* tables_for_ = nullptr;  // the board windows_' addresses were looked up on
  uint32_t nslots_ = 0;
  uint32_t posts_ = 0;
  uint32_t last_post_step_ = 0;  // the compiled step holding the schedule's last post
  bool exposure_ = false;
  // The reductions' element type when they share one (-1 none, -2 several): their kernel is
  // resolved at start() for the call's op, not dispatched per reduction.
  int reduce_dtype_ = -1;
  ReduceKernelFn reduce_fn_ = nullptr;
  int reduce_fn_op_ = -1;  // the op reduce_fn_ was resolved for

  // The call.
  braidComm* comm_ = nullptr;
  LocalBoard* board_ = nullptr;
  const OpDesc* d_ = nullptr;
  uint32_t epoch_ = 0;
  BoardSignature sig_;
  std::vector<std::byte*> base_;  // the call's slots, then its windows
  std::vector<std::byte>* scratch_ = nullptr;
  size_t step_ = 0;
  uint64_t met_ = 0;  // the current step's waits met (a bit per wait; waits past 64 are redone)
  bool mismatch_ = false;
  bool agreed_ = false;
  bool settled_ = false;              // the clock knows how many posts the call takes
  int first_waits_ = 0;               // peers whose first post was seen
  std::vector<uint32_t> seen_first_;  // per peer: the epoch whose first post was seen
  // Exposed buffers of peers (their first post's record): [peer][slot] addresses.
  std::vector<uint64_t> exposed_;
  Blocked blocked_;
  bool unpublished_ = false;
};

}  // namespace braid
