#include "core/runtime/placement.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>

#include "topology/groups.h"
#include "topology/local_topology.h"

namespace braid {

namespace {

// Discovery reads hwloc and sysfs (tens of ms): once per process, not once per communicator.
Result<topo::LocalTopology>& CachedTopology() {
  static std::once_flag once;
  static std::optional<Result<topo::LocalTopology>> loaded;
  std::call_once(once, [] { loaded.emplace(topo::LoadLocalTopology()); });
  return *loaded;
}

}  // namespace

int NicsPerNode(const GroupLayout& layout, const std::vector<RankInfo>& ranks) {
  if (layout.nnodes < 1 || layout.node_of.size() != ranks.size()) return 1;
  std::vector<std::set<std::string>> nics(static_cast<size_t>(layout.nnodes));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int node = layout.node_of[r];
    if (ranks[r].nic.empty()) return 1;
    if (node >= 0 && node < layout.nnodes) nics[static_cast<size_t>(node)].insert(ranks[r].nic);
  }
  size_t fewest = 0;
  for (const auto& n : nics)
    if (!n.empty() && (fewest == 0 || n.size() < fewest)) fewest = n.size();
  return static_cast<int>(std::max<size_t>(fewest, 1));
}

const char* FabricName(int fabric) {
  if (fabric < 0 || fabric > static_cast<int>(topo::NicType::kEthernet)) return "unknown";
  return topo::NicTypeName(static_cast<topo::NicType>(fabric));
}

Result<NodePlacement> LocalPlacement(const std::string& host_id, const std::string& hostname) {
  auto& loaded = CachedTopology();
  if (!loaded.ok()) return loaded.status();
  const topo::Topology& t = loaded->topology;
  int index = -1;
  for (const std::string* name : {&host_id, &hostname})
    if (index < 0 && !name->empty()) index = t.find_node(*name);
  if (index < 0 && t.nodes.size() == 1) index = 0;
  if (index < 0) {
    std::string names;
    for (const auto& n : t.nodes) names += (names.empty() ? "" : ", ") + n.name;
    return InvalidArgument("the topology (" + loaded->source + ") describes nodes " + names +
                           " but not this rank's node '" + (host_id.empty() ? hostname : host_id) +
                           "' (BRAID_HOSTID, else the hostname, names it)");
  }
  const topo::Node& node = t.nodes[static_cast<size_t>(index)];
  NodePlacement p;
  p.node = node.name;
  for (const auto& nic : node.nics) {
    p.nic_types |= static_cast<uint8_t>(1u << static_cast<int>(nic.type));
    if (nic.type == topo::NicType::kInfiniBand || nic.type == topo::NicType::kRoCE)
      p.rdma_nics.push_back({nic.name, static_cast<uint8_t>(nic.type), nic.gid_index});
  }
  for (const auto& d : node.devices)
    p.device_groups.push_back(d.group.empty() ? "=" + d.name : d.group);
  if (auto link = topo::DeviceGroupLink(t, index)) {
    p.group_latency_s = link->latency;
    p.group_bandwidth = link->bandwidth;
  }
  auto rdma = topo::PreferredRdma(node);
  p.fabric = static_cast<int8_t>(rdma ? *rdma : topo::NicType::kEthernet);
  return p;
}

}  // namespace braid
