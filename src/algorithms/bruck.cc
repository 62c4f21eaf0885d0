// Bruck all-gather: ceil(log2 N) rounds for any N. In round k (d = 2^k) every rank sends the
// m = min(d, N-d) blocks it has, r .. r+m-1 (mod N), to rank r-d and receives blocks
// r+d .. r+d+m-1 from rank r+d. Blocks land directly at their final place in recvbuf, so unlike
// the textbook version there is no final rotation: the blocks a rank holds are always a
// contiguous run modulo N, i.e. at most two contiguous pieces of recvbuf.
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

RankSchedule AllGather(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0) return RankSchedule{};
  if (n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const int nch = 1;
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(count, nch, c);
    Channel& ch = s.channels[c];
    for (int64_t d = 1; d < n; d *= 2) {
      const int m = static_cast<int>(std::min<int64_t>(d, n - d));
      const int to = Mod(r - d, n), from = Mod(r + d, n);
      Step st;
      if (d == 1 && !a.in_place) {
        // First round: the own block straight from sendbuf; its copy into place overlaps.
        AppendSends(st, to, kSendBuf, rc.off, rc.len, chunk);
        AppendCopy(st, kSendBuf, rc.off, kRecvBuf, static_cast<uint64_t>(r) * count + rc.off,
                   rc.len);
      } else {
        for (const ElemRange& p : BlockRunPieces(r, m, n, count, rc))
          AppendSends(st, to, kRecvBuf, p.off, p.len, chunk);
      }
      for (const ElemRange& p : BlockRunPieces(Mod(r + d, n), m, n, count, rc))
        AppendRecvs(st, from, kRecvBuf, p.off, p.len, chunk);
      AddStep(ch, std::move(st));
    }
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
    // A run of m >= 2 blocks wraps around the end of recvbuf on some rank: two messages.
    double t = 0;
    for (int64_t d = 1; d < n; d *= 2) {
      const LinkParams l = PartnerLink(a, m, ShiftPartner, -d);  // round k: r sends to r - d
      const uint64_t m = static_cast<uint64_t>(std::min<int64_t>(d, n - d));
      t += m == 1 ? TransferSeconds(block, a.chunk_bytes, l)
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
