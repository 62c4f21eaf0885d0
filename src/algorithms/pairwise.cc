// Pairwise-exchange all-to-all: N-1 rounds; in round i rank r sends block (r+i) mod N of sendbuf
// to rank r+i and receives block (r-i) mod N of recvbuf from rank r-i, so every rank talks to
// exactly one peer in each direction per round (no incast). The own block is a local copy that
// overlaps the first round. Not in place (the C API does not define it).
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

RankSchedule AllToAll(const CollArgs& a, int r) {
  const int n = a.nranks;
  RankSchedule s;
  if (a.count == 0) return s;
  const uint64_t count = a.count;
  const uint64_t chunk = ChunkElems(a);
  const int nch = ChannelsFor(a, count, count * n * DataTypeSize(a.dtype));
  s.channels.resize(nch);
  for (int c = 0; c < nch; ++c) {
    const ElemRange rc = EvenPart(count, nch, c);
    Channel& ch = s.channels[c];
    const uint64_t own = static_cast<uint64_t>(r) * count + rc.off;
    Step first;
    AppendCopy(first, kSendBuf, own, kRecvBuf, own, rc.len);
    for (int i = 1; i < n; ++i) {
      Step st = i == 1 ? std::move(first) : Step{};
      const int to = Mod(r + i, n), from = Mod(r - i, n);
      AppendSends(st, to, kSendBuf, static_cast<uint64_t>(to) * count + rc.off, rc.len, chunk);
      AppendRecvs(st, from, kRecvBuf, static_cast<uint64_t>(from) * count + rc.off, rc.len, chunk);
      AddStep(ch, std::move(st));
    }
    if (n == 1) AddStep(ch, std::move(first));
  }
  return s;
}

class Pairwise final : public Algorithm {
 public:
  const char* name() const override { return "pairwise"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kAllToAll && !a.in_place && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    return AllToAll(a, rank);
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    if (a.nranks <= 1) return 0;
    const uint64_t esize = DataTypeSize(a.dtype);
    // Channels as AllToAll() takes them; each step's block is split over them.
    const int nch = ChannelsFor(a, a.count, a.count * static_cast<uint64_t>(a.nranks) * esize);
    return (a.nranks - 1) * TransferSeconds(a.count * esize, a.chunk_bytes, FlatLink(a, m), nch);
  }
};

}  // namespace

const Algorithm& PairwiseAlgorithm() {
  static const Pairwise pairwise;
  return pairwise;
}

}  // namespace braid
