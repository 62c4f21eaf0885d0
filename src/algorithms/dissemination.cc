// Dissemination barrier: ceil(log2 N) rounds; in round k rank r signals rank r + 2^k and waits
// for rank r - 2^k. After round k a rank has heard (transitively) from the 2^(k+1) ranks before
// it, so after the last round from everyone. Messages carry no payload (count 0).
//
// When N is a power of two the rounds pair ranks instead (a butterfly): in round k rank r and
// r XOR 2^k signal each other, and after round k a rank has heard from the 2^(k+1) ranks that
// share its bits above k. Same rounds, same guarantee (also for the call agreement that runs on
// this schedule, wire_header.h: a conflict inside either half reaches r through its partner, and
// two halves that differ differ at r and its partner), but each rank waits for the rank it just
// signalled rather than for a third one: with more ranks than cores a pair that is scheduled
// together completes its round together (4 ranks on 2 cores over TCP: a barrier of 100 us took
// about 70; docs/performance.md).
#include <utility>

#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

class Dissemination final : public Algorithm {
 public:
  const char* name() const override { return "dissemination"; }

  bool supports(const CollArgs& a) const override {
    return a.kind == CollKind::kBarrier && a.nranks >= 1;
  }

  Result<RankSchedule> build(const CollArgs& a, int rank) const override {
    BRAID_RETURN_IF_ERROR(CheckBuildArgs(*this, a, rank));
    const int n = a.nranks;
    RankSchedule s;
    if (n == 1) return s;
    s.channels.resize(1);
    const bool butterfly = IsPowerOfTwo(n);
    for (int64_t d = 1; d < n; d *= 2) {
      const int to = butterfly ? static_cast<int>(rank ^ d) : Mod(rank + d, n);
      const int from = butterfly ? to : Mod(rank - d, n);
      Step st;
      st.ops.push_back(StepOp{StepOpKind::kSend, to, MakeSlice(kSendBuf, 0, 0), {}});
      st.ops.push_back(StepOp{StepOpKind::kRecv, from, {}, MakeSlice(kRecvBuf, 0, 0)});
      AddStep(s.channels[0], std::move(st));
    }
    return s;
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    double t = 0;  // round k: r signals r + 2^k (r XOR 2^k for a power of two)
    const bool butterfly = (a.nranks & (a.nranks - 1)) == 0;
    for (int64_t d = 1; d < a.nranks; d *= 2)
      t += PartnerLink(a, m, butterfly ? XorPartner : ShiftPartner, d).alpha_s;
    return t;
  }
};

}  // namespace

const Algorithm& DisseminationAlgorithm() {
  static const Dissemination dissemination;
  return dissemination;
}

}  // namespace braid
