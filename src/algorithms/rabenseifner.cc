// Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by
// recursive doubling, on a power of two of ranks. The ring's bytes (2 (N-1)/N of the buffer per
// rank) in 2 log2(N) rounds instead of its 2 (N-1) steps: for sizes too large for recursive
// doubling (log2(N) whole buffers per rank) and too small for the round count not to matter.
//
// Reduce-scatter, round k (k = 0 .. L-1, d = N / 2^(k+1)): rank r and r XOR d hold the same
// region of the buffer (they agree on every bit above d); they cut it in two at its middle, the
// one with bit d set keeps the upper half, and each sends the other half to its partner, which
// folds it into its own. Halving from the highest bit down leaves rank r holding block r of the
// even split reduced over every rank, in the user's layout: no permuting copy (recursive
// doubling's reduce-scatter, whose butterfly starts at bit 0, needs one). The all-gather replays
// the rounds backwards: each rank sends the region it holds and receives its partner's, which
// is the half it gave away in that round.
//
// Everything happens in recvbuf: the first round reads the input (sendbuf, or recvbuf in place)
// and reduces its kept half into recvbuf; within a round the half sent and the half folded are
// disjoint, so both run at once with no scratch. Every block is reduced once, by its owner, and
// then copied, so all ranks end with bitwise-identical results. The buffer is split evenly over
// the channels, each running its own butterfly on its part.
//
// One node only: the first round sends half the buffer to the farthest partner, which across
// nodes is every rank of a node through its NIC at once; not measured there against the ring
// and the hierarchical algorithms, so they keep those sizes.
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

// One reduce-scatter round of one channel: the partner, the half this rank keeps (and later
// sends back in the all-gather) and the half it gives (and later receives).
struct Round {
  int peer;
  ElemRange keep;
  ElemRange give;
};

std::vector<Round> Rounds(int n, int r, ElemRange region) {
  std::vector<Round> rounds;
  for (int d = n / 2; d >= 1; d /= 2) {
    const uint64_t lower = region.len / 2;
    const ElemRange lo{region.off, lower}, hi{region.off + lower, region.len - lower};
    const bool upper = (r & d) != 0;
    rounds.push_back({r ^ d, upper ? hi : lo, upper ? lo : hi});
    region = rounds.back().keep;
  }
  return rounds;
}

RankSchedule AllReduce(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    Channel& ch = s.channels[c];
    const std::vector<Round> rounds = Rounds(n, r, EvenPart(a.count, nch, c));
    uint16_t cur = in;
    for (const Round& rd : rounds) {
      Step st;
      AppendSends(st, rd.peer, cur, rd.give.off, rd.give.len, chunk);
      AppendRecvReduces(st, rd.peer, cur, rd.keep.off, kRecvBuf, rd.keep.off, rd.keep.len, chunk);
      AddStep(ch, std::move(st));
      cur = kRecvBuf;
    }
    for (auto it = rounds.rbegin(); it != rounds.rend(); ++it) {
      Step st;
      AppendSends(st, it->peer, kRecvBuf, it->keep.off, it->keep.len, chunk);
      AppendRecvs(st, it->peer, kRecvBuf, it->give.off, it->give.len, chunk);
      AddStep(ch, std::move(st));
    }
  }
  return s;
}

class Rabenseifner final : public Algorithm {
 public:
  const char* name() const override { return "rabenseifner"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllReduce && IsPowerOfTwo(a.nranks) && OnOneNode(a);
  }

  // Ranked only where a node's ranks talk over TCP. Its gain is rounds, and on 4 ranks over
  // loopback TCP a round costs far more than its calibrated alpha (20-35 % faster than the
  // ring at 64 KiB-2 MiB); over shared memory it measured 10-35 % slower than the ring at
  // 256 KiB-4 MiB, which the alpha-beta model (same bytes, fewer messages) cannot see.
  bool rankedOn(const LinkModel& m) const override { return m.intra_tcp; }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return AllReduce(a, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    // Round k moves 1/2^(k+1) of the buffer each way, split over the channels, in both phases.
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    const int nch = ChannelsFor(a, a.count, bytes);
    double t = 0;
    for (int d = n / 2, k = 1; d >= 1; d /= 2, ++k)
      t += 2 * TransferSeconds(bytes >> k, a.chunk_bytes, FlatLink(a, m), nch);
    return t;
  }
};

}  // namespace

const Algorithm& RabenseifnerAlgorithm() {
  static const Rabenseifner rab;
  return rab;
}

}  // namespace braid
