#include "algorithms/board_schedules.h"

#include "algorithms/board_builder.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

using board::Builder;

// Whether the board serves collectives of `kind` at all.
bool BoardServes(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduce:
    case CollKind::kBroadcast:
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
    case CollKind::kBarrier:
      return true;
    default:
      return false;
  }
}

// Two-shot from this many bytes and 3 ranks when BRAID_BOARD_TWO_SHOT is auto: where the bytes
// it saves outweigh its second wait (measured on 3, 4 and 8 ranks on 2 cores, one-shot ahead
// below; docs/performance.md).
constexpr uint64_t kTwoShotBytes = 32 << 10;

WindowPlace PlaceFor(const CollArgs::Board& b, uint64_t bytes) {
  return bytes <= b.entry_bytes  ? WindowPlace::kEntry
         : bytes <= b.slot_bytes ? WindowPlace::kSlot
                                 : WindowPlace::kBuffer;
}

bool TwoShot(const CollArgs& a, WindowPlace place) {
  if (a.kind != CollKind::kAllReduce || place != WindowPlace::kBuffer ||
      a.count < static_cast<uint64_t>(a.nranks))
    return false;
  if (a.board.two_shot != -1) return a.board.two_shot == 1;
  return a.nranks >= 3 && a.count * DataTypeSize(a.dtype) >= kTwoShotBytes;
}

bool ByReference(const CollArgs& a) {
  if (a.board.by_reference_from == 0) return false;
  switch (a.kind) {
    case CollKind::kAllReduce:
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kBroadcast:
      return BoardLargestPost(a) >= a.board.by_reference_from;
    default:
      return false;
  }
}

// Where this rank's input of `a` is: the send buffer, or (an all-gather in place) its own block
// of the receive buffer.
Slice InputOf(const CollArgs& a, int rank, uint64_t off, uint64_t len) {
  if (a.kind == CollKind::kAllGather && a.in_place)
    return Slice(kRecvBuf, static_cast<uint64_t>(rank) * a.count + off, len);
  return Slice(kSendBuf, off, len);
}

RankSchedule OneShot(const CollArgs& a, int me, WindowPlace place) {
  const int n = a.nranks;
  const uint64_t cnt = a.count;
  const auto N = static_cast<uint64_t>(n);
  const auto self = static_cast<uint64_t>(me);
  Builder b(a, me);
  const uint64_t esize = DataTypeSize(a.dtype);
  const uint64_t largest = BoardLargestPost(a) / esize;
  const uint16_t w = largest ? b.window(place, 0, a.dtype, largest) : 0;
  b.waitFree(0, place);
  uint64_t mine = 0;  // elements this rank posts
  switch (a.kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduce:
    case CollKind::kAllGather:
      mine = cnt;
      break;
    case CollKind::kBroadcast:
      mine = me == a.root ? cnt : 0;
      break;
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      mine = cnt * N;
      break;
    default:
      break;
  }
  if (mine) b.copy(InputOf(a, me, 0, mine), Builder::local(w, 0, mine));
  b.signal(Counter::kPosted, 0);
  b.waitAll(Counter::kPosted, 0);
  const auto windows = [&](uint64_t off) {
    std::vector<Slice> v;
    for (int r = 0; r < n; ++r) v.push_back(b.of(r, w, off, cnt));
    return v;
  };
  switch (a.kind) {
    case CollKind::kAllReduce:
      b.fold(windows(0), Slice(kRecvBuf, 0, cnt));
      break;
    case CollKind::kReduce:
      if (me == a.root) b.fold(windows(0), Slice(kRecvBuf, 0, cnt));
      break;
    case CollKind::kReduceScatter:
      b.fold(windows(self * cnt), Slice(kRecvBuf, 0, cnt));
      break;
    case CollKind::kAllGather: {
      std::vector<StepOp> ops;
      for (int r = 0; r < n; ++r) {
        if (r == me && a.in_place) continue;  // its block is its input already
        const Slice src = r == me ? InputOf(a, me, 0, cnt) : b.of(r, w, 0, cnt);
        if (cnt)
          ops.push_back(Builder::op(src.remote() ? StepOpKind::kGet : StepOpKind::kCopy, src,
                                    Slice(kRecvBuf, static_cast<uint64_t>(r) * cnt, cnt)));
      }
      if (!ops.empty()) b.step(std::move(ops));
      break;
    }
    case CollKind::kAllToAll: {
      std::vector<StepOp> ops;
      for (int r = 0; r < n; ++r) {
        const Slice src = r == me ? Slice(kSendBuf, self * cnt, cnt) : b.of(r, w, self * cnt, cnt);
        if (cnt)
          ops.push_back(Builder::op(src.remote() ? StepOpKind::kGet : StepOpKind::kCopy, src,
                                    Slice(kRecvBuf, static_cast<uint64_t>(r) * cnt, cnt)));
      }
      if (!ops.empty()) b.step(std::move(ops));
      break;
    }
    case CollKind::kBroadcast:
      if (me != a.root)
        b.copy(b.of(a.root, w, 0, cnt), Slice(kRecvBuf, 0, cnt));
      else if (!a.in_place)
        b.copy(Slice(kSendBuf, 0, cnt), Slice(kRecvBuf, 0, cnt));
      break;
    default:
      break;  // barrier: the posts are all of it
  }
  b.signal(Counter::kConsumed, 0);
  return b.take();
}

RankSchedule TwoShot(const CollArgs& a, int me, uint32_t rounds) {
  const int n = a.nranks;
  const auto N = static_cast<uint64_t>(n);
  Builder b(a, me);
  const uint64_t widest = EvenPart(a.count, rounds, 0).len;  // the first pieces are the longer
  for (uint32_t round = 0; round < rounds; ++round) {
    const ElemRange x = EvenPart(a.count, rounds, round);
    const uint32_t first = 2 * round, second = first + 1;
    const uint16_t wf = b.window(WindowPlace::kBuffer, first, a.dtype, widest);
    const uint16_t ws = b.window(WindowPlace::kBuffer, second, a.dtype, widest);
    b.waitFree(first, WindowPlace::kBuffer);
    b.copy(Slice(kSendBuf, x.off, x.len), Builder::local(wf, 0, x.len));
    b.signal(Counter::kPosted, static_cast<int32_t>(first));
    b.waitAll(Counter::kPosted, static_cast<int32_t>(first));
    // This rank's 1/N of the piece, folded from every first post into its second.
    b.waitFree(second, WindowPlace::kBuffer);
    const ElemRange part = EvenPart(x.len, N, static_cast<uint64_t>(me));
    std::vector<Slice> srcs;
    for (int r = 0; r < n; ++r) srcs.push_back(b.of(r, wf, part.off, part.len));
    b.fold(srcs, Builder::local(ws, part.off, part.len));
    b.signal(Counter::kConsumed, static_cast<int32_t>(first));
    b.signal(Counter::kPosted, static_cast<int32_t>(second));
    b.waitAll(Counter::kPosted, static_cast<int32_t>(second));
    // Every part from its owner's second post.
    std::vector<StepOp> ops;
    for (int r = 0; r < n; ++r) {
      const ElemRange y = EvenPart(x.len, N, static_cast<uint64_t>(r));
      if (y.len == 0) continue;
      const Slice src = b.of(r, ws, y.off, y.len);
      ops.push_back(Builder::op(src.remote() ? StepOpKind::kGet : StepOpKind::kCopy, src,
                                Slice(kRecvBuf, x.off + y.off, y.len)));
    }
    if (!ops.empty()) b.step(std::move(ops));
    b.signal(Counter::kConsumed, static_cast<int32_t>(second));
  }
  return b.take();
}

RankSchedule GatherInRounds(const CollArgs& a, int me, uint32_t rounds) {
  const int n = a.nranks;
  const uint64_t cnt = a.count;
  Builder b(a, me);
  const uint64_t widest = EvenPart(cnt, rounds, 0).len;
  std::vector<uint16_t> w(rounds);
  for (uint32_t i = 0; i < rounds; ++i) w[i] = b.window(WindowPlace::kBuffer, i, a.dtype, widest);
  const auto post = [&](uint32_t i) {
    const ElemRange x = EvenPart(cnt, rounds, i);
    b.waitFree(i, WindowPlace::kBuffer);
    b.copy(InputOf(a, me, x.off, x.len), Builder::local(w[i], 0, x.len));
    b.signal(Counter::kPosted, static_cast<int32_t>(i));
  };
  post(0);
  b.waitAll(Counter::kPosted, 0);
  for (uint32_t i = 0; i < rounds; ++i) {
    const bool last = i + 1 == rounds;
    // The next round's piece goes out first, so that this rank's copy in overlaps its peers'
    // copies out; it reuses the buffer of round i - 1, which the peers consume once they have
    // copied that round out.
    if (!last) post(i + 1);
    const ElemRange x = EvenPart(cnt, rounds, i);
    std::vector<StepOp> ops;
    for (int r = 0; r < n; ++r) {
      if (x.len == 0 || (r == me && a.in_place)) continue;
      const Slice src = r == me ? InputOf(a, me, x.off, x.len) : b.of(r, w[i], 0, x.len);
      ops.push_back(Builder::op(src.remote() ? StepOpKind::kGet : StepOpKind::kCopy, src,
                                Slice(kRecvBuf, static_cast<uint64_t>(r) * cnt + x.off, x.len)));
    }
    if (!ops.empty()) b.step(std::move(ops));
    b.signal(Counter::kConsumed, static_cast<int32_t>(i));
    if (!last) b.waitAll(Counter::kPosted, static_cast<int32_t>(i + 1));
  }
  return b.take();
}

RankSchedule ByReference(const CollArgs& a, int me) {
  const int n = a.nranks;
  const auto N = static_cast<uint64_t>(n);
  const uint64_t cnt = a.count;
  const auto self = static_cast<uint64_t>(me);
  Builder b(a, me);
  b.waitFree(0, WindowPlace::kEntry);
  const bool has_input = a.kind != CollKind::kBroadcast || me == a.root;
  if (has_input) b.expose(kSendBuf);
  if (a.kind == CollKind::kAllReduce) b.expose(kRecvBuf);
  b.signal(Counter::kPosted, 0);
  b.waitAll(Counter::kPosted, 0);
  b.signal(Counter::kConsumed, 0);
  // Rank r's input, element `off` on, in place or not (its send buffer as it passed it).
  const auto input = [&](int r, uint64_t off, uint64_t len) {
    return r == me ? InputOf(a, me, off, len) : Slice(kSendBuf, off, len, static_cast<int16_t>(r));
  };
  // A fold that writes over this rank's own input (in place) reads a copy of it: the rank-order
  // fold reaches this rank's term after it has written the destination.
  const auto fold_inputs = [&](uint64_t off, uint64_t len, Slice dst) {
    std::vector<Slice> srcs;
    for (int r = 0; r < n; ++r) srcs.push_back(input(r, off, len));
    if (a.in_place && len) {
      b.copy(srcs[self], Slice(kScratchBuf, 0, len));
      srcs[self] = Slice(kScratchBuf, 0, len);
    }
    b.fold(srcs, dst);
  };
  uint32_t last = 1;
  switch (a.kind) {
    case CollKind::kAllGather: {
      std::vector<StepOp> ops;
      for (int r = 0; r < n; ++r) {
        if (r == me && a.in_place) continue;
        if (cnt)
          ops.push_back(Builder::op(r == me ? StepOpKind::kCopy : StepOpKind::kGet,
                                    input(r, 0, cnt),
                                    Slice(kRecvBuf, static_cast<uint64_t>(r) * cnt, cnt)));
      }
      if (!ops.empty()) b.step(std::move(ops));
      break;
    }
    case CollKind::kBroadcast:
      if (me != a.root)
        b.copy(input(a.root, 0, cnt), Slice(kRecvBuf, 0, cnt));
      else if (!a.in_place)
        b.copy(Slice(kSendBuf, 0, cnt), Slice(kRecvBuf, 0, cnt));
      break;
    case CollKind::kReduceScatter:
      fold_inputs(self * cnt, cnt, Slice(kRecvBuf, 0, cnt));
      break;
    case CollKind::kAllReduce: {
      // This rank's part from every input, posted (1), then every other part from its owner's
      // receive buffer.
      const ElemRange part = EvenPart(cnt, N, self);
      fold_inputs(part.off, part.len, Slice(kRecvBuf, part.off, part.len));
      b.waitFree(1, WindowPlace::kEntry);
      b.signal(Counter::kPosted, 1);
      b.waitAll(Counter::kPosted, 1);
      b.signal(Counter::kConsumed, 1);
      std::vector<StepOp> ops;
      for (int r = 0; r < n; ++r) {
        const ElemRange y = EvenPart(cnt, N, static_cast<uint64_t>(r));
        if (r == me || y.len == 0) continue;
        ops.push_back(Builder::op(StepOpKind::kGet,
                                  Slice(kRecvBuf, y.off, y.len, static_cast<int16_t>(r)),
                                  Slice(kRecvBuf, y.off, y.len)));
      }
      if (!ops.empty()) b.step(std::move(ops));
      last = 2;
      break;
    }
    default:
      break;
  }
  // Peers read this rank's buffers until they post this: only then may the call return (and its
  // caller reuse or free the buffers).
  b.waitFree(last, WindowPlace::kEntry);
  b.signal(Counter::kPosted, static_cast<int32_t>(last));
  b.waitAll(Counter::kPosted, static_cast<int32_t>(last));
  b.signal(Counter::kConsumed, static_cast<int32_t>(last));
  RankSchedule s = b.take();
  // Scratch for the copy of this rank's own input in place.
  if (a.in_place && (a.kind == CollKind::kAllReduce || a.kind == CollKind::kReduceScatter))
    s.scratch_count = a.kind == CollKind::kAllReduce ? EvenPart(cnt, N, self).len : cnt;
  return s;
}

class Board final : public Algorithm {
 public:
  const char* name() const override { return "oneshot"; }
  bool supports(const CollArgs& a) const override { return PlanBoardCall(a).has_value(); }
  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const BoardPlan plan = *PlanBoardCall(a);
    switch (plan.form) {
      case BoardForm::kTwoShot:
        return TwoShot(a, rank, plan.rounds);
      case BoardForm::kGatherInRounds:
        return GatherInRounds(a, rank, plan.rounds);
      case BoardForm::kByReference:
        return ByReference(a, rank);
      default:
        return OneShot(a, rank, plan.place);
    }
  }
  // The tuner never ranks it: the runtime's rules pick it (board_selection.h), whose defaults
  // were measured against the engine.
  bool rankedOn(const LinkModel&) const override { return false; }
};

}  // namespace

const char* BoardFormName(BoardForm f) {
  switch (f) {
    case BoardForm::kOneShot:
      return "one-shot";
    case BoardForm::kTwoShot:
      return "two-shot";
    case BoardForm::kGatherInRounds:
      return "rounds";
    case BoardForm::kByReference:
      return "by reference";
  }
  return "?";
}

uint64_t BoardLargestPost(const CollArgs& a) {
  const uint64_t block = a.count * DataTypeSize(a.dtype);
  switch (a.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return block * static_cast<uint64_t>(a.nranks);
    case CollKind::kBarrier:
      return 0;
    default:
      return block;
  }
}

uint64_t BoardMessageBytes(const CollArgs& a) {
  return a.count * DataTypeSize(a.dtype);
}

uint32_t BoardRounds(uint64_t bytes, uint64_t capacity) {
  return bytes <= capacity ? 1 : static_cast<uint32_t>((bytes + capacity - 1) / capacity);
}

std::optional<BoardPlan> PlanBoardCall(const CollArgs& a) {
  const CollArgs::Board& board = a.board;
  if (board.capacity == 0 || a.nranks < 1 || !BoardServes(a.kind) || a.codec.id != CodecId::kNone ||
      a.memory != MemoryType::kHost)
    return std::nullopt;
  BoardPlan p;
  const uint64_t largest = BoardLargestPost(a);
  if (ByReference(a)) {
    p.form = BoardForm::kByReference;
    p.place = WindowPlace::kEntry;
    p.posts = a.kind == CollKind::kAllReduce ? 3 : 2;
    return p;
  }
  p.place = PlaceFor(board, largest);
  if (TwoShot(a, p.place) || (largest > board.capacity && TwoShot(a, WindowPlace::kBuffer))) {
    p.form = BoardForm::kTwoShot;
    p.place = WindowPlace::kBuffer;
    p.rounds = BoardRounds(BoardMessageBytes(a), board.capacity);
    p.posts = 2 * p.rounds;
    return p;
  }
  if (a.kind == CollKind::kAllGather && largest > board.capacity) {
    p.form = BoardForm::kGatherInRounds;
    p.place = WindowPlace::kBuffer;
    p.rounds = BoardRounds(BoardMessageBytes(a), board.capacity);
    p.posts = p.rounds;
    return p;
  }
  if (largest > board.capacity) return std::nullopt;
  return p;
}

const Algorithm& BoardAlgorithm() {
  static const Board board;
  return board;
}

RankSchedule BoardAgreementSchedule(int nranks, int rank) {
  CollArgs a;
  a.kind = CollKind::kBarrier;
  a.nranks = nranks;
  a.dtype = DataType::kUint8;
  RankSchedule s = OneShot(a, rank, WindowPlace::kEntry);
  // Lowered as BuildSchedule would: the table's first slots (no buffer is touched), one post.
  s.buffers.resize(kFirstUserBuf);
  s.buffers[kSendBuf] = {BufferRole::kUserSend, a.dtype, 0};
  s.buffers[kRecvBuf] = {BufferRole::kUserRecv, a.dtype, 0};
  s.buffers[kScratchBuf] = {BufferRole::kScratch, a.dtype, 0};
  s.posts = 1;
  for (size_t k = 0; k < s.channels[0].steps.size(); ++k)
    for (const StepOp& op : s.channels[0].steps[k].ops)
      if (op.kind == StepOpKind::kSignal && op.counter == Counter::kPosted)
        s.last_post_step = static_cast<uint32_t>(k);
  return s;
}

}  // namespace braid
