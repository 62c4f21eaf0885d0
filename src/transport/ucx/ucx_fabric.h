// Which pairs of ranks the UCX transport serves, and over which UCX devices (DESIGN.md 2.3).
//
// The transport runs one UCX worker per *route* a communicator needs:
//   ib, roce  a pair of ranks on different nodes whose nodes share that RDMA fabric (the
//             topology's NIC types, RankInfo::nic_types) and where UCX found this node's NICs of
//             that fabric: the worker's UCX context is restricted to those devices
//             (UCX_NET_DEVICES), so two groups of ranks on two fabrics each use their own NICs,
//             as Holmes asks. InfiniBand is preferred when the two nodes share both.
//   local     BRAID_TRANSPORTS names ucx and the pair shares a node: every UCX transport but tcp
//             (its shared memory: posix, sysv, cma; verbs where there are devices).
//   net       BRAID_TRANSPORTS names ucx and the pair is on different nodes without a common
//             fabric route: UCX's tcp, on this node's interfaces other than loopback (or the one
//             BRAID_SOCKET_IFNAME selects), so that ranks of emulated nodes (network namespaces
//             of one machine, which UCX would take for one host) talk over their links.
// Neither forced route lets UCX use tcp over loopback: UCX 1.13 adds a loopback lane beside the
// others when it can, and its connections there were refused now and then (a rank's send then
// never completed), which the tests here showed.
// Without ucx in BRAID_TRANSPORTS only the fabric routes exist, so every other pair keeps shm or
// tcp. A node whose topology lists an IB or RoCE NIC that UCX does not find gets no route for that
// fabric: its pairs fall back to tcp, and the rank says so in one log line.
//
// Everything here is a pure function of what both ranks published, so both ends of a pair reach
// the same answer (TransportInstance::canConnect must be symmetric); unit-tested without UCX
// (tests/unit/transport_ucx_fabric_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace braid::ucx {

enum class Route : uint8_t { kInfiniBand = 0, kRoCE = 1, kLocal = 2, kNetwork = 3 };
inline constexpr int kNumRoutes = 4;
const char* RouteName(Route r);  // "ib", "roce", "local", "net"
std::optional<Route> RouteByName(const std::string& name);
using RouteMask = uint32_t;  // a bit per Route
inline constexpr RouteMask RouteBit(Route r) {
  return RouteMask{1} << static_cast<unsigned>(r);
}

// NIC types as RankInfo::nic_types numbers them (topo::NicType): the two RDMA fabrics UCX
// drives through verbs.
inline constexpr uint8_t kNicInfiniBand = 0;
inline constexpr uint8_t kNicRoCE = 1;

// A device UCX found (its UCT transport resources): "tcp" on "eth0", "rc_mlx5" on "mlx5_0:1".
struct Device {
  std::string transport;
  std::string name;
  bool network = false;  // a network device (UCT_DEVICE_TYPE_NET), not memory or loopback
  bool operator==(const Device&) const = default;
};

// UCX configuration as (name, value) pairs for ucp_config_modify (names without "UCX_").
using Config = std::vector<std::pair<std::string, std::string>>;

// The UCX device name of a topology NIC: "mlx5_0" is port 1 of that HCA ("mlx5_0:1"); a name
// with a port ("mlx5_0:2", as discovery names the ports of a multi-port HCA) is kept.
std::string DeviceNameOf(const std::string& nic);

// A fabric route's devices and configuration on this node, or why it has none.
struct FabricPlan {
  std::vector<std::string> devices;  // UCX device names, e.g. {"mlx5_0:1"}
  Config config;                     // NET_DEVICES (and IB_GID_INDEX for RoCE, when known)
  std::string why_not;               // non-empty when the route cannot exist here
};
// For route kInfiniBand or kRoCE: this node's NICs of that fabric (`nics`, from the topology)
// that UCX found as network devices (`found`). A RoCE route gets IB_GID_INDEX when every one of
// its NICs has the same known RoCE v2 GID index (from verbs), else UCX picks.
FabricPlan PlanFabric(Route route, const std::vector<TransportContext::Nic>& nics,
                      const std::vector<Device>& found);

// The configuration of a route's UCX context beyond the environment's: the fabric plan's for
// ib/roce; for net, tcp on `ifname` (the interface BRAID_SOCKET_IFNAME selects) or, without one,
// on every network interface UCX found (`found`) but loopback (loopback when it is the only
// one); for local, every transport but tcp. The worker's common settings (CommonConfig) come on
// top.
Config RouteConfig(Route route, const FabricPlan* plan, const std::vector<Device>& found = {},
                   const std::string& ifname = "");
// Settings every braid context gets: a peer-liveness check every second, and rendezvous from
// kInPlaceBytes (so that a receiver never buffers a large message it has not asked for) except
// on the net route (CreditsLargeParts).
Config CommonConfig(Route route, uint64_t in_place_bytes);

// Whether a route sends the stream's large parts eagerly, their bytes credited like the small
// ones' (ucx_endpoint.h: flow control) instead of as rendezvous. The net route (UCX over tcp):
// there a rendezvous is a request, a reply and then the data, each moved only when the peer's
// worker progresses, with no zero copy to gain (docs/performance.md: 1.19x braid's tcp for a
// 64 MiB all-gather across the emulated nodes, 1.00 without). On ib and roce the rendezvous is
// the receiver's RDMA read, and on the local route cma's single copy: they keep it. Both ranks of
// a pair are on the same route (ChooseRoute), so they agree on what is credited.
bool CreditsLargeParts(Route route);

// The routes this rank needs in a communicator: the fabric routes its node has NICs for where a
// peer on another node shares the fabric, and with `forced` local (a peer on this node) and net
// (a peer on another node).
RouteMask WantedRoutes(const TransportContext& ctx, bool forced);

// The route that connects `me` and `peer`, each with the routes it published (a bit per Route),
// or nullopt when UCX does not serve the pair. Symmetric in the two ranks: a route serves a pair
// only when both published it (local and net exist only where ucx was forced).
std::optional<Route> ChooseRoute(const RankInfo& me, RouteMask my_routes, const RankInfo& peer,
                                 RouteMask peer_routes);

// Whether BRAID_TRANSPORTS (`list`, comma-separated) names ucx.
bool NamedIn(const std::string& list);

}  // namespace braid::ucx
