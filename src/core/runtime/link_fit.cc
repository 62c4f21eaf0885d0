#include "core/runtime/link_fit.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "algorithms/link_profile.h"

namespace braid {

Result<BandwidthFit> FitLevelBandwidth(braidCollective_t collective, uint64_t bytes,
                                       int ranksPerNode, int nodes, int nicSharing,
                                       const braidLinkParams_t& link, LinkLevel level,
                                       double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    return InvalidArgument("FitLevelBandwidth: measured time " + std::to_string(seconds) +
                           " s: must be positive and finite");
  auto estimate = [&](double beta) -> Result<double> {
    braidLinkParams_t l = link;
    (level == LinkLevel::kIntraNode ? l.intraBandwidth : l.interBandwidth) = beta;
    double s = 0;
    if (braidEstimateCollective(collective, bytes, braidUint8, 0, ranksPerNode, nodes, nicSharing,
                                &l, &s, nullptr, 0) != braidSuccess)
      return InvalidArgument(std::string("FitLevelBandwidth: ") + braidGetLastError(nullptr));
    return s;
  };
  // The estimate falls as the bandwidth grows (each algorithm's closed form does, and so does
  // their minimum): bisect in log space between the believable bounds.
  double lo = std::log(kMinBetaBytesPerSecond), hi = std::log(kMaxBetaBytesPerSecond);
  BRAID_ASSIGN_OR_RETURN(double slowest, estimate(std::exp(lo)));
  BRAID_ASSIGN_OR_RETURN(double fastest, estimate(std::exp(hi)));
  // The bounds themselves, not exp(log(bound)), which can land an ulp outside them, and a profile
  // holding it would be refused when read back.
  if (seconds >= slowest) return BandwidthFit{kMinBetaBytesPerSecond, seconds > slowest};
  if (seconds <= fastest) return BandwidthFit{kMaxBetaBytesPerSecond, true};
  for (int i = 0; i < 100 && hi - lo > 1e-9; ++i) {
    const double mid = 0.5 * (lo + hi);
    BRAID_ASSIGN_OR_RETURN(double t, estimate(std::exp(mid)));
    (t > seconds ? lo : hi) = mid;  // too slow: more bandwidth
  }
  return BandwidthFit{
      std::clamp(std::exp(0.5 * (lo + hi)), kMinBetaBytesPerSecond, kMaxBetaBytesPerSecond), false};
}

}  // namespace braid
