// Ordered reductions (deterministic mode, BRAID_DETERMINISTIC=1; spec/reliability.md check 14):
// every rank that holds a result collects all N contributions to it in scratch and folds them in
// rank order, x0 op x1 op ... op x(N-1), left to right. The result's bits then depend only on
// the inputs and N: not on the algorithm the tuner would pick, the transport, the channel count
// or the chunk size (floating-point sums are not associative, so ring, recursive doubling and a
// tree each round differently).
//
// Cost, the price of determinism: each contribution travels once, whole, to every rank that
// needs it (all-reduce: (N-1) x count elements in and out per rank instead of the ring's
// 2 (N-1)/N x count), N x count elements of scratch, and N-1 local reductions.
//
//   all-reduce      step 1: send the input to every peer, receive every peer's into scratch
//   reduce-scatter  step 1: send block q of the input to rank q, receive block r from every peer
//   reduce          step 1: non-roots send their input to the root, which receives them
//   then            copy contribution 0 to recvbuf, fold contributions 1..N-1 (one per step,
//                   so the order is part of the schedule, not an engine detail)
// Sends go to r+1, r+2, ... and receives come from r-1, r-2, ... so no rank is the first target
// of everyone (no incast at the start).
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

RankSchedule Ordered(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const bool scatter = a.kind == CollKind::kReduceScatter;
  const bool holds_result = a.kind != CollKind::kReduce || r == a.root;
  const int nch = ChannelsFor(a, count, count * DataTypeSize(a.dtype));
  // Where this rank's contribution to block b lives (in place: recvbuf for its own block).
  auto input = [&](int b) -> std::pair<uint16_t, uint64_t> {
    if (!scatter) return {a.in_place ? kRecvBuf : kSendBuf, 0};
    if (a.in_place && b == r) return {kRecvBuf, 0};
    return {kSendBuf, static_cast<uint64_t>(b) * count};
  };
  RankSchedule s;
  s.scratch_count = holds_result ? static_cast<uint64_t>(n) * count : 0;
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(count, nch, c);
    Channel& ch = s.channels[c];
    Step gather;
    for (int i = 1; i < n; ++i) {
      const int to = Mod(r + i, n), from = Mod(r - i, n);
      if (a.kind != CollKind::kReduce || to == a.root) {
        const auto in = input(to);
        AppendSends(gather, to, in.first, in.second + rc.off, rc.len, chunk);
      }
      if (holds_result)
        AppendRecvs(gather, from, kScratchBuf, static_cast<uint64_t>(from) * count + rc.off, rc.len,
                    chunk);
    }
    if (holds_result) {
      const auto own = input(r);
      AppendCopy(gather, own.first, own.second + rc.off, kScratchBuf,
                 static_cast<uint64_t>(r) * count + rc.off, rc.len);
    }
    AddStep(ch, std::move(gather));
    if (!holds_result) continue;
    Step first;
    AppendCopy(first, kScratchBuf, rc.off, kRecvBuf, rc.off, rc.len);
    AddStep(ch, std::move(first));
    for (int q = 1; q < n; ++q) {
      Step fold;
      StepOp op;
      op.kind = StepOpKind::kReduce;
      op.src = MakeSlice(kScratchBuf, static_cast<uint64_t>(q) * count + rc.off, rc.len);
      op.dst = MakeSlice(kRecvBuf, rc.off, rc.len);
      if (rc.len) fold.ops.push_back(op);
      AddStep(ch, std::move(fold));
    }
  }
  return s;
}

class OrderedReduction final : public Algorithm {
 public:
  const char* name() const override { return "ordered"; }

  bool supports(const CollArgs& a) const override {
    return (a.kind == CollKind::kAllReduce || a.kind == CollKind::kReduceScatter ||
            a.kind == CollKind::kReduce) &&
           a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return Ordered(a, rank);
  }

  // Never cheaper than the others (it is chosen by BRAID_DETERMINISTIC, or by name): N-1 whole
  // transfers through one port, plus the N-1 local reductions.
  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    if (a.nranks <= 1) return 0;
    const LinkParams l = FlatLink(a, m);
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    return (a.nranks - 1) * (TransferSeconds(bytes, a.chunk_bytes, l) + bytes / l.beta_bytes_s);
  }
};

}  // namespace

const Algorithm& OrderedReductionAlgorithm() {
  static const OrderedReduction ordered;
  return ordered;
}

}  // namespace braid
