// Fitting a level's bandwidth to a measured collective (braid-info --profile).
//
// Link calibration measures one pair of ranks streaming 4 MiB while the others sleep: the speed
// of a single transfer on an idle host. A collective runs every rank at once, on buffers larger
// than the caches, with the ranks of a host sharing its cores and memory bandwidth (and on the
// emulated cluster, every "node" sharing the same two cores), so its effective bandwidth can be
// several times lower: on the 2-core development VM the pair measures 6-14 GB/s inside a node,
// where a 25 MB all-gather of 2 ranks beside 2 others runs at about 1.4. The planner costs whole
// steps of large collectives, so its profile should hold what those collectives achieve.
//
// The fit inverts the cost model itself: the bandwidth of `level` for which
// braidEstimateCollective (the model the planner and the tuner rank with) predicts the measured
// time, the other parameters as given. So a profile written from it reproduces the measured
// collective exactly, and others of similar size and shape approximately.
#pragma once

#include "braid/braid.h"
#include "core/base/status.h"

namespace braid {

enum class LinkLevel { kIntraNode, kInterNode };

struct BandwidthFit {
  double beta_bytes_s = 0;
  // The measured time lies outside what the model can produce with any believable bandwidth
  // (link_profile.h's bounds): at or under the latency terms alone (clamped high), or slower
  // than the slowest bandwidth allows (clamped low). The value is then the bound.
  bool clamped = false;
};

// The bandwidth of `level` (intraBandwidth, or interBandwidth: one node's link) for which
// braidEstimateCollective(collective, bytes, braidUint8, 0, ranksPerNode, nodes, nicSharing,
// link') takes `seconds`, link' being `link` with that bandwidth. Invalid arguments (as
// braidEstimateCollective's, or seconds not positive and finite) give InvalidArgument.
Result<BandwidthFit> FitLevelBandwidth(braidCollective_t collective, uint64_t bytes,
                                       int ranksPerNode, int nodes, int nicSharing,
                                       const braidLinkParams_t& link, LinkLevel level,
                                       double seconds);

}  // namespace braid
