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

class RecursiveDoubling final : public Algorithm {
 public:
  const char* name() const override { return "rd"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllReduce && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return AllReduce(a, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    const int n = a.nranks;
    if (n <= 1) return 0;
    const int levels = FloorLog2(n);
    const uint64_t bytes = a.count * DataTypeSize(a.dtype);
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
