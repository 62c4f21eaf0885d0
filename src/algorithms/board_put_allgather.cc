// "putgather": an all-gather on the board by puts, the proof vehicle of the IR's kPut (the
// board's own forms write only their own windows and get from their peers'). Each rank puts its
// block into every peer's window of the call's post, at the block's place, signals its post,
// waits for every peer's, and copies its window out. Before it writes a peer's window it waits,
// as every form does, until every rank has consumed what that memory last held: a window is read
// by its owner here but by every peer in a get-based form, and forms alternate from call to call.
// BRAID_ALGO=allgather:putgather runs it (tests/multirank/board_test.cc); the tuner never does.
#include "algorithms/board_builder.h"
#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"

namespace braid {
namespace {

class BoardPutAllGather final : public Algorithm {
 public:
  const char* name() const override { return "putgather"; }
  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllGather && a.nranks >= 2 && a.board.capacity > 0 &&
           a.codec.id == CodecId::kNone && a.memory == MemoryType::kHost &&
           BoardLargestPost(a) * static_cast<uint64_t>(a.nranks) <= a.board.capacity;
  }
  Result<RankSchedule> build(const CollArgs& a, int me) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, me));
    const int n = a.nranks;
    const uint64_t cnt = a.count;
    const uint64_t total = cnt * static_cast<uint64_t>(n);
    const uint64_t bytes = total * DataTypeSize(a.dtype);
    const WindowPlace place = bytes <= a.board.entry_bytes  ? WindowPlace::kEntry
                              : bytes <= a.board.slot_bytes ? WindowPlace::kSlot
                                                            : WindowPlace::kBuffer;
    board::Builder b(a, me);
    const uint16_t w = b.window(place, 0, a.dtype, total);
    const auto self = static_cast<uint64_t>(me);
    const Slice input = a.in_place ? Slice(kRecvBuf, self * cnt, cnt) : Slice(kSendBuf, 0, cnt);
    b.waitFree(0, place);
    std::vector<StepOp> puts;
    for (int p = 0; p < n; ++p)
      if (p != me && cnt)
        puts.push_back(board::Builder::op(StepOpKind::kPut, input, b.of(p, w, self * cnt, cnt)));
    if (!puts.empty()) b.step(std::move(puts));
    b.signal(Counter::kPosted, 0);
    b.waitAll(Counter::kPosted, 0);
    std::vector<StepOp> outs;
    for (int r = 0; r < n; ++r) {
      if (!cnt || (r == me && a.in_place)) continue;
      const uint64_t at = static_cast<uint64_t>(r) * cnt;
      outs.push_back(board::Builder::op(StepOpKind::kCopy, r == me ? input : Slice(w, at, cnt),
                                        Slice(kRecvBuf, at, cnt)));
    }
    if (!outs.empty()) b.step(std::move(outs));
    b.signal(Counter::kConsumed, 0);
    return b.take();
  }
  bool rankedOn(const LinkModel&) const override { return false; }
};

}  // namespace

const Algorithm& BoardPutAllGatherAlgorithm() {
  static const BoardPutAllGather put;
  return put;
}

}  // namespace braid
