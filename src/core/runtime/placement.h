// Where a rank sits on the topology (issue 9): the NICs of its node, as BRAID_TOPO_FILE or
// discovery (src/topology) describes them. Each rank computes its own at init and the
// communicator exchanges them (RankInfo::nic_types, RankInfo::fabric), so every rank knows every
// rank's fabric: the fabric split (braidCommSplitByFabric) and, once RDMA transports exist, the
// per-pair NIC choice read it from there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "core/base/status.h"
#include "transport/transport.h"

namespace braid {

struct NodePlacement {
  std::string node;       // the topology node this rank runs on
  uint8_t nic_types = 0;  // a bit per topo::NicType among the node's NICs
  int8_t fabric = -1;     // topo::NicType the node prefers (best RDMA type, else Ethernet)
  // Its InfiniBand and RoCE NICs, for the transports (TransportContext::local_nics).
  std::vector<TransportContext::Nic> rdma_nics;
  // The device group of each device of the node, in device order (a device in no group is a
  // group of its own, named after the device). The rank with local rank k is bound to device
  // k mod the device count (the LOCAL_RANK convention); empty for a node without devices.
  std::vector<std::string> device_groups;
  // The link between two devices of one group (the file's device-group override of the node's
  // first group that has one, else its device_group level); 0 when the node has no group of
  // several devices or the topology gives no such link. The cost model's device-group class.
  double group_latency_s = 0, group_bandwidth = 0;
};

// This rank's node in the local topology: the node named `host_id` (BRAID_HOSTID) or
// `hostname`, or the only node of a one-node topology. A BRAID_TOPO_FILE that does not load, or
// that describes several nodes and none of these names, is an error naming the file. Loaded
// once per process.
Result<NodePlacement> LocalPlacement(const std::string& host_id, const std::string& hostname);

// The NICs the cost model gives each node (LinkModel::nics_per_node): the fewest distinct
// interfaces (RankInfo::nic) that the ranks of one node use, over the nodes of `layout`; 1 when
// a node's ranks all use one, or an interface is not known. Ranks on different interfaces of a
// node are on different NICs (braidrun --emulate GxM --nics K gives local rank r interface
// eth(r mod K), the model's NIC of a rank); the fewest, because a node with one NIC limits
// every ring through it.
int NicsPerNode(const GroupLayout& layout, const std::vector<RankInfo>& ranks);

// "ib", "roce", "slingshot", "ethernet"; "unknown" for -1.
const char* FabricName(int fabric);

}  // namespace braid
