// Recursive-doubling all-reduce for small messages: log2(N) exchanges of the whole buffer.
//
// Non-power-of-two N uses the standard fold: with p the largest power of two <= N and
// rem = N - p, each even rank r < 2*rem first sends its input to r+1 and receives the result at
// the end; the other p ranks run the doubling. Every element of the result is then the same
// expression tree on every rank (each exchange computes a op b on one side and b op a on the
// other, equal bitwise since the ops are commutative), so all ranks hold bitwise-identical
// results.
//
// An exchange both sends and overwrites a buffer; ops of one step run concurrently, so the
// reduction lands in a different buffer from the one being sent, alternating between recvbuf and
// one scratch buffer of `count` elements, arranged so that the last exchange lands in recvbuf.
//
// On a power of two of ranks the same butterfly also serves small all-gathers and
// reduce-scatters (at most kButterflyMaxBytes gathered or scattered, where latency rules):
// log2(N) rounds, round k between r and r XOR 2^k. Those are the rounds of the call agreement
// (DisseminationAlgorithm), so such a call carries its agreement in its data (wire_header.h,
// CallConflict) and costs log2(N) rounds instead of 2 log2(N); Bruck's all-gather (r - 2^k) and
// the ring's reduce-scatter (N - 1 steps) cannot. Larger calls keep the ring (and HO-Ring):
// the butterfly's far partners were never measured against them at bandwidth, and its
// reduce-scatter's bit-reversing copy of the input measured slower than the ring's steps from
// 128 KiB. The one exception: an all-gather on one node, up to kButterflyAllGatherMaxBytes, where
// the butterfly's rounds measured faster than the ring's steps (4 and 8 ranks over TCP).
#include <utility>
#include <vector>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

enum class StageKind { kFold, kExchange };

struct Stage {
  StageKind kind;
  int peer;
  uint16_t dst = kRecvBuf;
};

uint16_t Other(uint16_t b) {
  return b == kRecvBuf ? kScratchBuf : kRecvBuf;
}

RankSchedule AllReduce(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const int levels = FloorLog2(n);
  const int p = 1 << levels;
  const int rem = n - p;
  const uint16_t in = a.in_place ? kRecvBuf : kSendBuf;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, a.count, a.count * DataTypeSize(a.dtype));
  RankSchedule s;
  s.channels.resize(nch);

  if (r < 2 * rem && r % 2 == 0) {
    // Folded-out rank: hand the input to r+1, get the result back.
    for (int c = 0; c < nch; ++c) {
      const ElemRange rc = EvenPart(a.count, nch, c);
      Step give, take;
      AppendSends(give, r + 1, in, rc.off, rc.len, chunk);
      AppendRecvs(take, r + 1, kRecvBuf, rc.off, rc.len, chunk);
      AddStep(s.channels[c], std::move(give));
      AddStep(s.channels[c], std::move(take));
    }
    return s;
  }

  const bool folds = r < 2 * rem;  // odd rank that absorbs r-1
  const int v = folds ? r / 2 : r - rem;
  auto real = [&](int u) { return u < rem ? 2 * u + 1 : u + rem; };
  std::vector<Stage> stages;
  if (folds) stages.push_back({StageKind::kFold, r - 1});
  for (int k = 0; k < levels; ++k) stages.push_back({StageKind::kExchange, real(v ^ (1 << k))});

  // Assign destinations backwards from recvbuf; an exchange's destination must differ from its
  // source (the previous stage's destination, or the input for the first stage). Only in place
  // can the first exchange collide with the input; then the chain ends in scratch plus a copy.
  auto assign = [&](uint16_t last) {
    stages.back().dst = last;
    for (size_t i = stages.size() - 1; i > 0; --i)
      stages[i - 1].dst =
          stages[i].kind == StageKind::kExchange ? Other(stages[i].dst) : stages[i].dst;
  };
  assign(kRecvBuf);
  const bool collide = stages[0].kind == StageKind::kExchange && stages[0].dst == in;
  if (collide) assign(kScratchBuf);
  const uint16_t final_buf = stages.back().dst;

  bool uses_scratch = false;
  for (const Stage& st : stages) uses_scratch |= st.dst == kScratchBuf;
  s.scratch_count = uses_scratch ? a.count : 0;

  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(a.count, nch, c);
    Channel& ch = s.channels[c];
    uint16_t cur = in;
    for (const Stage& sg : stages) {
      Step st;
      if (sg.kind == StageKind::kExchange) AppendSends(st, sg.peer, cur, rc.off, rc.len, chunk);
      AppendRecvReduces(st, sg.peer, cur, rc.off, sg.dst, rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
      cur = sg.dst;
    }
    Step last;
    if (final_buf != kRecvBuf) AppendCopy(last, final_buf, rc.off, kRecvBuf, rc.off, rc.len);
    if (folds) AppendSends(last, r - 1, final_buf, rc.off, rc.len, chunk);
    AddStep(ch, std::move(last));
  }
  return s;
}

// All-gather: in round k rank r and r XOR 2^k swap the 2^k blocks each holds, those of the ranks
// that differ from it only in bits below k: a contiguous run of recvbuf on both sides (from
// block r & ~(2^k - 1)), so one message each way, straight into place.
RankSchedule AllGather(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  RankSchedule s;
  s.channels.resize(1);
  for (int d = 1; d < n; d *= 2) {
    const uint64_t mine = static_cast<uint64_t>(r & ~(d - 1)) * count;
    const uint64_t theirs = static_cast<uint64_t>((r ^ d) & ~(d - 1)) * count;
    const uint64_t len = static_cast<uint64_t>(d) * count;
    Step st;
    if (d == 1 && !a.in_place) {
      // The own block leaves straight from the input while it is copied into place.
      AppendSends(st, r ^ d, kSendBuf, 0, count, chunk);
      AppendCopy(st, kSendBuf, 0, kRecvBuf, mine, count);
    } else {
      AppendSends(st, r ^ d, kRecvBuf, mine, len, chunk);
    }
    AppendRecvs(st, r ^ d, kRecvBuf, theirs, len, chunk);
    AddStep(s.channels[0], std::move(st));
  }
  return s;
}

int BitReverse(int i, int bits) {
  int out = 0;
  for (int b = 0; b < bits; ++b) out |= ((i >> b) & 1) << (bits - 1 - b);
  return out;
}

// Reduce-scatter by recursive halving in the butterfly's order: in round k rank r keeps the
// blocks whose index agrees with r in bit k, and sends its partial sums of the others to
// r XOR 2^k, which does the same with the other half; after log2(N) rounds r holds block r
// reduced over every rank. The blocks of one round's half are strided in the user's layout
// (every other block in round 0), so beyond two ranks the input is first copied into scratch
// with block indices bit-reversed, where each round's half is one contiguous run: one message
// each way per round, for one local pass over the input. The last round reduces into recvbuf.
RankSchedule ReduceScatter(const CollArgs& a, int r) {
  const int n = a.nranks;
  if (a.count == 0 || n == 1) return LocalCopySchedule(a.count, a.in_place);
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  // In place, block r of the input is recvbuf itself.
  auto input = [&](int block) -> std::pair<uint16_t, uint64_t> {
    if (a.in_place && block == r) return {kRecvBuf, 0};
    return {kSendBuf, static_cast<uint64_t>(block) * count};
  };
  RankSchedule s;
  s.channels.resize(1);
  Channel& ch = s.channels[0];
  if (n == 2) {
    Step st;
    const auto [other_buf, other_off] = input(1 - r);
    const auto [own_buf, own_off] = input(r);
    AppendSends(st, 1 - r, other_buf, other_off, count, chunk);
    AppendRecvReduces(st, 1 - r, own_buf, own_off, kRecvBuf, 0, count, chunk);
    AddStep(ch, std::move(st));
    return s;
  }
  const int bits = FloorLog2(n);
  s.scratch_count = static_cast<uint64_t>(n) * count;
  Step permute;
  for (int i = 0; i < n; ++i) {
    const auto [buf, off] = input(BitReverse(i, bits));
    AppendCopy(permute, buf, off, kScratchBuf, static_cast<uint64_t>(i) * count, count);
  }
  AddStep(ch, std::move(permute));
  int lo = 0, len = n;  // the run of scratch positions still held, in blocks
  for (int k = 0; k < bits; ++k) {
    const int half = len / 2;
    const int keep = lo + ((r >> k) & 1) * half;
    const int give = lo + (1 - ((r >> k) & 1)) * half;
    const int peer = r ^ (1 << k);
    const bool last = k == bits - 1;
    Step st;
    AppendSends(st, peer, kScratchBuf, static_cast<uint64_t>(give) * count,
                static_cast<uint64_t>(half) * count, chunk);
    // The half kept and the half sent are disjoint: the partial sums fold in where they lie.
    AppendRecvReduces(st, peer, kScratchBuf, static_cast<uint64_t>(keep) * count,
                      last ? kRecvBuf : kScratchBuf, last ? 0 : static_cast<uint64_t>(keep) * count,
                      static_cast<uint64_t>(half) * count, chunk);
    AddStep(ch, std::move(st));
    lo = keep;
    len = half;
  }
  return s;
}

class RecursiveDoubling final : public Algorithm {
 public:
  const char* name() const override { return "rd"; }

  bool supports(const CollArgs& a) const override {
    if (a.kind == CollKind::kAllReduce) return a.nranks >= 1;
    if (a.kind != CollKind::kAllGather && a.kind != CollKind::kReduceScatter) return false;
    // On one node an all-gather keeps the butterfly to larger sizes: same bytes as the ring in
    // log2(N) rounds instead of N - 1 steps. Across nodes its far partners share the NICs and
    // were not measured against the ring and HO-Ring at bandwidth: latency-bound sizes only.
    const uint64_t max_bytes = a.kind == CollKind::kAllGather && OnOneNode(a)
                                   ? kButterflyAllGatherMaxBytes
                                   : kButterflyMaxBytes;
    // (Divided, not multiplied: an absurd count must not wrap around into "small".)
    return IsPowerOfTwo(a.nranks) &&
           a.count <= max_bytes / DataTypeSize(a.dtype) / static_cast<uint64_t>(a.nranks);
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    if (a.kind == CollKind::kAllGather) return AllGather(a, rank);
    if (a.kind == CollKind::kReduceScatter) return ReduceScatter(a, rank);
    return AllReduce(a, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    const int levels = FloorLog2(n);
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
    if (a.kind != CollKind::kAllReduce) {
      // Round k moves 2^k blocks (all-gather) or N / 2^(k+1) (reduce-scatter) to r XOR 2^k.
      double t = 0;
      for (int k = 0; k < levels; ++k) {
        const uint64_t blocks =
            a.kind == CollKind::kAllGather ? uint64_t{1} << k : uint64_t(n) >> (k + 1);
        t += TransferSeconds(blocks * bytes, a.chunk_bytes,
                             PartnerLink(a, m, XorPartner, int64_t{1} << k));
      }
      return t;
    }
    // Exchange k pairs r with r ^ 2^k: inside a node for small distances, else every rank of a
    // node through its NIC at once (PartnerLink). The fold steps of a non-power-of-two N are
    // charged at the flat link.
    double t = (1 << levels) != n ? 2 * TransferSeconds(bytes, a.chunk_bytes, FlatLink(a, m)) : 0;
    for (int k = 0; k < levels; ++k)
      t += TransferSeconds(bytes, a.chunk_bytes, PartnerLink(a, m, XorPartner, int64_t{1} << k));
    return t;
  }
};

}  // namespace

const Algorithm& RecursiveDoublingAlgorithm() {
  static const RecursiveDoubling rd;
  return rd;
}

}  // namespace braid
