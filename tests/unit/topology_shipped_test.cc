// The shipped topology files (topologies/): each loads, has the levels, bandwidths, NIC types and
// CPU layout its comments cite, survives the round trip, and yields the groups the hierarchical
// algorithms and the fabric split need.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include <cstdlib>

#include "core/base/config.h"
#include "topology/groups.h"
#include "topology/local_topology.h"
#include "topology/topology_file.h"

namespace braid::topo {
namespace {

Topology Load(const std::string& file) {
  auto t = LoadTopologyFile(std::string(BRAID_TOPOLOGIES_DIR) + "/" + file);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : Topology{};
}

Device Dev(const char* name) {
  Device d;
  d.name = name;
  return d;
}

void ExpectRoundTrip(const Topology& t) {
  const std::string text = DumpTopology(t);
  auto again = ParseTopology(text, "dump");
  ASSERT_TRUE(again.ok()) << again.status().message() << "\n" << text;
  EXPECT_EQ(*again, t) << text;
  EXPECT_EQ(DumpTopology(*again), text);
}

TEST(ShippedTopology, DgxA100) {
  const Topology t = Load("dgx-a100.topo");
  ASSERT_EQ(t.nodes.size(), 1u);
  const Node& n = t.nodes[0];
  EXPECT_EQ(n.cpu, (CpuInfo{2, 8, 128, 256}));
  ASSERT_EQ(n.nics.size(), 8u);
  for (const Nic& nic : n.nics) {
    EXPECT_EQ(nic.type, NicType::kInfiniBand) << nic.name;
    EXPECT_EQ(nic.speed_bps, 200000000000u) << nic.name;
    EXPECT_GE(nic.numa, 0);
  }
  ASSERT_EQ(n.devices.size(), 8u);
  for (const Device& d : n.devices) {
    EXPECT_EQ(d.vendor, Vendor::kNvidia);
    EXPECT_EQ(d.group, "nvswitch");
    EXPECT_EQ(d.pci.size(), 12u);
  }
  EXPECT_EQ(n.devices[0].pci, "0000:07:00.0");
  ASSERT_TRUE(t.level(Level::kDeviceGroup));
  EXPECT_EQ(t.level(Level::kDeviceGroup)->bandwidth, 300e9);  // NVLink 3, per direction
  EXPECT_EQ(t.level(Level::kDeviceGroup)->latency, 2e-6);
  ASSERT_TRUE(t.level(Level::kSwitch));
  EXPECT_EQ(t.level(Level::kSwitch)->bandwidth, 25e9);  // one HDR rail
  // Any two GPUs meet on the NVSwitch.
  EXPECT_EQ(MeetingLevel(t, 0, 0, 0, 7), Level::kDeviceGroup);
  EXPECT_EQ(LinkBetween(t, 0, 0, 0, 7)->bandwidth, 300e9);
  // One group of eight: node-local, device group and fabric agree.
  EXPECT_EQ(NodeLocalGroups(t), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(DeviceGroupGroups(t), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(SameLocalRankGroups(t).size(), 8u);
  EXPECT_EQ(FabricGroups(t), (std::vector<FabricGroup>{{NicType::kInfiniBand, {0}}}));
  ExpectRoundTrip(t);
}

TEST(ShippedTopology, Frontier) {
  const Topology t = Load("frontier.topo");
  ASSERT_EQ(t.nodes.size(), 1u);
  const Node& n = t.nodes[0];
  EXPECT_EQ(n.cpu, (CpuInfo{1, 4, 64, 128}));
  ASSERT_EQ(n.nics.size(), 4u);
  for (const Nic& nic : n.nics) {
    EXPECT_EQ(nic.type, NicType::kSlingshot);
    EXPECT_EQ(nic.speed_bps, 200000000000u);
  }
  ASSERT_EQ(n.devices.size(), 8u);
  ASSERT_EQ(n.groups.size(), 4u);
  for (const Device& d : n.devices) EXPECT_EQ(d.vendor, Vendor::kAmd);
  // Three levels: GCD pair (200 GB/s) < node (50 GB/s) < switch (25 GB/s).
  EXPECT_EQ(t.level(Level::kDeviceGroup)->bandwidth, 200e9);
  EXPECT_EQ(t.level(Level::kNode)->bandwidth, 50e9);
  EXPECT_EQ(t.level(Level::kSwitch)->bandwidth, 25e9);
  EXPECT_EQ(MeetingLevel(t, 0, 0, 0, 1), Level::kDeviceGroup);
  EXPECT_EQ(MeetingLevel(t, 0, 1, 0, 2), Level::kNode);
  EXPECT_EQ(LinkBetween(t, 0, 1, 0, 2)->bandwidth, 50e9);
  EXPECT_EQ(LinkBetween(t, 0, 6, 0, 7)->bandwidth, 200e9);
  // The GCD pairs.
  EXPECT_EQ(DeviceGroupGroups(t), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // The cost model's device-group link: the level's, or a group's override.
  ASSERT_TRUE(DeviceGroupLink(t, 0));
  EXPECT_EQ(DeviceGroupLink(t, 0)->bandwidth, 200e9);
  Topology faster = t;
  faster.nodes[0].groups[0].link = Link{400e9, 5e-7};
  EXPECT_EQ(DeviceGroupLink(faster, 0)->bandwidth, 400e9);
  EXPECT_EQ(FabricGroups(t), (std::vector<FabricGroup>{{NicType::kSlingshot, {0}}}));
  ExpectRoundTrip(t);
}

TEST(ShippedTopology, MixedIbRoce) {
  const Topology t = Load("mixed-ib-roce.topo");
  ASSERT_EQ(t.nodes.size(), 4u);
  const int ib0 = t.find_node("ib0"), ib1 = t.find_node("ib1");
  const int roce0 = t.find_node("roce0"), roce1 = t.find_node("roce1");
  ASSERT_TRUE(ib0 >= 0 && ib1 >= 0 && roce0 >= 0 && roce1 >= 0);
  EXPECT_EQ(t.nodes[ib0].nics[0].type, NicType::kInfiniBand);
  EXPECT_EQ(t.nodes[roce0].nics[0].type, NicType::kRoCE);
  EXPECT_EQ(t.nodes[roce0].nics[0].speed_bps, 100000000000u);
  EXPECT_EQ(t.nodes[ib0].nics[1].type, NicType::kEthernet);

  // Levels: IB nodes meet on their leaf at 25 GB/s, RoCE nodes at 12.5 GB/s, the two groups
  // only at the cluster level over Ethernet.
  EXPECT_EQ(MeetingLevel(t, ib0, 0, ib1, 0), Level::kSwitch);
  EXPECT_EQ(LinkBetween(t, ib0, 0, ib1, 0)->bandwidth, 25e9);
  EXPECT_EQ(LinkBetween(t, ib0, 0, ib1, 0)->latency, 1.5e-6);
  EXPECT_EQ(LinkBetween(t, roce0, 1, roce1, 0)->bandwidth, 12.5e9);
  EXPECT_EQ(MeetingLevel(t, ib1, 0, roce0, 0), Level::kCluster);
  EXPECT_EQ(LinkBetween(t, ib1, 0, roce0, 0)->bandwidth, 3.125e9);
  EXPECT_EQ(LinkBetween(t, ib1, 0, roce0, 0)->latency, 30e-6);
  EXPECT_EQ(LinkBetween(t, ib0, 0, ib0, 1)->bandwidth, 75e9);

  // The fabric split: IB nodes together, RoCE nodes together.
  EXPECT_EQ(FabricGroups(t), (std::vector<FabricGroup>{{NicType::kInfiniBand, {ib0, ib1}},
                                                       {NicType::kRoCE, {roce0, roce1}}}));
  EXPECT_EQ(FabricSlotGroups(t), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Pairs: same fabric uses it, an IB-RoCE pair has no common RDMA type and uses Ethernet.
  EXPECT_EQ(PairNicType(t, ib0, ib1), NicType::kInfiniBand);
  EXPECT_EQ(PairNicType(t, roce0, roce1), NicType::kRoCE);
  EXPECT_EQ(PairNicType(t, ib0, roce1), NicType::kEthernet);
  EXPECT_EQ(PairNicType(t, roce0, ib1), NicType::kEthernet);
  EXPECT_EQ(PairNicType(t, ib0, ib0), std::nullopt);

  EXPECT_EQ(NodeLocalGroups(t), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(SameLocalRankGroups(t), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  ExpectRoundTrip(t);
}

// Groups on shapes the shipped files do not have: CPU-only nodes, uneven device counts, a node
// with two RDMA types, a node with none.
TEST(DerivedGroups, UnevenAndCpuOnlyNodes) {
  Topology t;
  Node a, b, c, d;
  a.name = "a";  // two GPUs, IB and RoCE
  a.devices = {Dev("g0"), Dev("g1")};
  a.nics = {Nic{"ib", NicType::kInfiniBand, 0, -1}, Nic{"ro", NicType::kRoCE, 0, -1}};
  b.name = "b";  // CPU only, RoCE
  b.nics = {Nic{"ro", NicType::kRoCE, 0, -1}};
  c.name = "c";  // one GPU, Ethernet only
  c.devices = {Dev("g0")};
  c.nics = {Nic{"eth0", NicType::kEthernet, 0, -1}};
  d.name = "d";  // no NIC at all
  t.nodes = {a, b, c, d};
  ASSERT_TRUE(Validate(t).ok());
  EXPECT_EQ(Slots(t), (std::vector<Slot>{{0, 0}, {0, 1}, {1, -1}, {2, 0}, {3, -1}}));
  EXPECT_EQ(NodeLocalGroups(t), (Groups{{0, 1}, {2}, {3}, {4}}));
  EXPECT_EQ(SameLocalRankGroups(t), (Groups{{0, 2, 3, 4}, {1}}));
  EXPECT_TRUE(DeviceGroupGroups(t).empty());
  for (int node = 0; node < 4; ++node) EXPECT_FALSE(DeviceGroupLink(t, node)) << node;
  // a prefers IB; with b it shares only RoCE.
  EXPECT_EQ(PairNicType(t, 0, 1), NicType::kRoCE);
  EXPECT_EQ(PairNicType(t, 0, 2), NicType::kEthernet);
  EXPECT_EQ(PairNicType(t, 2, 3), NicType::kEthernet);
  EXPECT_EQ(FabricGroups(t),
            (std::vector<FabricGroup>{
                {NicType::kInfiniBand, {0}}, {NicType::kRoCE, {1}}, {NicType::kEthernet, {2, 3}}}));
  // No links in the model: nothing to report.
  EXPECT_EQ(LinkBetween(t, 0, 0, 1, -1), std::nullopt);
}

// BRAID_TOPO_FILE replaces discovery; a file that does not load is an error naming its line, not
// a fallback; NCCL_TOPO_FILE (NCCL's XML) is not read, and says so.
TEST(LocalTopologySource, BraidTopoFileAndNcclTopoFile) {
  const std::string mixed = std::string(BRAID_TOPOLOGIES_DIR) + "/mixed-ib-roce.topo";
  setenv("BRAID_TOPO_FILE", mixed.c_str(), 1);
  auto config = LoadConfigFromEnv();
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->topo_file, mixed);
  auto local = LoadLocalTopology();
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_EQ(local->source, "file " + mixed);
  EXPECT_EQ(local->topology.nodes.size(), 4u);

  char path[] = "/tmp/braid_topo_env_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string bad = "braid-topology 1\nnode n\n  nic x type=ib speed=fast\n";
  ASSERT_EQ(write(fd, bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
  close(fd);
  setenv("BRAID_TOPO_FILE", path, 1);
  auto refused = LoadLocalTopology();
  unlink(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("BRAID_TOPO_FILE: " + std::string(path) + ":3: ", 0),
            0u)
      << refused.status().message();

  unsetenv("BRAID_TOPO_FILE");
  setenv("NCCL_TOPO_FILE", "/etc/nccl-topo.xml", 1);
  auto discovered = LoadLocalTopology();
  unsetenv("NCCL_TOPO_FILE");
  ASSERT_TRUE(discovered.ok()) << discovered.status().message();
  EXPECT_EQ(discovered->source.rfind("discovered", 0), 0u);
  ASSERT_FALSE(discovered->notes.empty());
  EXPECT_NE(discovered->notes[0].find("NCCL_TOPO_FILE=/etc/nccl-topo.xml is not read"),
            std::string::npos);
}

}  // namespace
}  // namespace braid::topo
