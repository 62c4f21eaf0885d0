#include "core/runtime/board_selection.h"

#include <algorithm>

#include "algorithms/board_schedules.h"
#include "algorithms/tuner.h"
#include "core/runtime/comm.h"

namespace braid {

CollArgs::Board DefaultBoardArgs() {
  CollArgs::Board b;
  b.capacity = Config().oneshot_bytes;
  b.slot_bytes = std::min<uint64_t>(b.capacity, 4096);
  b.entry_bytes = 32;
  return b;
}

void FillBoardArgs(const braidComm& comm, CollArgs* a) {
  const LocalBoard* board = comm.board();
  if (!board) {
    a->board = {};
    return;
  }
  a->board.capacity = board->capacity();
  a->board.slot_bytes = board->slotCapacity();
  a->board.entry_bytes = board->entryCapacity();
  a->board.two_shot = static_cast<int8_t>(comm.config().board_two_shot);
  a->board.by_reference_from = comm.singleCopyBytes();
}

bool BoardTakes(const braidComm& comm, const OpDesc& d, const CollArgs& a) {
  if (a.board.capacity == 0) return false;
  const auto plan = PlanBoardCall(a);
  if (!plan) return false;
  const int n = comm.nranks();
  const uint64_t post = BoardLargestPost(a);
  bool fits_default = plan->form == BoardForm::kByReference ||
                      post <= BoardDefaultLimit(a.board.capacity, n, comm.hostCpus(), d.kind);
  // Larger than the board's buffers, in rounds: by default only while ranks outnumber the cores
  // (measured ahead of the engine there; with a core per rank the engine's pipelined ring keeps
  // large calls).
  if (plan->form != BoardForm::kByReference && post > a.board.capacity)
    fits_default = n > comm.hostCpus();
  // BRAID_ALGO: a rule that covers the call decides (CollBytes counts as the tuner does).
  const uint64_t block = d.count * DataTypeSize(d.dtype);
  const uint64_t coll_bytes =
      d.kind == CollKind::kAllGather ? block * static_cast<uint64_t>(n) : post;
  if (const std::string* rule = comm.tuner().overrideFor(d.kind, coll_bytes))
    return *rule == kOneShotAlgorithm;
  return fits_default;
}

uint64_t BoardCoreBytes(CollKind kind) {
  // With a core per rank the engine overtakes the board where its pipelining pays: on the board
  // every rank copies its whole post in, then (once every peer has posted) reads the peers'
  // posts, one after the other, where the engine's ring overlaps one chunk's copy with the next
  // one's. Measured on 2 ranks, board (forced) against engine, 2026-11-27 (docs/performance.md
  // "Re-measured per collective"): all-gather and all-reduce cross over between 16 and 32 KiB
  // (a post of 32 KiB: 1.13-1.62 x the engine's time), reduce-scatter and broadcast between 32
  // and 64 KiB (broadcast reads one post, reduce-scatter a 1/N part of each).
  return kind == CollKind::kBroadcast || kind == CollKind::kReduceScatter ? 32 << 10 : 16 << 10;
}

uint64_t BoardDefaultLimit(uint64_t capacity, int nranks, int host_cpus, CollKind kind) {
  // With more ranks than cores the engine's progress threads and wake-ups cost more than the
  // board's copies, and the board wins up to its size (3, 4 and 8 ranks on 2 cores).
  return nranks > host_cpus ? capacity : std::min(capacity, BoardCoreBytes(kind));
}

}  // namespace braid
