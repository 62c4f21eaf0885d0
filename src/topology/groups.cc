#include "topology/groups.h"

#include <map>

namespace braid::topo {
namespace {

// Preference order for RDMA types: lowest first.
constexpr NicType kRdmaOrder[] = {NicType::kInfiniBand, NicType::kSlingshot, NicType::kRoCE};

bool Has(const Node& n, NicType type) {
  for (const Nic& nic : n.nics)
    if (nic.type == type) return true;
  return false;
}

}  // namespace

std::vector<Slot> Slots(const Topology& t) {
  std::vector<Slot> slots;
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    const int node = static_cast<int>(n);
    if (t.nodes[n].devices.empty()) {
      slots.push_back({node, -1});
      continue;
    }
    for (size_t d = 0; d < t.nodes[n].devices.size(); ++d)
      slots.push_back({node, static_cast<int>(d)});
  }
  return slots;
}

Groups NodeLocalGroups(const Topology& t) {
  Groups groups(t.nodes.size());
  const std::vector<Slot> slots = Slots(t);
  for (size_t i = 0; i < slots.size(); ++i) groups[slots[i].node].push_back(static_cast<int>(i));
  return groups;
}

Groups SameLocalRankGroups(const Topology& t) {
  Groups groups;
  for (const std::vector<int>& node : NodeLocalGroups(t)) {
    if (groups.size() < node.size()) groups.resize(node.size());
    for (size_t k = 0; k < node.size(); ++k) groups[k].push_back(node[k]);
  }
  return groups;
}

Groups DeviceGroupGroups(const Topology& t) {
  Groups groups;
  const std::vector<Slot> slots = Slots(t);
  // Keyed by (node, group name); std::map keeps the output in node order, then name order.
  std::map<std::pair<int, std::string>, std::vector<int>> by_group;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].device < 0) continue;
    const std::string& g = t.nodes[slots[i].node].devices[slots[i].device].group;
    if (!g.empty()) by_group[{slots[i].node, g}].push_back(static_cast<int>(i));
  }
  for (auto& [key, members] : by_group)
    if (members.size() >= 2) groups.push_back(std::move(members));
  return groups;
}

std::optional<Link> DeviceGroupLink(const Topology& t, int node) {
  const std::vector<Device>& devs = t.nodes[static_cast<size_t>(node)].devices;
  for (size_t a = 0; a < devs.size(); ++a)
    for (size_t b = a + 1; b < devs.size(); ++b)
      if (!devs[a].group.empty() && devs[a].group == devs[b].group)
        return LinkBetween(t, node, static_cast<int>(a), node, static_cast<int>(b));
  return std::nullopt;
}

std::optional<NicType> PreferredRdma(const Node& n) {
  for (NicType type : kRdmaOrder)
    if (Has(n, type)) return type;
  return std::nullopt;
}

std::optional<NicType> PairNicType(const Topology& t, int a, int b) {
  if (a == b) return std::nullopt;
  for (NicType type : kRdmaOrder)
    if (Has(t.nodes[a], type) && Has(t.nodes[b], type)) return type;
  return NicType::kEthernet;
}

std::vector<FabricGroup> FabricGroups(const Topology& t) {
  std::map<NicType, std::vector<int>> by_type;
  for (size_t n = 0; n < t.nodes.size(); ++n)
    by_type[PreferredRdma(t.nodes[n]).value_or(NicType::kEthernet)].push_back(static_cast<int>(n));
  std::vector<FabricGroup> groups;
  for (auto& [type, nodes] : by_type) groups.push_back({type, std::move(nodes)});
  return groups;
}

Groups FabricSlotGroups(const Topology& t) {
  const Groups per_node = NodeLocalGroups(t);
  Groups groups;
  for (const FabricGroup& f : FabricGroups(t)) {
    std::vector<int> slots;
    for (int n : f.nodes) slots.insert(slots.end(), per_node[n].begin(), per_node[n].end());
    groups.push_back(std::move(slots));
  }
  return groups;
}

}  // namespace braid::topo
