// The 3-level variants of H-Ring and HO-Ring (hring3, ho_ring3: device group < node < cluster,
// the Frontier shape of GCD pairs in a node): the verifier on every g x p x d with g in 1..4 and
// p, d in 2..4 (contiguous and interleaved device groups, in and out of place, odd counts,
// channels, small chunks, pre-multiplied sums and AVG), the layouts they refuse, broken
// schedules the verifier rejects, the device-group link class in the simulator, the closed forms
// against the simulation, and the tuner choosing them on a Frontier-like model.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"
#include "algorithms/verifier.h"
#include "hierarchical_cases.h"

namespace braid {
namespace {

using namespace hierarchical_test;

// g nodes of p device groups of d ranks, nodes contiguous. `interleaved_groups`: local rank j
// sits in device group j % p (the groups take turns), else j / d.
GroupLayout Grid3(int g, int p, int d, bool interleaved_groups = false) {
  GroupLayout l;
  l.nnodes = g;
  const int m = p * d;
  for (int r = 0; r < g * m; ++r) {
    const int j = r % m;
    l.node_of.push_back(r / m);
    l.local_rank.push_back(j);
    l.dgroup_of.push_back(interleaved_groups ? j % p : j / d);
  }
  return l;
}

const Case kCases[] = {
    {"hring3", CollKind::kAllGather},       {"hring3", CollKind::kReduceScatter},
    {"hring3", CollKind::kAllReduce},       {"ho_ring3", CollKind::kAllGather},
    {"ho_ring3", CollKind::kReduceScatter}, {"ho_ring3", CollKind::kAllReduce},
    {"torus2d3", CollKind::kAllReduce},
};

class ThreeLevelVerify : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    algo_ = FindAlgorithm(GetParam().algo);
    ASSERT_NE(algo_, nullptr);
  }

  CollArgs Args(const GroupLayout& layout, uint64_t count, bool in_place, int nch,
                uint64_t chunk) const {
    CollArgs a;
    a.kind = GetParam().kind;
    a.count = count;
    a.nranks = static_cast<int>(layout.node_of.size());
    a.in_place = in_place;
    a.nchannels = nch;
    a.chunk_bytes = chunk;
    a.layout = &layout;
    return a;
  }

  void Check(const CollArgs& a) {
    ASSERT_TRUE(algo_->supports(a)) << "g x p x d layouts are served";
    const Status st = VerifySchedule(*algo_, a);
    ASSERT_TRUE(st.ok()) << a.nranks << " ranks, count " << a.count << ": " << st.message();
  }

  const Algorithm* algo_ = nullptr;
};

TEST_P(ThreeLevelVerify, EveryShapeUpTo4x4x4) {
  int rot = 0;
  for (int g = 1; g <= 4; ++g)
    for (int p = 2; p <= 4; ++p)
      for (int d = 2; d <= 4; ++d) {
        const int n = g * p * d;
        for (bool interleaved : {false, true}) {
          const GroupLayout layout = Grid3(g, p, d, interleaved);
          for (uint64_t count :
               {uint64_t{0}, uint64_t{1}, uint64_t{13}, static_cast<uint64_t>(3 * n + 2)}) {
            ++rot;
            Check(Args(layout, count, rot % 2, 2 + (rot / 2) % 3,
                       (rot / 3) % 2 ? kSmallChunk : kDefaultChunk));
            if (HasFatalFailure()) return;
          }
        }
      }
}

// Many chunks per round (HO-Ring's edges per chunk) and several channel pairs.
TEST_P(ThreeLevelVerify, ChunkedRoundsAndSeveralChannels) {
  for (auto [g, p, d] : {std::tuple{2, 2, 2}, {3, 2, 2}, {2, 2, 3}, {2, 3, 2}})
    for (bool in_place : {false, true})
      for (int nch : {2, 4}) {
        const GroupLayout layout = Grid3(g, p, d);
        Check(Args(layout, 1001, in_place, nch, 64));
        if (HasFatalFailure()) return;
      }
}

// Pre-multiplied sum and AVG, lowered around the schedule.
class ThreeLevelReductionVerify : public ThreeLevelVerify {};

TEST_P(ThreeLevelReductionVerify, PreMultipliedSumAndAvg) {
  for (auto [g, p, d] : {std::tuple{1, 2, 2}, {2, 2, 2}, {2, 3, 2}, {3, 2, 3}})
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{29}})
      for (int variant = 0; variant < 2; ++variant) {
        const GroupLayout layout = Grid3(g, p, d);
        CollArgs a = Args(layout, count, variant == 1, 2, kSmallChunk);
        (variant == 0 ? a.premul : a.avg) = true;
        const Status st = VerifySchedule(*algo_, a);
        ASSERT_TRUE(st.ok()) << st.message();
      }
}

const Case kReductionCases[] = {
    {"hring3", CollKind::kReduceScatter},   {"hring3", CollKind::kAllReduce},
    {"ho_ring3", CollKind::kReduceScatter}, {"ho_ring3", CollKind::kAllReduce},
    {"torus2d3", CollKind::kAllReduce},
};
INSTANTIATE_TEST_SUITE_P(ThreeLevel, ThreeLevelReductionVerify,
                         ::testing::ValuesIn(kReductionCases), CaseName);

// What the 3-level variants do not serve (the tuner then takes a 2-level or flat algorithm):
// no device groups, groups of one rank or one group per node, uneven groups, nodes whose local
// ranks sit in different groups.
TEST_P(ThreeLevelVerify, LayoutsWithoutAThirdLevelAreRefused) {
  std::vector<GroupLayout> refused;
  GroupLayout none = Grid3(2, 2, 2);
  none.dgroup_of.clear();
  refused.push_back(none);
  refused.push_back(Grid3(2, 1, 4));  // one group per node
  refused.push_back(Grid3(2, 4, 1));  // every rank a group of its own
  GroupLayout uneven = Grid3(2, 2, 2);
  uneven.dgroup_of = {0, 0, 0, 1, 0, 0, 0, 1};  // groups of 3 and 1
  refused.push_back(uneven);
  GroupLayout unlike = Grid3(2, 2, 2);
  unlike.dgroup_of = {0, 0, 1, 1, 0, 1, 0, 1};  // node 1 pairs (0, 2) and (1, 3)
  refused.push_back(unlike);
  GroupLayout bad_index = Grid3(2, 2, 2);
  bad_index.dgroup_of[3] = -1;
  refused.push_back(bad_index);
  GroupLayout short_groups = Grid3(2, 2, 2);
  short_groups.dgroup_of.pop_back();
  refused.push_back(short_groups);
  for (const GroupLayout& l : refused) {
    const CollArgs a = Args(l, 10, false, 2, kDefaultChunk);
    EXPECT_FALSE(algo_->supports(a));
    EXPECT_FALSE(algo_->build(a, 0).ok());
    // The 2-level variant serves every one of them that is a grid of nodes.
    const std::string three = GetParam().algo;
    const std::string two = three.substr(0, three.size() - 1);
    EXPECT_TRUE(FindAlgorithm(two)->supports(a)) << two;
  }
}

INSTANTIATE_TEST_SUITE_P(ThreeLevel, ThreeLevelVerify, ::testing::ValuesIn(kCases), CaseName);

// ho_ring3 keeps HO-Ring's edges: without them its intra rounds read blocks the inter ring has
// not delivered (all-gather) or the inter ring forwards sums not yet made (reduce-scatter).
TEST(ThreeLevelMutations, MissingEdgesAreRaces) {
  const GroupLayout layout = Grid3(2, 2, 2);
  const Algorithm& ho = *FindAlgorithm("ho_ring3");
  for (CollKind kind : {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce}) {
    const CollArgs a = HoArgs(kind, layout, 11);
    ASSERT_TRUE(VerifySchedule(ho, a).ok());
    const int lane = kind == CollKind::kReduceScatter ? 0 : 1;
    const Status st =
        VerifyLoweredSchedules(a, "mutated", Mutated(ho, a, [lane](int r, RankSchedule& s) {
                                 if (r != 5) return;
                                 for (auto& st : s.channels[lane].steps) st.deps.clear();
                               }));
    ASSERT_FALSE(st.ok()) << CollKindName(kind) << ": verifier accepted a broken schedule";
    EXPECT_NE(st.message().find("race"), std::string::npos) << st.message();
  }
}

// The device-group level's ring must pair the ranks of one group: a rank that sends its
// device-group step to the wrong peer breaks the matching or the data.
TEST(ThreeLevelMutations, DeviceGroupStepToTheWrongPeerIsRejected) {
  const GroupLayout layout = Grid3(1, 2, 2);
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.count = 3;
  a.nranks = 4;
  a.nchannels = 1;
  a.layout = &layout;
  const Algorithm& h = *FindAlgorithm("hring3");
  ASSERT_TRUE(VerifySchedule(h, a).ok());
  // Rank 0 = (pp 0, dd 0): step 0 crosses to group 1 (rank 2), step 1 stays in its group (rank 1).
  const Status st = VerifyLoweredSchedules(a, "mutated", Mutated(h, a, [](int r, RankSchedule& s) {
                                             if (r != 0) return;
                                             auto& step = s.channels[0].steps.back();
                                             for (auto& op : step.ops)
                                               if (op.kind == StepOpKind::kSend) op.peer = 3;
                                           }));
  EXPECT_FALSE(st.ok());
}

// ------------------------------------------------------------------ cost model and simulator

// Frontier's links (topologies/frontier.topo): 200 GB/s between the GCDs of an MI250X, 50 GB/s
// to the node's other GCDs, 4 Slingshot NICs of 25 GB/s per node.
LinkModel Frontier() {
  LinkModel m;
  m.group = LinkParams{1e-6, 200e9};
  m.intra = {2e-6, 50e9};
  m.inter = {2e-6, 100e9};
  m.nics_per_node = 4;
  return m;
}

TEST(ThreeLevelLinks, DeviceGroupIsItsOwnClass) {
  const GroupLayout l = Grid3(2, 2, 2);
  EXPECT_EQ(LinkClassBetween(&l, 0, 1), LinkClass::kDeviceGroup);
  EXPECT_EQ(LinkClassBetween(&l, 0, 2), LinkClass::kIntraNode);
  EXPECT_EQ(LinkClassBetween(&l, 0, 4), LinkClass::kInterNode);
  GroupLayout none = l;
  none.dgroup_of.clear();
  EXPECT_EQ(LinkClassBetween(&none, 0, 1), LinkClass::kIntraNode);
  // One node with device groups still has the level.
  const GroupLayout one = Grid3(1, 2, 2);
  EXPECT_EQ(LinkClassBetween(&one, 2, 3), LinkClass::kDeviceGroup);
  EXPECT_EQ(LinkClassBetween(&one, 1, 2), LinkClass::kIntraNode);
  // Unset, the device-group link is the node's.
  LinkModel m;
  EXPECT_EQ(m.of(LinkClass::kDeviceGroup), m.intra);
  m.group = LinkParams{1e-6, 1e11};
  EXPECT_EQ(m.of(LinkClass::kDeviceGroup).beta_bytes_s, 1e11);
}

TEST(ThreeLevelSimulator, ClosedFormsAgree) {
  const LinkModel m = Frontier();
  struct C {
    const char* algo;
    CollKind kind;
    int g, p, d;
    uint64_t count;
  };
  const C cases[] = {
      {"hring3", CollKind::kAllGather, 2, 4, 2, 1 << 18},
      {"hring3", CollKind::kReduceScatter, 4, 2, 2, 1 << 18},
      {"hring3", CollKind::kAllReduce, 2, 2, 3, 12 << 18},
      {"ho_ring3", CollKind::kAllGather, 2, 4, 2, 1 << 18},
      {"ho_ring3", CollKind::kReduceScatter, 4, 4, 2, 1 << 18},
      {"ho_ring3", CollKind::kAllReduce, 2, 2, 2, 8 << 18},
      {"hring3", CollKind::kAllGather, 1, 4, 2, 1 << 18},
      {"torus2d3", CollKind::kAllReduce, 2, 4, 2, 16 << 18},
      {"torus2d3", CollKind::kAllReduce, 3, 2, 3, 18 << 18},
  };
  for (const C& c : cases) {
    const GroupLayout layout = Grid3(c.g, c.p, c.d);
    CollArgs a;
    a.kind = c.kind;
    a.count = c.count;
    a.nranks = c.g * c.p * c.d;
    a.nchannels = std::string(c.algo) == "ho_ring3" ? 2 : 1;
    a.layout = &layout;
    const double est = FindAlgorithm(c.algo)->estimate_seconds(a, m);
    EXPECT_NEAR(Simulate(c.algo, a, m), est, 0.1 * est)
        << c.algo << " " << CollKindName(c.kind) << " " << c.g << "x" << c.p << "x" << c.d;
  }
}

// On Frontier's links the third level pays: the node link (50 GB/s) carries p-1 = 3 of the intra
// phase's steps instead of M-1 = 7, the rest moves at 200 GB/s. So on 4 nodes x 8 GCDs,
// 64 MiB per rank: hring3 < hring and ho_ring3 < ho_ring, for all three collectives; and the
// tuner picks a 3-level variant.
TEST(ThreeLevelSimulator, BeatsTwoLevelsOnFrontierLinks) {
  const LinkModel m = Frontier();
  const GroupLayout layout = Grid3(4, 4, 2);
  auto tuner = Tuner::Create("", 32, m, &layout);
  ASSERT_TRUE(tuner.ok());
  for (CollKind kind : {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce}) {
    CollArgs a;
    a.kind = kind;
    a.count = kind == CollKind::kAllReduce ? uint64_t{32} << 22 : uint64_t{1} << 22;
    a.nranks = 32;
    a.nchannels = 2;
    a.layout = &layout;
    const double h2 = Simulate("hring", a, m), h3 = Simulate("hring3", a, m);
    const double o2 = Simulate("ho_ring", a, m), o3 = Simulate("ho_ring3", a, m);
    EXPECT_LT(h3, 0.8 * h2) << CollKindName(kind);
    EXPECT_LT(o3, 0.8 * o2) << CollKindName(kind);
    if (kind == CollKind::kAllReduce) {
      EXPECT_LT(Simulate("torus2d3", a, m), 0.8 * Simulate("torus2d", a, m));
    }
    const std::string pick = tuner->choose(a)->name();
    EXPECT_TRUE(pick == "ho_ring3" || pick == "hring3") << CollKindName(kind) << ": " << pick;
  }
}

TEST(ThreeLevelTuner, OverrideNamesThemAndFallsBack) {
  auto rules = ParseTunerOverride("allgather:hring3;reducescatter:ho_ring3");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  // Forced on a layout without device groups: not served, the model's pick instead.
  GroupLayout flat = Grid3(2, 2, 2);
  flat.dgroup_of.clear();
  auto tuner = Tuner::Create("allgather:hring3", 8, LinkModel{}, &flat);
  ASSERT_TRUE(tuner.ok());
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.count = 1 << 20;
  a.nranks = 8;
  a.nchannels = 2;
  a.layout = &flat;
  EXPECT_STRNE(tuner->choose(a)->name(), "hring3");
  const GroupLayout three = Grid3(2, 2, 2);
  auto tuner3 = Tuner::Create("allgather:hring3", 8, LinkModel{}, &three);
  ASSERT_TRUE(tuner3.ok());
  a.layout = &three;
  EXPECT_STREQ(tuner3->choose(a)->name(), "hring3");
}

}  // namespace
}  // namespace braid
