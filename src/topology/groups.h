// Groups derived from a topology: the sub-communicators the hierarchical algorithms build on
// (node-local, same local rank across nodes, device group) and the fabric split of issue 9
// (Holmes: data-parallel groups kept on one RDMA fabric).
//
// Groups are lists of slots. A slot is where one rank would sit: every device of every node, in
// file order, or the node itself for a node without devices (a CPU-only node runs one rank in
// this view). Placing real ranks on slots is the communicator's business, not this file's; these
// functions only say which slots belong together.
#pragma once

#include <optional>
#include <vector>

#include "topology/topology.h"

namespace braid::topo {

struct Slot {
  int node = 0;
  int device = -1;  // index in the node's devices; -1 for a node without devices
  bool operator==(const Slot&) const = default;
};

// Every slot, node by node (slot i of the result is "rank i").
std::vector<Slot> Slots(const Topology& t);

using Groups = std::vector<std::vector<int>>;  // slot indices, ascending

// One group per node: its slots.
Groups NodeLocalGroups(const Topology& t);

// Group k: the k-th slot of every node that has one (the "same local rank" communicators a
// two-level allreduce runs its inter-node step on).
Groups SameLocalRankGroups(const Topology& t);

// One group per device group with at least two devices (the GCD pairs of an MI250X, the GPUs on
// one NVSwitch): the innermost level.
Groups DeviceGroupGroups(const Topology& t);

// The link between two devices of one device group of node `node` (its first group of at least
// two devices: LinkBetween, so the group's override, else the device_group level); nullopt when
// the node has no such group or the topology no such link. The cost model's device-group class.
std::optional<Link> DeviceGroupLink(const Topology& t, int node);

// The RDMA type a node prefers: among the types of its NICs, InfiniBand, then Slingshot, then
// RoCE (the order of typical latency and of what NCCL/RCCL pick first); nullopt for a node with
// no RDMA NIC.
std::optional<NicType> PreferredRdma(const Node& n);

// The NIC type two nodes would talk over: the best RDMA type both have (same order as above),
// else Ethernet (TCP over whatever IP interface connects them). nullopt for a node with itself:
// no NIC is involved.
std::optional<NicType> PairNicType(const Topology& t, int a, int b);

// The fabric split: nodes grouped by their preferred RDMA type, so every pair inside a group has
// that type in common; nodes with no RDMA NIC form one Ethernet group. Groups are ordered by
// NicType, nodes inside by index.
struct FabricGroup {
  NicType type = NicType::kEthernet;
  std::vector<int> nodes;
  bool operator==(const FabricGroup&) const = default;
};
std::vector<FabricGroup> FabricGroups(const Topology& t);

// The same split in slots (every slot of a node goes with its node).
Groups FabricSlotGroups(const Topology& t);

}  // namespace braid::topo
