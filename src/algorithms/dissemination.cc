// Dissemination barrier: ceil(log2 N) rounds; in round k rank r signals rank r + 2^k and waits
// for rank r - 2^k. After round k a rank has heard (transitively) from the 2^(k+1) ranks before
// it, so after the last round from everyone. Messages carry no payload (count 0).
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
    for (int64_t d = 1; d < n; d *= 2) {
      Step st;
      st.ops.push_back(StepOp{StepOpKind::kSend, Mod(rank + d, n), MakeSlice(kSendBuf, 0, 0), {}});
      st.ops.push_back(StepOp{StepOpKind::kRecv, Mod(rank - d, n), {}, MakeSlice(kRecvBuf, 0, 0)});
      AddStep(s.channels[0], std::move(st));
    }
    return s;
  }

  double estimate_seconds(const CollArgs& a, const LinkModel& m) const override {
    double t = 0;  // round k: r signals r + 2^k
    for (int64_t d = 1; d < a.nranks; d *= 2) t += PartnerLink(a, m, ShiftPartner, d).alpha_s;
    return t;
  }
};

}  // namespace

const Algorithm& DisseminationAlgorithm() {
  static const Dissemination dissemination;
  return dissemination;
}

}  // namespace braid
