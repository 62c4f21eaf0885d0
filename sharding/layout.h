// Where each rank sits in a sharding configuration: its node and local rank, its position in the
// P, G and OS groups, and the colours of the groups the step communicates over. Pure functions of
// (configuration, rank), shared by the plan report and the step so they cannot disagree.
#pragma once

#include <string>

#include "braid/shard.h"

namespace braid::shard {

enum State { kP = 0, kG = 1, kOs = 2 };

inline const braidShardFactor_t& FactorOf(const braidShardConfig_t& c, int state) {
  return state == kP ? c.p : state == kG ? c.g : c.os;
}
inline int SizeOf(const braidShardFactor_t& f) {
  return f.intra * f.inter;
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
};

// Valid configuration and 0 <= rank < R * n assumed.
RankLayout Layout(const braidShardConfig_t& cfg, int rank);

}  // namespace braid::shard
