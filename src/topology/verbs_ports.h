// What libibverbs says about this machine's RDMA ports, for what sysfs cannot tell (DESIGN.md 2.4).
//
// Discovery (discover.h) lists RDMA ports from sysfs: /sys/class/infiniband/<dev>/ports/<p> gives
// the link layer (InfiniBand, or Ethernet for RoCE) and the rate. Verbs adds:
//   - the RoCE v2 GID index of a RoCE port (the GID whose type is RoCE v2, an IPv4 one first):
//     UCX (UCX_IB_GID_INDEX, through the ucx transport's fabric route) and NCCL's IB transport
//     need it to send RoCE traffic over routable UDP/IP;
//   - the link layer and active rate (width x lane speed as negotiated) of ports that sysfs does
//     not show, as in containers that see /dev/infiniband but not the host's sysfs tree.
// libibverbs is loaded when discovery asks (once per process), only where it is installed; on a
// machine without RDMA devices (this one) verbs lists nothing and discovery's answer is sysfs's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace braid::topo {

struct VerbsPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  int ports_of_device = 1;  // the device's physical ports (a NIC's name has ":port" when > 1)
  bool infiniband = false;  // link layer InfiniBand; else Ethernet (RoCE)
  uint64_t rate_bps = 0;    // active width x speed, 0 when the port is down or unknown
  int roce_v2_gid = -1;     // RoCE v2 GID index (an IPv4 one when there is), -1: none
};

// Every port of every device libibverbs lists; empty without libibverbs or devices. `notes` gets a
// line per device that could not be queried.
std::vector<VerbsPort> QueryVerbsPorts(std::vector<std::string>* notes);

// The rate of an active port from ibv_port_attr's active_width and active_speed codes (IB spec);
// 0 for codes it does not know.
uint64_t VerbsRateBps(uint8_t active_width, uint32_t active_speed);

// Adds what `ports` tell to `nics` (discovery's, from sysfs): a RoCE port's GID index, the rate
// where sysfs had none, and the ports sysfs did not list at all. Pure (unit-tested).
void MergeVerbsPorts(const std::vector<VerbsPort>& ports, std::vector<Nic>* nics,
                     std::vector<std::string>* notes);

}  // namespace braid::topo
