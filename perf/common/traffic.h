// --traffic: the bytes a rank received from peers on its own node and on other nodes (summed over
// ranks: the bytes sent), from the transports' and the board's counters (braidCommPeerTraffic),
// so a run shows what crossed the node links.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/braid.h"

namespace braid_perf {

struct TrafficBytes {
  uint64_t intra_node = 0;  // received from peers on this rank's node
  uint64_t inter_node = 0;  // received from peers on other nodes
};

// Which peers share this rank's node, as braid sees nodes (BRAID_HOSTID, else host, boot id and
// network namespace): from braidCommSplitLevel(braidLevelNode), not from the transport's name, so
// a node whose ranks talk over tcp (BRAID_TRANSPORTS=tcp) still counts as one node.
class NodeTraffic {
 public:
  // Collective over `comm` (a node view and one all-gather on it). False after a braid error.
  bool Init(braidComm_t comm);
  // The bytes received since init, summed over the peers of each kind.
  bool Read(TrafficBytes* out) const;

 private:
  braidComm_t comm_ = nullptr;
  std::vector<char> same_node_;  // by peer rank
};

}  // namespace braid_perf
