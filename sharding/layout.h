// Where each rank sits in a sharding configuration: its node and local rank, its position in the
// P, G and OS groups, and the colours of the groups the step communicates over. Pure functions of
// (configuration, rank), shared by the plan report and the step so they cannot disagree.
#pragma once

#include <string>

#include "braid/shard.h"

namespace braid::shard {

enum State { kP = 0, kG = 1, kOs = 2 };

// The codecs of the quantized options, ZeRO++'s: blocks of 2048 elements, each with an fp32 absmax
// scale (docs/quantization.md). INT8 for parameters (qwZ and the INT8 secondary copy), INT4 for
// gradients (qgZ).
inline constexpr braidQuantConfig_t kWeightCodec = {8, 2048, 1};
inline constexpr braidQuantConfig_t kGradCodec = {4, 2048, 1};
// Bytes of `count` elements encoded with `codec` (braidQuantizedSize; the codecs above are valid).
uint64_t EncodedSize(const braidQuantConfig_t& codec, uint64_t count);

inline const braidShardFactor_t& FactorOf(const braidShardConfig_t& c, int state) {
  return state == kP ? c.p : state == kG ? c.g : c.os;
}
inline int SizeOf(const braidShardFactor_t& f) {
  return f.intra * f.inter;
}

// "8x16" (intra x inter), as the planner's tables and messages write a factor.
inline std::string FactorName(const braidShardFactor_t& f) {
  return std::to_string(f.intra) + "x" + std::to_string(f.inter);
}

inline bool SameFactor(const braidShardFactor_t& a, const braidShardFactor_t& b) {
  return a.intra == b.intra && a.inter == b.inter;
}

// Empty when the configuration is valid; otherwise the rule broken, with the numbers.
std::string Validate(const braidShardConfig_t& cfg);

struct RankLayout {
  int node = 0;
  int local = 0;
  // Position of this rank's shard in each state's group, in [0, s_X). Nested: the OS shard at
  // pos[kOs] lies inside the G shard at pos[kG] (pos[kOs] / (s_os / s_g) == pos[kG]) and that
  // inside the P shard, so "select & drop" and the redistribution are sub-slices.
  int pos[3] = {0, 0, 0};
  // Colour of the state's group: ranks with equal colour share one sharded copy of the state.
  int group[3] = {0, 0, 0};
  // Cross-replica group of the gradient shard: every rank holding G shard pos[kG] (D / s_g ranks).
  int replica_color = 0;
  // Redistribution group: the s_os / s_p ranks of this OS group whose OS shards tile this P shard.
  int redist_color = 0;
  // hpZ group (SecondaryCopy): hpz consecutive local ranks of one node; the rank holds slice
  // hpz_pos of every bucket in the secondary copy. 0 and 0 without a secondary copy.
  int hpz_color = 0;
  int hpz_pos = 0;
  // The boundary reduction where s_os > s_g (SplitBoundary): first a reduce-scatter of the G
  // shard over the s_os / s_g ranks of this OS group that hold it (slices group: each gets the
  // partial sum of its own OS slice), then an all-reduce of the OS slice over the D / s_os ranks
  // that hold the same OS shard (copies group). Same result as the all-reduce over all D / s_g
  // replicas followed by "select & drop", with (1 - s_g / s_os) x G fewer bytes per rank.
  int slices_color = 0;
  int copies_color = 0;
};

// Whether the boundary reduces the G shard in the two steps above (s_os > s_g, the replicas of a
// G shard reduced at the boundary, not every micro-batch) rather than by an all-reduce over the
// replicas.
bool SplitBoundary(const braidShardConfig_t& cfg, int nranks);

// Whether the step keeps an hpZ secondary copy of the parameters: hpz > 0, parameters sharded
// (s_p > 1), and the copy differs from the primary shard: the P group spans nodes, or the copy is
// INT8, or it is split over another number of ranks. (zero++ on one node: the primary P shard is
// the secondary copy already, sharding.md section 3.)
bool SecondaryCopy(const braidShardConfig_t& cfg);

// Valid configuration and 0 <= rank < R * n assumed.
RankLayout Layout(const braidShardConfig_t& cfg, int rank);

}  // namespace braid::shard
