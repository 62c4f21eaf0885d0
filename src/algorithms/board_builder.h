// Building a board schedule (board_schedules.h): one rank's steps on one channel, its windows,
// and the steps every form repeats (signals, waits for every peer, the reuse rule, the
// rank-order fold). Shared by the board's forms and the put-based proof vehicle.
#pragma once

#include <utility>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/schedule_builder.h"

namespace braid::board {

// One rank's board schedule under construction: one channel of steps (the board's calls run on
// one thread), windows added to the buffer table as they are named.
class Builder {
 public:
  Builder(const CollArgs& a, int rank) : a_(a), me_(rank), n_(a.nranks) {
    s_.channels.resize(1);
    s_.buffers.resize(kFirstUserBuf);
  }

  // A window of this rank's (and, named with another rank, that peer's) on the board.
  uint16_t window(WindowPlace place, uint32_t post, DataType dtype, uint64_t count) {
    BufferDesc b;
    b.role = BufferRole::kWindow;
    b.dtype = dtype;
    b.count = count;
    b.place = place;
    b.post = post;
    s_.buffers.push_back(b);
    return static_cast<uint16_t>(s_.buffers.size() - 1);
  }
  // Rank r's part of window or exposed buffer `buf` (a local slice for this rank).
  Slice of(int r, uint16_t buf, uint64_t off, uint64_t len) const {
    return Slice(buf, off, len, r == me_ ? kLocal : static_cast<int16_t>(r));
  }
  static Slice local(uint16_t buf, uint64_t off, uint64_t len) { return Slice(buf, off, len); }

  void step(std::vector<StepOp> ops) { AddStep(s_.channels[0], Step(std::move(ops))); }
  static StepOp op(StepOpKind k, Slice src, Slice dst) {
    StepOp o{k};
    o.src = src;
    o.dst = dst;
    return o;
  }
  void copy(Slice src, Slice dst) {
    if (src.count) step({op(src.remote() ? StepOpKind::kGet : StepOpKind::kCopy, src, dst)});
  }
  void signal(Counter c, int32_t value) {
    StepOp o{StepOpKind::kSignal};
    o.counter = c;
    o.value = value;
    step({o});
  }
  // One step waiting for every peer's `c` to reach `value`, from the next rank on (so that the
  // ranks do not all look at rank 0 first).
  void waitAll(Counter c, int32_t value) {
    std::vector<StepOp> ops;
    for (int k = 1; k < n_; ++k) {
      StepOp o{StepOpKind::kWait};
      o.peer = (me_ + k) % n_;
      o.counter = c;
      o.value = value;
      ops.push_back(o);
    }
    step(std::move(ops));
  }
  // Before post `post` writes its window at `place` (and its entry): every rank has consumed what
  // that memory held, post - WindowDepth(place) (the entry's, post - kWindowEntries, is older).
  // Every rank includes this one: its own earlier calls read their own windows too, and calls run
  // side by side (the engine's window, a group on the board), so a later call must not overwrite
  // a post an earlier call of this rank has yet to fold. The rank's own counter covers them all
  // (BoardClock publishes it only past every post all of its calls have read).
  void waitFree(uint32_t post, WindowPlace place) {
    const int32_t held = static_cast<int32_t>(post) - static_cast<int32_t>(WindowDepth(place));
    std::vector<StepOp> ops;
    for (int k = 1; k <= n_; ++k) {
      StepOp o{StepOpKind::kWait};
      o.peer = (me_ + k) % n_;  // the peers from the next rank on, then this rank
      o.counter = Counter::kConsumed;
      o.value = held;
      ops.push_back(o);
    }
    step(std::move(ops));
  }
  // dst = rank-order fold of `srcs[0..N)` (x0 op x1 op ... op xN-1): every rank folds alike, so
  // every rank that computes an element computes the same bits.
  void fold(const std::vector<Slice>& srcs, Slice dst) {
    if (dst.count == 0) return;
    if (srcs.size() == 1) {  // one rank: its own contribution is the result
      if (!(srcs[0].buffer == dst.buffer && srcs[0].offset == dst.offset && !srcs[0].remote()))
        copy(srcs[0], dst);
      return;
    }
    StepOp first{StepOpKind::kCombine};
    first.src = srcs[0];
    first.src2 = srcs[1];
    first.dst = dst;
    step({first});
    for (size_t r = 2; r < srcs.size(); ++r) step({op(StepOpKind::kReduce, srcs[r], dst)});
  }
  // dst (the peer `dst.rank`'s window) = src.
  void put(Slice src, Slice dst) {
    if (src.count) step({op(StepOpKind::kPut, src, dst)});
  }
  void expose(uint16_t buf) {
    StepOp o{StepOpKind::kExpose};
    o.src = Slice(buf, 0, 0);
    step({o});
  }

  RankSchedule take() { return std::move(s_); }

 private:
  const CollArgs& a_;
  const int me_;
  const int n_;
  RankSchedule s_;
};

}  // namespace braid::board
