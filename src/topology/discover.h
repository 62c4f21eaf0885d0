// Discovery: the topology of the machine this process runs on, as a one-node topo::Topology.
//
// CPU layout (packages, NUMA nodes, cores, hardware threads) and PCI GPUs come from hwloc when
// braid is built with it (BRAID_HAVE_HWLOC), else from sysfs and sysconf. NICs come from sysfs
// in both cases (hwloc adds their NUMA affinity when present):
//   - /sys/class/infiniband/<dev>/ports/<p>/link_layer says InfiniBand (an IB HCA) or Ethernet
//     (a RoCE NIC); ports/<p>/rate ("200 Gb/sec (4X HDR)") gives the speed.
//   - /sys/class/net/<if> lists the rest as Ethernet, with speed (Mb/s) from its `speed` file.
//     An interface counts only when it is backed by hardware: it has a `device` link (bridges,
//     veth, ifb, tun, bonds and docker interfaces live under /sys/devices/virtual and have none),
//     it is not loopback, and it is not the netdev of an RDMA device already listed (a RoCE
//     NIC's eth interface, an IB HCA's ib0 IPoIB interface).
// The node's links are left unset: nothing is measured here.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "topology/topology.h"

namespace braid::topo {

struct DiscoverOptions {
  std::string node_name;  // empty: the hostname
  // Roots of the sysfs trees read (tests point these at fakes).
  std::string sys_class_net = "/sys/class/net";
  std::string sys_class_infiniband = "/sys/class/infiniband";
};

struct Discovery {
  Topology topology;               // one node
  std::string method;              // "hwloc 2.9.0 + sysfs" or "sysfs + sysconf (no hwloc)"
  std::vector<std::string> notes;  // what was skipped or unknown, and why
};

Result<Discovery> Discover(const DiscoverOptions& options = {});

// The RDMA devices and network interfaces found under the given sysfs roots (the NIC half of
// Discover, exposed for tests with fake trees). `notes` gets one line per interface skipped.
std::vector<Nic> DiscoverNics(const DiscoverOptions& options, std::vector<std::string>* notes);

}  // namespace braid::topo
