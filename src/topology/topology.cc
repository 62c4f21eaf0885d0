#include "topology/topology.h"

#include <cmath>
#include <map>
#include <set>

namespace braid::topo {

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDeviceGroup:
      return "device_group";
    case Level::kNode:
      return "node";
    case Level::kSwitch:
      return "switch";
    case Level::kCluster:
      return "cluster";
  }
  return "?";
}

const char* NicTypeName(NicType type) {
  switch (type) {
    case NicType::kInfiniBand:
      return "ib";
    case NicType::kRoCE:
      return "roce";
    case NicType::kSlingshot:
      return "slingshot";
    case NicType::kEthernet:
      return "ethernet";
  }
  return "?";
}

bool IsRdma(NicType type) {
  return type != NicType::kEthernet;
}

const char* VendorName(Vendor vendor) {
  switch (vendor) {
    case Vendor::kUnknown:
      return "unknown";
    case Vendor::kNvidia:
      return "nvidia";
    case Vendor::kAmd:
      return "amd";
    case Vendor::kIntel:
      return "intel";
  }
  return "?";
}

int Topology::find_node(const std::string& node_name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == node_name) return static_cast<int>(i);
  return -1;
}

namespace {

bool GoodLink(const Link& l) {
  return std::isfinite(l.bandwidth) && l.bandwidth > 0 && std::isfinite(l.latency) && l.latency > 0;
}

Status CheckLink(const std::optional<Link>& l, const std::string& what) {
  if (l && !GoodLink(*l))
    return InvalidArgument(what + ": bandwidth and latency must be positive and finite");
  return Status::Ok();
}

// Each switch domain's parent, by name.
std::map<std::string, std::string> Parents(const Topology& t) {
  std::map<std::string, std::string> parents;
  for (const SwitchDomain& d : t.switches) parents.emplace(d.name, d.parent);
  return parents;
}

// The chain of switch domains from `s` up to the cluster (s first). Stops after as many steps as
// there are switches, so a cycle (which Validate refuses) cannot loop.
std::vector<std::string> Ancestry(const std::map<std::string, std::string>& parents,
                                  const std::string& s) {
  std::vector<std::string> chain;
  std::string cur = s;
  while (!cur.empty() && chain.size() <= parents.size()) {
    chain.push_back(cur);
    auto it = parents.find(cur);
    cur = it == parents.end() ? std::string() : it->second;
  }
  return chain;
}

const SwitchDomain* FindSwitch(const Topology& t, const std::string& name) {
  for (const SwitchDomain& d : t.switches)
    if (d.name == name) return &d;
  return nullptr;
}

// The lowest switch domain both chains pass through, or empty.
std::string CommonSwitch(const Topology& t, const Node& a, const Node& b) {
  if (a.switch_domain.empty() || b.switch_domain.empty()) return {};
  const auto parents = Parents(t);
  const std::vector<std::string> ca = Ancestry(parents, a.switch_domain);
  const std::vector<std::string> cb = Ancestry(parents, b.switch_domain);
  const std::set<std::string> in_b(cb.begin(), cb.end());
  for (const std::string& s : ca)
    if (in_b.count(s)) return s;
  return {};
}

}  // namespace

std::string SwitchCycle(const Topology& t) {
  const auto parents = Parents(t);
  // Walk up from every switch; a walk that meets a switch it passed itself found a cycle, one
  // that meets a switch an earlier walk cleared stops there. Linear in the number of switches.
  std::map<std::string, int> walk_of;  // switch -> the walk that first passed it
  int walk = 0;
  for (const SwitchDomain& s : t.switches) {
    ++walk;
    std::vector<std::string> path;
    for (std::string cur = s.name; !cur.empty();) {
      auto [it, fresh] = walk_of.emplace(cur, walk);
      if (!fresh) {
        if (it->second != walk) break;  // joins a chain already known to end
        std::string text;
        bool in_cycle = false;
        for (const std::string& p : path) {
          in_cycle = in_cycle || p == cur;
          if (in_cycle) text += p + " -> ";
        }
        return text + cur;
      }
      path.push_back(cur);
      auto parent = parents.find(cur);
      cur = parent == parents.end() ? std::string() : parent->second;
    }
  }
  return {};
}

Status Validate(const Topology& t) {
  for (int l = 0; l < kNumLevels; ++l)
    BRAID_RETURN_IF_ERROR(
        CheckLink(t.levels[l], std::string("level ") + LevelName(static_cast<Level>(l))));
  std::set<std::string> switches;
  for (const SwitchDomain& s : t.switches) {
    if (s.name.empty()) return InvalidArgument("a switch domain has no name");
    if (!switches.insert(s.name).second)
      return InvalidArgument("switch '" + s.name + "' is defined twice");
    BRAID_RETURN_IF_ERROR(CheckLink(s.link, "switch '" + s.name + "'"));
  }
  for (const SwitchDomain& s : t.switches)
    if (!s.parent.empty() && !switches.count(s.parent))
      return InvalidArgument("switch '" + s.name + "': parent '" + s.parent + "' is not defined");
  if (std::string cycle = SwitchCycle(t); !cycle.empty())
    return InvalidArgument("switch domains form a cycle: " + cycle);
  std::set<std::string> nodes;
  for (const Node& n : t.nodes) {
    const std::string where = "node '" + n.name + "'";
    if (n.name.empty()) return InvalidArgument("a node has no name");
    if (!nodes.insert(n.name).second) return InvalidArgument(where + " is defined twice");
    if (!n.switch_domain.empty() && !switches.count(n.switch_domain))
      return InvalidArgument(where + ": switch '" + n.switch_domain + "' is not defined");
    BRAID_RETURN_IF_ERROR(CheckLink(n.link, where));
    std::set<std::string> nics, groups, devices;
    for (const Nic& nic : n.nics)
      if (!nics.insert(nic.name).second)
        return InvalidArgument(where + ": nic '" + nic.name + "' is defined twice");
    for (const DeviceGroup& g : n.groups) {
      if (!groups.insert(g.name).second)
        return InvalidArgument(where + ": group '" + g.name + "' is defined twice");
      BRAID_RETURN_IF_ERROR(CheckLink(g.link, where + " group '" + g.name + "'"));
    }
    for (const Device& d : n.devices) {
      if (!devices.insert(d.name).second)
        return InvalidArgument(where + ": device '" + d.name + "' is defined twice");
      if (!d.group.empty() && !groups.count(d.group))
        return InvalidArgument(where + ": device '" + d.name + "' names group '" + d.group +
                               "', which is not defined");
    }
  }
  return Status::Ok();
}

Level MeetingLevel(const Topology& t, int a, int dev_a, int b, int dev_b) {
  if (a == b) {
    if (dev_a < 0 || dev_b < 0 || dev_a == dev_b) return Level::kDeviceGroup;
    const Node& n = t.nodes[a];
    const std::string& ga = n.devices[dev_a].group;
    return !ga.empty() && ga == n.devices[dev_b].group ? Level::kDeviceGroup : Level::kNode;
  }
  return CommonSwitch(t, t.nodes[a], t.nodes[b]).empty() ? Level::kCluster : Level::kSwitch;
}

std::optional<Link> LinkBetween(const Topology& t, int a, int dev_a, int b, int dev_b) {
  const Level level = MeetingLevel(t, a, dev_a, b, dev_b);
  const Node& na = t.nodes[a];
  switch (level) {
    case Level::kDeviceGroup:
      if (dev_a >= 0) {
        for (const DeviceGroup& g : na.groups)
          if (g.name == na.devices[dev_a].group && g.link) return g.link;
      }
      break;
    case Level::kNode:
      if (na.link) return na.link;
      break;
    case Level::kSwitch: {
      const SwitchDomain* s = FindSwitch(t, CommonSwitch(t, na, t.nodes[b]));
      if (s && s->link) return s->link;
      break;
    }
    case Level::kCluster:
      break;
  }
  return t.level(level);
}

}  // namespace braid::topo
