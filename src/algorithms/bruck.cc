// Bruck all-gather: ceil(log2 N) rounds for any N. In round k (d = 2^k) every rank sends the
// m = min(d, N-d) blocks it has, r .. r+m-1 (mod N), to rank r-d and receives blocks
// r+d .. r+d+m-1 from rank r+d. Two layouts, chosen by size alike on every rank:
// - Rotated, for latency-bound sizes (the whole gathered buffer up to kRotateBytes): the blocks
//   gather in scratch in rotated order, tmp[i] = block r+i, so each round moves one contiguous
//   run, one message each way; a last local step rotates tmp into recvbuf (two copies). Bruck is
//   chosen for its latency, and a run that wraps costs a second message in a round: at N = 4
//   that made its 2 rounds cost the ring's 3 steps in the cost model, and the ring won where
//   Bruck measured 1.3-1.6x faster (4 ranks over TCP, 64 B - 32 KiB).
// - In place, above that: blocks land at their final place in recvbuf, no copy; a run that
//   wraps around the buffer's end is two pieces (two messages). The rotation's copy of N-1
//   blocks, which the cost model does not charge, made the rotated form 1.4-2.3x slower at
//   1-4 MiB on 4 ranks over shm.
//
// One channel: the pieces of a round are then whole runs of blocks, so a round costs one or two
// messages plus chunking. Split over k channels (each taking the same sub-range of every block)
// the runs fall apart into one piece per block and channel, and a round of m blocks costs k m
// messages: with 2 channels Bruck sent as many messages as the ring (15 per channel on 16
// ranks) while its estimate, and the tuner, counted log2 N; bruck serves latency-bound sizes,
// where more channels add messages and no bandwidth.
#include <algorithm>
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

// The largest gathered buffer (bytes) Bruck gathers rotated in scratch.
constexpr uint64_t kRotateBytes = 64 * 1024;

bool Rotated(const CollArgs& a) {
  return static_cast<uint64_t>(a.nranks) * a.count * DataTypeSize(a.dtype) <= kRotateBytes;
}

// The contiguous pieces of recvbuf covering sub-range `rc` of blocks first .. first+m-1 (mod n),
// merged where adjacent. Sender and receiver compute it from the same block indices.
std::vector<ElemRange> BlockRunPieces(int first, int m, int n, uint64_t count,
                                      const ElemRange& rc) {
  std::vector<ElemRange> pieces;
  for (int i = 0; i < m; ++i) {
    const uint64_t off = static_cast<uint64_t>(Mod(first + i, n)) * count + rc.off;
    if (!pieces.empty() && pieces.back().off + pieces.back().len == off)
      pieces.back().len += rc.len;
    else
      pieces.push_back({off, rc.len});
  }
  return pieces;
}

RankSchedule RotatedAllGather(const CollArgs& a, int r) {
  const int n = a.nranks;
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const uint64_t own = static_cast<uint64_t>(r) * count;
  RankSchedule s;
  s.channels.resize(1);
  s.scratch_count = static_cast<uint64_t>(n) * count;
  Channel& ch = s.channels[0];
  for (int64_t d = 1; d < n; d *= 2) {
    const uint64_t m = static_cast<uint64_t>(std::min<int64_t>(d, n - d));
    const int to = Mod(r - d, n), from = Mod(r + d, n);
    Step st;
    if (d == 1) {
      // The own block straight from where the caller left it; its copy to tmp[0] (and, out of
      // place, into recvbuf) overlaps the transfer.
      const uint16_t src = a.in_place ? kRecvBuf : kSendBuf;
      const uint64_t src_off = a.in_place ? own : 0;
      AppendSends(st, to, src, src_off, count, chunk);
      AppendCopy(st, src, src_off, kScratchBuf, 0, count);
      if (!a.in_place) AppendCopy(st, kSendBuf, 0, kRecvBuf, own, count);
    } else {
      AppendSends(st, to, kScratchBuf, 0, m * count, chunk);
    }
    AppendRecvs(st, from, kScratchBuf, static_cast<uint64_t>(d) * count, m * count, chunk);
    AddStep(ch, std::move(st));
  }
  // tmp[i] = block r+i: tmp[1 .. N-r) to recvbuf blocks r+1 .., tmp[N-r ..) to blocks 0 .. r-1.
  Step rot;
  const uint64_t tail = static_cast<uint64_t>(n - r);
  if (tail > 1) AppendCopy(rot, kScratchBuf, count, kRecvBuf, own + count, (tail - 1) * count);
  if (r > 0) AppendCopy(rot, kScratchBuf, tail * count, kRecvBuf, 0, own);
  AddStep(ch, std::move(rot));
  return s;
}

RankSchedule AllGather(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  if (Rotated(a)) return RotatedAllGather(a, r);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const ElemRange rc{0, count};
  RankSchedule s;
  s.channels.resize(1);
  Channel& ch = s.channels[0];
  for (int64_t d = 1; d < n; d *= 2) {
    const int m = static_cast<int>(std::min<int64_t>(d, n - d));
    const int to = Mod(r - d, n), from = Mod(r + d, n);
    Step st;
    if (d == 1 && !a.in_place) {
      // First round: the own block straight from sendbuf; its copy into place overlaps.
      AppendSends(st, to, kSendBuf, rc.off, rc.len, chunk);
      AppendCopy(st, kSendBuf, rc.off, kRecvBuf, static_cast<uint64_t>(r) * count + rc.off, rc.len);
    } else {
      for (const ElemRange& p : BlockRunPieces(r, m, n, count, rc))
        AppendSends(st, to, kRecvBuf, p.off, p.len, chunk);
    }
    for (const ElemRange& p : BlockRunPieces(Mod(r + d, n), m, n, count, rc))
      AppendRecvs(st, from, kRecvBuf, p.off, p.len, chunk);
    AddStep(ch, std::move(st));
  }
  return s;
}

class Bruck final : public Algorithm {
 public:
  const char* name() const override { return "bruck"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllGather && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return AllGather(a, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    const uint64_t block = a.count * DataTypeSize(a.dtype);
    // Rotated: one run of m blocks per round. In place, a run of m >= 2 blocks wraps around the
    // end of recvbuf on some rank: two messages.
    const bool rotated = Rotated(a);
    double t = 0;
    for (int64_t d = 1; d < n; d *= 2) {
      const LinkParams l = PartnerLink(a, m, ShiftPartner, -d);  // round k: r sends to r - d
      const uint64_t m = static_cast<uint64_t>(std::min<int64_t>(d, n - d));
      t += m == 1 || rotated ? TransferSeconds(m * block, a.chunk_bytes, l)
                             : TransferSeconds(block, a.chunk_bytes, l) +
                                   TransferSeconds((m - 1) * block, a.chunk_bytes, l);
    }
    return t;
  }
};

}  // namespace

const Algorithm& BruckAlgorithm() {
  static const Bruck bruck;
  return bruck;
}

}  // namespace braid
