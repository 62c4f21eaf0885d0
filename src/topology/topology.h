// The topology model (DESIGN.md 2.4): what braid knows about the machines a job runs on.
//
// A tree: cluster > switch domain (may nest: leaf under spine) > node > device group (e.g. the two
// GCDs of one MI250X, or the eight GPUs on one NVSwitch) > device. Every level has a link: the
// bandwidth (bytes/s) and latency (s) between two members that meet first at that level. A level's
// link is given once for the whole topology (`levels`) and may be overridden per switch domain,
// node or device group (a RoCE domain slower than an IB one). Beside the tree, each node lists
// its NICs (type, speed, NUMA node) and its CPU layout.
//
// Plain structs with value semantics and no global state: discovery (discover.h) and the file
// loader (topology_file.h) produce one, the grouping helpers (groups.h) read one, and two are
// equal when every field is (the file format's round trip is tested with ==).
//
// Names refer to each other (a node's switch, a switch's parent, a device's group) rather than
// holding indices, so that a model written by hand or loaded from a file reads like the file;
// Validate() checks that every name resolves and the switch hierarchy has no cycle.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace braid::topo {

// A link: what two members of one level see between each other.
struct Link {
  double bandwidth = 0;  // bytes per second, > 0
  double latency = 0;    // seconds, > 0
  bool operator==(const Link&) const = default;
};

// Innermost first: two devices of one group meet at kDeviceGroup, two groups of one node at
// kNode, two nodes under one switch domain at kSwitch, anything else at kCluster.
enum class Level : uint8_t { kDeviceGroup = 0, kNode = 1, kSwitch = 2, kCluster = 3 };
inline constexpr int kNumLevels = 4;
const char* LevelName(Level level);  // "device_group", "node", "switch", "cluster"

// NIC fabrics. RDMA types are the ones a node pair can run verbs/libfabric over; two nodes use
// RDMA only when they share a type (an IB HCA cannot talk to a RoCE NIC). Slingshot (HPE Cray,
// Frontier) is its own type: it is Ethernet-compatible at the link layer, but its RDMA goes
// through libfabric's cxi provider, neither verbs-over-IB nor RoCE, so it groups with itself.
enum class NicType : uint8_t { kInfiniBand = 0, kRoCE = 1, kSlingshot = 2, kEthernet = 3 };
const char* NicTypeName(NicType type);  // "ib", "roce", "slingshot", "ethernet"
bool IsRdma(NicType type);              // everything but kEthernet

struct Nic {
  std::string name;  // "mlx5_0", "eth0", "hsn0"
  NicType type = NicType::kEthernet;
  uint64_t speed_bps = 0;  // link speed in bits/s; 0 = unknown (virtual NICs report none)
  int numa = -1;           // NUMA node (OS index) it hangs off; -1 = unknown
  int gid_index = -1;      // RoCE: the RoCE v2 GID index (verbs_ports.h); -1 = unknown or n/a
  bool operator==(const Nic&) const = default;
};

struct CpuInfo {
  int packages = 0;    // sockets
  int numa_nodes = 0;  // NUMA nodes with memory
  int cores = 0;       // physical cores
  int threads = 0;     // hardware threads (what sysconf(_SC_NPROCESSORS_ONLN) counts)
  bool operator==(const CpuInfo&) const = default;
};

enum class Vendor : uint8_t { kUnknown = 0, kNvidia = 1, kAmd = 2, kIntel = 3 };
const char* VendorName(Vendor vendor);  // "unknown", "nvidia", "amd", "intel"

// An accelerator (a GPU, or one GCD of a multi-die GPU: each GCD is its own device).
struct Device {
  std::string name;  // "gpu0", "gcd3"
  Vendor vendor = Vendor::kUnknown;
  std::string pci;    // PCI bus id "0000:07:00.0"; empty = unknown
  int numa = -1;      // -1 = unknown
  std::string group;  // the device group it belongs to; empty = none (a group of its own)
  bool operator==(const Device&) const = default;
};

struct DeviceGroup {
  std::string name;
  std::optional<Link> link;  // between its devices; else the topology's kDeviceGroup level
  bool operator==(const DeviceGroup&) const = default;
};

struct Node {
  std::string name;           // unique in the topology (hostname, or BRAID_HOSTID)
  std::string switch_domain;  // empty = directly under the cluster
  std::optional<Link> link;   // between its device groups; else the kNode level
  CpuInfo cpu;
  std::vector<Nic> nics;
  std::vector<DeviceGroup> groups;
  std::vector<Device> devices;
  bool operator==(const Node&) const = default;
};

struct SwitchDomain {
  std::string name;
  std::string parent;        // enclosing switch domain; empty = directly under the cluster
  std::optional<Link> link;  // between nodes that meet here; else the kSwitch level
  bool operator==(const SwitchDomain&) const = default;
};

struct Topology {
  std::string name = "cluster";
  std::array<std::optional<Link>, kNumLevels> levels;  // indexed by Level
  std::vector<SwitchDomain> switches;
  std::vector<Node> nodes;
  bool operator==(const Topology&) const = default;

  const std::optional<Link>& level(Level l) const { return levels[static_cast<int>(l)]; }
  int find_node(const std::string& node_name) const;  // index, or -1
};

// Checks what the types cannot: unique names (switches, nodes; NICs, groups and devices within a
// node), references that resolve (switch parent, node switch, device group), no cycle among
// switch domains, links positive and finite. The file loader runs it with line numbers of its
// own; discovery and hand-built models use this.
Status Validate(const Topology& t);

// The switch domains on a cycle of parent links, as "a -> b -> a"; empty when there is none.
// Parents that name no switch end a chain (Validate reports those separately).
std::string SwitchCycle(const Topology& t);

// The link between device `dev_a` of node `a` and device `dev_b` of node `b` (dev = -1: the node
// itself, for CPU-only nodes): the override or level link where the two first meet. nullopt when
// that level has no link in the model (a discovered single node has none: nothing measured).
std::optional<Link> LinkBetween(const Topology& t, int a, int dev_a, int b, int dev_b);

// The level at which those two meet (kDeviceGroup also for a device with itself).
Level MeetingLevel(const Topology& t, int a, int dev_a, int b, int dev_b);

}  // namespace braid::topo
