// What libibverbs adds to discovery (src/topology/verbs_ports.h): rates from the port's width and
// speed codes, RoCE v2 GID indexes and ports sysfs does not show merged into the NICs discovery
// found, the gid= field of the topology format; and on this machine (no RDMA device) verbs adds
// nothing, so discovery's answer is sysfs's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/discover.h"
#include "topology/topology_file.h"
#include "topology/verbs_ports.h"

namespace braid::topo {
namespace {

TEST(VerbsPorts, RateFromWidthAndSpeed) {
  EXPECT_EQ(VerbsRateBps(2, 64), 200000000000ull);   // 4X HDR
  EXPECT_EQ(VerbsRateBps(2, 32), 100000000000ull);   // 4X EDR
  EXPECT_EQ(VerbsRateBps(2, 128), 400000000000ull);  // 4X NDR
  EXPECT_EQ(VerbsRateBps(1, 1), 2500000000ull);      // 1X SDR
  EXPECT_EQ(VerbsRateBps(8, 16), 168000000000ull);   // 12X FDR
  EXPECT_EQ(VerbsRateBps(3, 64), 0u);                // not a width code
  EXPECT_EQ(VerbsRateBps(2, 3), 0u);                 // not a speed code
}

TEST(VerbsPorts, MergeFillsWhatSysfsCannotTell) {
  std::vector<Nic> nics = {{"mlx5_0", NicType::kInfiniBand, 200000000000ull, 0, -1},
                           {"mlx5_1", NicType::kRoCE, 0, 1, -1},
                           {"eth0", NicType::kEthernet, 25000000000ull, 0, -1}};
  const std::vector<VerbsPort> ports = {
      {"mlx5_0", 1, 1, true, 100000000000ull, -1},  // sysfs's rate is kept
      {"mlx5_1", 1, 1, false, 100000000000ull, 3},  // rate filled in, GID index added
      {"mlx5_2", 1, 2, false, 50000000000ull, 1},   // not in sysfs: added, as a port
      {"mlx5_2", 2, 2, true, 0, -1}};
  std::vector<std::string> notes;
  MergeVerbsPorts(ports, &nics, &notes);
  ASSERT_EQ(nics.size(), 5u);
  EXPECT_EQ(nics[0], (Nic{"mlx5_0", NicType::kInfiniBand, 200000000000ull, 0, -1}));
  EXPECT_EQ(nics[1], (Nic{"mlx5_1", NicType::kRoCE, 100000000000ull, 1, 3}));
  EXPECT_EQ(nics[2].name, "eth0");
  EXPECT_EQ(nics[3], (Nic{"mlx5_2:1", NicType::kRoCE, 50000000000ull, -1, 1}));
  EXPECT_EQ(nics[4], (Nic{"mlx5_2:2", NicType::kInfiniBand, 0, -1, -1}));
  EXPECT_EQ(notes.size(), 2u);
}

// No RDMA device here: verbs lists nothing, and discovery equals its sysfs part.
TEST(VerbsPorts, NoDeviceChangesNothing) {
  std::vector<std::string> notes;
  const auto ports = QueryVerbsPorts(&notes);
  if (!ports.empty()) GTEST_SKIP() << "this machine has RDMA devices";
  auto d = Discover();
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::vector<std::string> sysfs_notes;
  const auto sysfs = DiscoverNics(DiscoverOptions{}, &sysfs_notes);
  const auto& found = d->topology.nodes[0].nics;
  ASSERT_EQ(found.size(), sysfs.size());
  for (size_t i = 0; i < found.size(); ++i) {  // (hwloc may add a NUMA node sysfs lacked)
    EXPECT_EQ(found[i].name, sysfs[i].name);
    EXPECT_EQ(found[i].type, sysfs[i].type);
    EXPECT_EQ(found[i].speed_bps, sysfs[i].speed_bps);
    EXPECT_EQ(found[i].gid_index, -1);
  }
}

TEST(VerbsPorts, GidIndexInTheTopologyFormat) {
  const std::string text =
      "braid-topology 1\ncluster c\nnode a\n  nic mlx5_0 type=roce speed=100g gid=3\n"
      "  nic mlx5_1 type=ib\n";
  auto t = ParseTopology(text, "test");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nodes[0].nics[0].gid_index, 3);
  EXPECT_EQ(t->nodes[0].nics[1].gid_index, -1);
  auto back = ParseTopology(DumpTopology(*t), "dump");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *t);
  auto ib_gid = ParseTopology("braid-topology 1\ncluster c\nnode a\n  nic x type=ib gid=1\n", "t");
  ASSERT_FALSE(ib_gid.ok());
  EXPECT_NE(ib_gid.status().message().find("gid= is the RoCE v2 GID index of a roce NIC"),
            std::string::npos)
      << ib_gid.status().message();
  EXPECT_FALSE(
      ParseTopology("braid-topology 1\ncluster c\nnode a\n  nic x type=roce gid=-1\n", "t").ok());
}

}  // namespace
}  // namespace braid::topo
