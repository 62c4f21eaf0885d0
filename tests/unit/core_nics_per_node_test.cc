// NicsPerNode (core/runtime/placement.h): the NICs the cost model gives a node, from the
// interfaces its ranks report at init (RankInfo::nic).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/runtime/placement.h"

namespace braid {
namespace {

// `nodes` nodes of `m` ranks each (node-major), rank r on interface nics[r].
struct Job {
  GroupLayout layout;
  std::vector<RankInfo> ranks;
  Job(int nodes, int m, const std::vector<std::string>& nics) {
    layout.nnodes = nodes;
    for (int r = 0; r < nodes * m; ++r) {
      layout.node_of.push_back(r / m);
      layout.local_rank.push_back(r % m);
      RankInfo info;
      info.rank = r;
      info.nic = nics[static_cast<size_t>(r)];
      ranks.push_back(info);
    }
  }
};

TEST(NicsPerNode, DistinctInterfacesAmongANodesRanks) {
  // braidrun --emulate 2x2 --nics 2: local rank l on eth(l mod 2).
  Job two(2, 2, {"eth0", "eth1", "eth0", "eth1"});
  EXPECT_EQ(NicsPerNode(two.layout, two.ranks), 2);
  // 2 x 4 with 2 NICs: two ranks a NIC.
  Job pairs(2, 4, {"eth0", "eth1", "eth0", "eth1", "eth0", "eth1", "eth0", "eth1"});
  EXPECT_EQ(NicsPerNode(pairs.layout, pairs.ranks), 2);
  // One interface for all (the usual cluster, or automatic selection): one NIC.
  Job one(2, 2, {"eth0", "eth0", "eth0", "eth0"});
  EXPECT_EQ(NicsPerNode(one.layout, one.ranks), 1);
}

TEST(NicsPerNode, TheNodeWithFewestCounts) {
  // A node whose ranks share one interface limits every ring through it.
  Job uneven(2, 2, {"eth0", "eth1", "eth0", "eth0"});
  EXPECT_EQ(NicsPerNode(uneven.layout, uneven.ranks), 1);
  Job four(2, 4, {"ib0", "ib1", "ib2", "ib3", "ib0", "ib1", "ib2", "ib2"});
  EXPECT_EQ(NicsPerNode(four.layout, four.ranks), 3);
}

TEST(NicsPerNode, UnknownInterfaceOrMismatchedLayoutIsOne) {
  Job unknown(2, 2, {"eth0", "", "eth0", "eth1"});
  EXPECT_EQ(NicsPerNode(unknown.layout, unknown.ranks), 1);
  Job two(2, 2, {"eth0", "eth1", "eth0", "eth1"});
  two.ranks.pop_back();
  EXPECT_EQ(NicsPerNode(two.layout, two.ranks), 1);
  EXPECT_EQ(NicsPerNode(GroupLayout{}, {}), 1);
}

}  // namespace
}  // namespace braid
