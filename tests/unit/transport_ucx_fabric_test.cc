// Which pairs the UCX transport serves and over which devices (src/transport/ucx/ucx_fabric.h),
// without UCX: the choice per pair of ranks, the UCX configuration a fabric route produces, and
// the blob that carries the workers' addresses. The shipped mixed cluster
// (topologies/mixed-ib-roce.topo) drives the choice as a job on it would.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/topology_file.h"
#include "transport/ucx/ucx_fabric.h"
#include "transport/ucx/ucx_transport.h"

namespace braid::ucx {
namespace {

constexpr uint8_t kIb = 1u << kNicInfiniBand;
constexpr uint8_t kRoce = 1u << kNicRoCE;
constexpr uint8_t kEthernet = 1u << 3;

RankInfo Rank(int rank, const std::string& host, uint8_t nic_types) {
  RankInfo r;
  r.rank = rank;
  r.hostname = host;
  r.host_id = host;
  r.nic_types = nic_types;
  return r;
}

const RouteMask kIbRoute = RouteBit(Route::kInfiniBand);
const RouteMask kRoceRoute = RouteBit(Route::kRoCE);
const RouteMask kForced = RouteBit(Route::kLocal) | RouteBit(Route::kNetwork);

TEST(UcxFabric, DeviceNamesFollowUcx) {
  EXPECT_EQ(DeviceNameOf("mlx5_0"), "mlx5_0:1");
  EXPECT_EQ(DeviceNameOf("mlx5_0:2"), "mlx5_0:2");
}

// An IB pair uses UCX restricted to the IB HCA; a RoCE pair the RoCE NIC, with the RoCE v2 GID
// index verbs found; the UCX configuration is exactly that.
TEST(UcxFabric, AFabricRouteIsRestrictedToItsDevices) {
  const std::vector<TransportContext::Nic> nics = {
      {"mlx5_0", kNicInfiniBand, -1}, {"mlx5_1", kNicRoCE, 3}, {"mlx5_2", kNicRoCE, 3}};
  const std::vector<Device> found = {{"rc_mlx5", "mlx5_0:1", true}, {"dc_mlx5", "mlx5_0:1", true},
                                     {"rc_mlx5", "mlx5_1:1", true}, {"rc_mlx5", "mlx5_2:1", true},
                                     {"tcp", "eth0", true},         {"posix", "memory", false}};
  FabricPlan ib = PlanFabric(Route::kInfiniBand, nics, found);
  EXPECT_EQ(ib.devices, std::vector<std::string>{"mlx5_0:1"});
  EXPECT_EQ(ib.config, (Config{{"NET_DEVICES", "mlx5_0:1"}}));
  EXPECT_EQ(RouteConfig(Route::kInfiniBand, &ib), ib.config);
  EXPECT_TRUE(ib.why_not.empty());
  FabricPlan roce = PlanFabric(Route::kRoCE, nics, found);
  EXPECT_EQ(roce.devices, (std::vector<std::string>{"mlx5_1:1", "mlx5_2:1"}));
  EXPECT_EQ(roce.config, (Config{{"NET_DEVICES", "mlx5_1:1,mlx5_2:1"}, {"IB_GID_INDEX", "3"}}));
  // GID indexes that differ (or are unknown) are left to UCX.
  auto mixed = nics;
  mixed[2].gid_index = 1;
  EXPECT_EQ(PlanFabric(Route::kRoCE, mixed, found).config,
            (Config{{"NET_DEVICES", "mlx5_1:1,mlx5_2:1"}}));
  // The forced routes: on a node every transport but tcp; across nodes tcp, never on loopback
  // unless it is all there is, on BRAID_SOCKET_IFNAME's interface when one is selected.
  EXPECT_EQ(RouteConfig(Route::kLocal, nullptr), (Config{{"TLS", "^tcp"}}));
  EXPECT_EQ(RouteConfig(Route::kNetwork, nullptr, found),
            (Config{{"TLS", "tcp"}, {"NET_DEVICES", "eth0"}}));
  const std::vector<Device> two = {
      {"tcp", "eth0", true}, {"tcp", "lo", true}, {"tcp", "ib0", true}, {"posix", "memory", false}};
  EXPECT_EQ(RouteConfig(Route::kNetwork, nullptr, two),
            (Config{{"TLS", "tcp"}, {"NET_DEVICES", "eth0,ib0"}}));
  EXPECT_EQ(RouteConfig(Route::kNetwork, nullptr, two, "ib0"),
            (Config{{"TLS", "tcp"}, {"NET_DEVICES", "ib0"}}));
  EXPECT_EQ(RouteConfig(Route::kNetwork, nullptr, {{"tcp", "lo", true}}),
            (Config{{"TLS", "tcp"}, {"NET_DEVICES", "lo"}}));
  for (Route r : {Route::kInfiniBand, Route::kRoCE, Route::kLocal}) {
    EXPECT_EQ(CommonConfig(r, 65536),
              (Config{{"RNDV_THRESH", "65536"}, {"KEEPALIVE_INTERVAL", "1s"}}));
    EXPECT_FALSE(CreditsLargeParts(r));
  }
  // UCX over tcp: large parts go eagerly, credited (no rendezvous round trips over tcp).
  EXPECT_EQ(CommonConfig(Route::kNetwork, 65536),
            (Config{{"RNDV_THRESH", "inf"}, {"KEEPALIVE_INTERVAL", "1s"}}));
  EXPECT_TRUE(CreditsLargeParts(Route::kNetwork));
}

// This machine's case: the topology says IB, UCX finds only tcp and shared memory. No route,
// and the reason names the missing device and what UCX did find.
TEST(UcxFabric, NoMatchingDeviceMeansNoRoute) {
  const std::vector<TransportContext::Nic> nics = {{"mlx5_0", kNicInfiniBand, -1}};
  const std::vector<Device> here = {
      {"tcp", "eth0", true}, {"tcp", "lo", true}, {"posix", "memory", false}};
  FabricPlan p = PlanFabric(Route::kInfiniBand, nics, here);
  EXPECT_TRUE(p.devices.empty());
  EXPECT_TRUE(p.config.empty());
  EXPECT_NE(p.why_not.find("UCX found none of this node's InfiniBand devices (mlx5_0:1)"),
            std::string::npos)
      << p.why_not;
  EXPECT_NE(p.why_not.find("it found: tcp/eth0, tcp/lo"), std::string::npos) << p.why_not;
  EXPECT_NE(PlanFabric(Route::kRoCE, nics, here).why_not.find("no RoCE NIC"), std::string::npos);
}

TEST(UcxFabric, ChoiceIsPerPairAndSymmetric) {
  const RankInfo ib0 = Rank(0, "ib0", kIb | kEthernet), ib1 = Rank(1, "ib1", kIb | kEthernet);
  const RankInfo roce0 = Rank(2, "roce0", kRoce | kEthernet);
  const RankInfo both0 = Rank(3, "both0", kIb | kRoce), both1 = Rank(4, "both1", kIb | kRoce);
  const RankInfo ib0b = Rank(5, "ib0", kIb | kEthernet);  // another rank on node ib0
  struct Case {
    RankInfo a;
    RouteMask ra;
    RankInfo b;
    RouteMask rb;
    std::optional<Route> want;
  };
  const Case cases[] = {
      {ib0, kIbRoute, ib1, kIbRoute, Route::kInfiniBand},
      // UCX found no IB device on one side: that pair is not UCX's (tcp serves it).
      {ib0, kIbRoute, ib1, 0, std::nullopt},
      // No common fabric: not UCX's unless forced.
      {ib0, kIbRoute, roce0, kRoceRoute, std::nullopt},
      {ib0, kIbRoute | kForced, roce0, kRoceRoute | kForced, Route::kNetwork},
      // Both fabrics in common: InfiniBand first; RoCE when only it has devices on both.
      {both0, kIbRoute | kRoceRoute, both1, kIbRoute | kRoceRoute, Route::kInfiniBand},
      {both0, kIbRoute | kRoceRoute, both1, kRoceRoute, Route::kRoCE},
      // Same node: shm's, unless forced; forced on one side only: neither.
      {ib0, kIbRoute, ib0b, kIbRoute, std::nullopt},
      {ib0, kForced, ib0b, kForced, Route::kLocal},
      {ib0, kForced, ib0b, 0, std::nullopt},
      // A fabric route wins over the forced net route.
      {ib0, kIbRoute | kForced, ib1, kIbRoute | kForced, Route::kInfiniBand},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.a.host_id + " - " + c.b.host_id);
    EXPECT_EQ(ChooseRoute(c.a, c.ra, c.b, c.rb), c.want);
    EXPECT_EQ(ChooseRoute(c.b, c.rb, c.a, c.ra), c.want) << "not symmetric";
  }
}

// A communicator on the shipped mixed cluster, two ranks per node: each rank wants the route of
// its node's fabric (IB nodes ib, RoCE nodes roce), and local + net only when ucx is forced.
TEST(UcxFabric, MixedClusterWantsEachNodesFabric) {
  auto loaded = topo::LoadTopologyFile(BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const topo::Topology& t = *loaded;
  ASSERT_EQ(t.nodes.size(), 4u);
  TransportContext base;
  base.nranks = 8;
  for (int r = 0; r < 8; ++r) {
    const topo::Node& n = t.nodes[static_cast<size_t>(r % 4)];
    uint8_t types = 0;
    for (const auto& nic : n.nics) types |= static_cast<uint8_t>(1u << static_cast<int>(nic.type));
    base.ranks.push_back(Rank(r, n.name, types));
  }
  for (int r = 0; r < 8; ++r) {
    TransportContext ctx = base;
    ctx.rank = r;
    for (const auto& nic : t.nodes[static_cast<size_t>(r % 4)].nics)
      if (nic.type == topo::NicType::kInfiniBand || nic.type == topo::NicType::kRoCE)
        ctx.local_nics.push_back({nic.name, static_cast<uint8_t>(nic.type), -1});
    const bool ib = r % 4 < 2;
    EXPECT_EQ(WantedRoutes(ctx, false), ib ? kIbRoute : kRoceRoute) << "rank " << r;
    EXPECT_EQ(WantedRoutes(ctx, true), (ib ? kIbRoute : kRoceRoute) | kForced) << "rank " << r;
    // The route's devices: the node's mlx5_0, if UCX finds it.
    const Route route = ib ? Route::kInfiniBand : Route::kRoCE;
    FabricPlan p =
        PlanFabric(route, ctx.local_nics, {{ib ? "rc_mlx5" : "rc_verbs", "mlx5_0:1", true}});
    EXPECT_EQ(p.config, (Config{{"NET_DEVICES", "mlx5_0:1"}}));
  }
  // Pairs: IB-IB and RoCE-RoCE on their fabric, IB-RoCE not UCX's (tcp), same node not UCX's.
  auto route_of = [&](int a, int b) {
    auto routes = [&](int r) { return r % 4 < 2 ? kIbRoute : kRoceRoute; };
    return ChooseRoute(base.ranks[a], routes(a), base.ranks[b], routes(b));
  };
  EXPECT_EQ(route_of(0, 1), Route::kInfiniBand);
  EXPECT_EQ(route_of(2, 3), Route::kRoCE);
  EXPECT_EQ(route_of(0, 2), std::nullopt);
  EXPECT_EQ(route_of(0, 4), std::nullopt);
  // A single node: nothing to do for UCX, so nothing is loaded.
  TransportContext one = base;
  one.rank = 0;
  one.ranks = {base.ranks[0], base.ranks[4]};
  one.ranks[1].rank = 1;
  one.local_nics = {{"mlx5_0", kNicInfiniBand, -1}};
  EXPECT_EQ(WantedRoutes(one, false), 0u);
}

TEST(UcxFabric, BlobRoundTripAndGarbage) {
  Blob b;
  b.addresses[static_cast<int>(Route::kInfiniBand)] = std::string("\x00\x01\xfe\xff", 4);
  b.addresses[static_cast<int>(Route::kNetwork)] = "addr";
  const std::string text = EncodeBlob(b);
  EXPECT_EQ(text, "ucx1 ib=0001feff net=61646472");
  auto back = DecodeBlob(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->routes(), kIbRoute | RouteBit(Route::kNetwork));
  for (int i = 0; i < kNumRoutes; ++i) EXPECT_EQ(back->addresses[i], b.addresses[i]);
  for (const char* bad : {"", "tcp1 127.0.0.1:5", "ucx2 ib=00", "ucx1 ib=0", "ucx1 ib=zz",
                          "ucx1 eth=00", "ucx1 ib", "ucx1 ib=", "ucx1 ib=00 ib=01"}) {
    auto d = DecodeBlob(bad);
    EXPECT_FALSE(d.ok()) << "'" << bad << "' decoded";
    if (!d.ok()) {
      EXPECT_EQ(d.status().cls(), ErrorClass::kInvalidArgument) << bad;
    }
  }
  EXPECT_EQ(DecodeBlob("ucx1")->routes(), 0u);
}

TEST(UcxFabric, ForcedOnlyWhenNamed) {
  EXPECT_TRUE(NamedIn("ucx"));
  EXPECT_TRUE(NamedIn("shm,ucx"));
  EXPECT_FALSE(NamedIn(""));
  EXPECT_FALSE(NamedIn("shm,tcp"));
  EXPECT_FALSE(NamedIn("ucxx"));
}

}  // namespace
}  // namespace braid::ucx
