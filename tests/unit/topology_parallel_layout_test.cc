// The Holmes layout (topology/parallel_layout.h) on the shipped topologies: tensor-parallel groups
// inside a node, each stage's data-parallel groups on one fabric, pipeline edges crossing fabrics
// only where the topology forces it; degrees the topology cannot honour are refused with the rule
// they break. And Holmes' layer split in proportion to stage speed.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "topology/groups.h"
#include "topology/parallel_layout.h"
#include "topology/topology_file.h"

namespace braid::topo {
namespace {

Topology Load(const std::string& name) {
  auto t = LoadTopologyFile(std::string(BRAID_TOPOLOGIES_DIR) + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : Topology{};
}

// Checks the invariants of any Holmes layout: every slot used once, tensor groups within a node,
// each stage's replicas on the stage's fabric.
void CheckInvariants(const Topology& t, const ParallelLayout& l) {
  const auto slots = Slots(t);
  const auto& d = l.degrees;
  std::set<int> used;
  for (int s : l.slot_of) {
    ASSERT_GE(s, 0);
    EXPECT_TRUE(used.insert(s).second) << "slot " << s << " used twice";
  }
  EXPECT_EQ(used.size(), slots.size());
  for (int p = 0; p < d.pp; ++p)
    for (int r = 0; r < d.dp; ++r) {
      const int node = slots[static_cast<size_t>(l.slot(p, r, 0))].node;
      for (int x = 0; x < d.tp; ++x) {
        const Node& nd =
            t.nodes[static_cast<size_t>(slots[static_cast<size_t>(l.slot(p, r, x))].node)];
        EXPECT_EQ(slots[static_cast<size_t>(l.slot(p, r, x))].node, node)
            << "tensor group leaves its node";
        auto pref = PreferredRdma(nd);
        EXPECT_EQ(pref ? *pref : NicType::kEthernet, l.stage_fabric[static_cast<size_t>(p)])
            << "stage " << p << " replica " << r << " is off its fabric";
      }
    }
}

TEST(HolmesLayout, MixedClusterKeepsDataParallelGroupsOnOneFabric) {
  const Topology t = Load("mixed-ib-roce.topo");  // 4 nodes x 2 GPUs: ib0 ib1 | roce0 roce1
  for (ParallelDegrees d : {ParallelDegrees{2, 2, 2}, ParallelDegrees{1, 2, 4},
                            ParallelDegrees{1, 4, 2}, ParallelDegrees{2, 4, 1}}) {
    auto l = HolmesLayout(t, d);
    ASSERT_TRUE(l.ok()) << l.status().message();
    CheckInvariants(t, *l);
    EXPECT_EQ(l->cross_fabric_edges, 1) << l->explain;  // IB stages, then RoCE stages
    EXPECT_EQ(l->stage_fabric.front(), NicType::kInfiniBand);
    EXPECT_EQ(l->stage_fabric.back(), NicType::kRoCE);
  }
  auto l = HolmesLayout(t, {2, 2, 2});
  ASSERT_TRUE(l.ok());
  // Stage 0 = the IB nodes (slots 0-3), stage 1 = the RoCE nodes (slots 4-7).
  EXPECT_EQ(l->slot(0, 0, 0), 0);
  EXPECT_EQ(l->slot(0, 1, 1), 3);
  EXPECT_EQ(l->slot(1, 0, 0), 4);
  EXPECT_NE(l->explain.find("1 stage on ib, 1 stage on roce"), std::string::npos) << l->explain;
}

TEST(HolmesLayout, RefusesWhatTheTopologyCannotHonour) {
  const Topology t = Load("mixed-ib-roce.topo");
  auto too_wide = HolmesLayout(t, {1, 1, 8});  // one DP group over both fabrics
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(too_wide.status().message().find("inside one fabric"), std::string::npos)
      << too_wide.status().message();
  auto tp4 = HolmesLayout(t, {4, 2, 1});  // nodes have 2 GPUs
  ASSERT_FALSE(tp4.ok());
  EXPECT_NE(tp4.status().message().find("must stay inside its node"), std::string::npos);
  auto count = HolmesLayout(t, {2, 2, 1});
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("8 slots"), std::string::npos);
  EXPECT_FALSE(HolmesLayout(t, {0, 8, 1}).ok());
}

TEST(HolmesLayout, OneNodeAndOneFabric) {
  const Topology dgx = Load("dgx-a100.topo");  // 8 GPUs, IB
  auto l = HolmesLayout(dgx, {8, 1, 1});
  ASSERT_TRUE(l.ok()) << l.status().message();
  CheckInvariants(dgx, *l);
  EXPECT_EQ(l->cross_fabric_edges, 0);
  auto l2 = HolmesLayout(dgx, {2, 2, 2});
  ASSERT_TRUE(l2.ok()) << l2.status().message();
  CheckInvariants(dgx, *l2);
}

TEST(HolmesLayout, LayersFollowStageSpeed) {
  EXPECT_EQ(*SplitLayers(32, {1, 1}), (std::vector<int>{16, 16}));
  EXPECT_EQ(*SplitLayers(32, {3, 1}), (std::vector<int>{24, 8}));
  EXPECT_EQ(*SplitLayers(10, {1, 2, 1}), (std::vector<int>{3, 4, 3}));
  EXPECT_EQ(*SplitLayers(4, {100, 1, 1, 1}), (std::vector<int>{1, 1, 1, 1}));  // one each first
  auto sum = SplitLayers(61, {1.3, 0.7, 2.9});
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ((*sum)[0] + (*sum)[1] + (*sum)[2], 61);
  EXPECT_FALSE(SplitLayers(2, {1, 1, 1}).ok());
  EXPECT_FALSE(SplitLayers(8, {}).ok());
  EXPECT_FALSE(SplitLayers(8, {1, 0}).ok());
  EXPECT_FALSE(SplitLayers(8, {1, std::nan("")}).ok());
}

}  // namespace
}  // namespace braid::topo
