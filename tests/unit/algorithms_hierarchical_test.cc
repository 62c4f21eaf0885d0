// The hierarchical algorithms (H-Ring, HO-Ring, 2D torus, leader-based all-reduce): every
// collective each serves, proven by the symbolic verifier for every group shape g x M with
// g, M in 1..8 (contiguous and interleaved layouts), in and out of place, odd counts, several
// channels and chunk sizes, pre-multiplied sums and AVG; uneven groups refused by supports();
// HO-Ring schedules with a dependency edge removed rejected by the verifier; and the
// simulator's predictions on a two-level link model against the spec's closed forms.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/lowering.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"
#include "algorithms/verifier.h"
#include "hierarchical_cases.h"

namespace braid {
namespace {

using namespace hierarchical_test;

// g groups of m ranks. Contiguous: rank r is (r / m, r % m). Interleaved: the nodes take turns
// (rank r is (r % g, r / g)), as a launcher that places ranks round-robin does.
GroupLayout Grid(int g, int m, bool interleaved = false) {
  GroupLayout l;
  l.nnodes = g;
  for (int r = 0; r < g * m; ++r) {
    l.node_of.push_back(interleaved ? r % g : r / m);
    l.local_rank.push_back(interleaved ? r / g : r % m);
  }
  return l;
}

// Nodes of the given sizes, contiguous.
GroupLayout Uneven(const std::vector<int>& sizes) {
  GroupLayout l;
  l.nnodes = static_cast<int>(sizes.size());
  for (int i = 0; i < l.nnodes; ++i)
    for (int j = 0; j < sizes[i]; ++j) {
      l.node_of.push_back(i);
      l.local_rank.push_back(j);
    }
  return l;
}

const Case kCases[] = {
    {"hring", CollKind::kAllGather},       {"hring", CollKind::kReduceScatter},
    {"hring", CollKind::kAllReduce},       {"ho_ring", CollKind::kAllGather},
    {"ho_ring", CollKind::kReduceScatter}, {"ho_ring", CollKind::kAllReduce},
    {"torus2d", CollKind::kAllReduce},     {"hier_leader", CollKind::kAllReduce},
    {"hier_tree", CollKind::kBroadcast},   {"hier_tree", CollKind::kReduce},
};

class HierarchicalVerify : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    algo_ = FindAlgorithm(GetParam().algo);
    ASSERT_NE(algo_, nullptr);
  }

  CollArgs Args(const GroupLayout& layout, uint64_t count, bool in_place, int nch, DataType dt,
                uint64_t chunk) const {
    CollArgs a;
    a.kind = GetParam().kind;
    a.dtype = dt;
    a.count = count;
    a.nranks = static_cast<int>(layout.node_of.size());
    a.in_place = in_place;
    a.nchannels = nch;
    a.chunk_bytes = chunk;
    a.layout = &layout;
    return a;
  }

  // Verifies one configuration; also checks that no send exceeds a chunk, none is empty, and
  // the schedule stays within its channels.
  void Check(const CollArgs& a) {
    ASSERT_TRUE(algo_->supports(a))
        << "g x M layouts are always served (nchannels " << a.nchannels << ")";
    ++verified_;
    // Rooted collectives: the root on the first node, in the middle (another node and local
    // rank whenever the shape has them) and last, since the tree is built around it.
    const bool rooted = a.kind == CollKind::kBroadcast || a.kind == CollKind::kReduce;
    for (int root : {0, a.nranks / 2 + (a.nranks > 3 ? 1 : 0), a.nranks - 1}) {
      if (!rooted && root != 0) continue;
      CollArgs b = a;
      b.root = rooted ? root % a.nranks : a.root;
      const Status st = VerifySchedule(*algo_, b);
      ASSERT_TRUE(st.ok()) << "root " << b.root << ": " << st.message();
    }
    if (a.nranks > 16) return;  // the lint is cheap but not free; the smaller shapes suffice
    for (int r = 0; r < a.nranks; ++r) {
      auto s = BuildSchedule(*algo_, a, r);
      ASSERT_TRUE(s.ok()) << s.status().message();
      ASSERT_LE(static_cast<int>(s->channels.size()), a.nchannels);
      for (const Channel& ch : s->channels)
        for (const Step& step : ch.steps)
          for (const StepOp& op : step.ops) {
            if (op.kind != StepOpKind::kSend) continue;
            const uint64_t elsize = DataTypeSize(s->buffers[op.src.buffer].dtype);
            ASSERT_LE(op.src.count, std::max<uint64_t>(a.chunk_bytes / elsize, 1))
                << "rank " << r << " sends more than a chunk";
            ASSERT_GT(op.src.count, 0u) << "zero-count send on rank " << r;
          }
    }
  }

  int MinChannels() const { return std::string(GetParam().algo) == "ho_ring" ? 2 : 1; }

  const Algorithm* algo_ = nullptr;
  int verified_ = 0;
};

// Every g x M with g, M in 1..8. Counts: 0, 1, a prime that g*M rarely divides, and one that
// leaves every rank's block (all-reduce) uneven. Placement, channels, type and chunk size rotate
// over the shapes so that each meets every region of (g, M); the small shapes (N <= 12) get the
// full product.
TEST_P(HierarchicalVerify, EveryShapeUpTo8x8) {
  const int c0 = MinChannels();
  const int channel_choices[] = {c0, c0 + 1, 4};
  const DataType types[] = {DataType::kFloat32, DataType::kInt8, DataType::kFloat64};
  int rot = 0;
  for (int g = 1; g <= 8; ++g)
    for (int m = 1; m <= 8; ++m) {
      const GroupLayout layout = Grid(g, m);
      const uint64_t n = static_cast<uint64_t>(g * m);
      const uint64_t counts[] = {0, 1, 13, 3 * n + 2};
      for (uint64_t count : counts) {
        if (n <= 12) {
          for (bool in_place : {false, true})
            for (int nch : channel_choices)
              for (uint64_t chunk : {kDefaultChunk, kSmallChunk}) {
                Check(Args(layout, count, in_place, nch, DataType::kFloat32, chunk));
                if (HasFatalFailure()) return;
              }
          continue;
        }
        ++rot;
        Check(Args(layout, count, rot % 2, channel_choices[(rot / 2) % 3], types[(rot / 6) % 3],
                   (rot / 3) % 2 ? kSmallChunk : kDefaultChunk));
        if (HasFatalFailure()) return;
      }
    }
  EXPECT_GT(verified_, 0);
}

// Larger counts with many slices per round: HO-Ring cuts every round into several chunks, whose
// edges are what the verifier proves here.
TEST_P(HierarchicalVerify, ChunkedRoundsAndSeveralPairs) {
  for (auto [g, m] : {std::pair{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}, {3, 3}, {4, 4}})
    for (bool in_place : {false, true})
      for (int nch : {2, 4}) {
        const GroupLayout layout = Grid(g, m);
        Check(Args(layout, 1001, in_place, nch, DataType::kFloat32, 64));
        if (HasFatalFailure()) return;
      }
}

// Ranks of a node need not be consecutive: the grid indexes ranks through the layout.
TEST_P(HierarchicalVerify, InterleavedLayouts) {
  for (auto [g, m] : {std::pair{2, 2}, {2, 3}, {3, 2}, {4, 3}, {3, 5}})
    for (bool in_place : {false, true}) {
      const GroupLayout layout = Grid(g, m, /*interleaved=*/true);
      Check(Args(layout, 37, in_place, 2, DataType::kFloat32, kSmallChunk));
      if (HasFatalFailure()) return;
    }
}

// Uneven groups (or a layout that is not a grid) are refused, never built wrongly.
TEST_P(HierarchicalVerify, UnevenGroupsAreRefused) {
  for (const auto& sizes :
       {std::vector<int>{3, 2, 2}, {1, 3}, {2, 1}, {4, 4, 3}, {1, 2, 3, 4}, {5, 3}}) {
    const GroupLayout layout = Uneven(sizes);
    const CollArgs a = Args(layout, 10, false, 2, DataType::kFloat32, kDefaultChunk);
    EXPECT_FALSE(algo_->supports(a)) << layout.node_of.size() << " ranks";
    EXPECT_FALSE(algo_->build(a, 0).ok());
  }
  // Two ranks claiming one (node, local rank), and a layout of the wrong size.
  GroupLayout dup = Grid(2, 2);
  dup.local_rank[1] = 0;
  EXPECT_FALSE(algo_->supports(Args(dup, 10, false, 2, DataType::kFloat32, kDefaultChunk)));
  GroupLayout short_layout = Grid(2, 2);
  CollArgs a = Args(short_layout, 10, false, 2, DataType::kFloat32, kDefaultChunk);
  a.nranks = 5;
  EXPECT_FALSE(algo_->supports(a));
}

INSTANTIATE_TEST_SUITE_P(Hierarchical, HierarchicalVerify, ::testing::ValuesIn(kCases), CaseName);

// The reductions lowered with a pre-multiplied sum (a scale step every other channel's first step
// waits on) and with AVG (a divide after every channel's last step).
class HierarchicalReductionVerify : public HierarchicalVerify {};

TEST_P(HierarchicalReductionVerify, PreMultipliedSumAndAvg) {
  for (auto [g, m] : {std::pair{1, 3}, {3, 1}, {2, 2}, {2, 3}, {3, 4}})
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{29}})
      for (bool in_place : {false, true})
        for (int variant = 0; variant < 2; ++variant) {
          const GroupLayout layout = Grid(g, m);
          CollArgs a = Args(layout, count, in_place, 2, DataType::kFloat32, kSmallChunk);
          (variant == 0 ? a.premul : a.avg) = true;
          const Status st = VerifySchedule(*algo_, a);
          ASSERT_TRUE(st.ok()) << st.message();
        }
}

const Case kReductionCases[] = {
    {"hring", CollKind::kReduceScatter},   {"hring", CollKind::kAllReduce},
    {"ho_ring", CollKind::kReduceScatter}, {"ho_ring", CollKind::kAllReduce},
    {"torus2d", CollKind::kAllReduce},     {"hier_leader", CollKind::kAllReduce},
    {"hier_tree", CollKind::kReduce},
};
INSTANTIATE_TEST_SUITE_P(Hierarchical, HierarchicalReductionVerify,
                         ::testing::ValuesIn(kReductionCases), CaseName);

TEST(HierarchicalRegistry, NamesAndRequirements) {
  for (const char* name : {"hring", "ho_ring", "torus2d", "hier_leader", "hier_tree"}) {
    const Algorithm* a = FindAlgorithm(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_NE(std::find(HierarchicalAlgorithms().begin(), HierarchicalAlgorithms().end(), a),
              HierarchicalAlgorithms().end());
    // Kept out of the flat list (one-node communicators rank that one).
    EXPECT_EQ(std::find(AllAlgorithms().begin(), AllAlgorithms().end(), a), AllAlgorithms().end());
  }
  const GroupLayout layout = Grid(2, 2);
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.count = 8;
  a.nranks = 4;
  a.layout = &layout;
  a.nchannels = 1;
  // HO-Ring's two rings need two channels; H-Ring runs on one.
  EXPECT_FALSE(FindAlgorithm("ho_ring")->supports(a));
  EXPECT_TRUE(FindAlgorithm("hring")->supports(a));
  a.nchannels = 2;
  EXPECT_TRUE(FindAlgorithm("ho_ring")->supports(a));
  // Collectives they do not serve: only hier_tree roots a broadcast or reduce.
  for (CollKind k : {CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllToAll}) {
    a.kind = k;
    for (const Algorithm* algo : HierarchicalAlgorithms())
      EXPECT_EQ(algo->supports(a), k != CollKind::kAllToAll && algo == FindAlgorithm("hier_tree"))
          << algo->name() << " " << CollKindName(k);
  }
  a.kind = CollKind::kAllGather;
  EXPECT_FALSE(FindAlgorithm("torus2d")->supports(a));
  EXPECT_FALSE(FindAlgorithm("hier_leader")->supports(a));
  EXPECT_FALSE(FindAlgorithm("hier_tree")->supports(a));
}

// HO-Ring's intra and inter rings run on separate channels joined by edges (spec section 2):
// all-gather's intra round k waits for inter step k.
TEST(HoRingStructure, IntraRoundsWaitForInterSteps) {
  const GroupLayout layout = Grid(3, 2);
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.count = 4;
  a.nranks = 6;
  a.nchannels = 2;
  a.layout = &layout;
  auto s = BuildSchedule(*FindAlgorithm("ho_ring"), a, 0);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->channels.size(), 2u);
  const auto& inter = s->channels[0].steps;
  const auto& intra = s->channels[1].steps;
  ASSERT_EQ(inter.size(), 2u);  // g-1 steps, one chunk each
  ASSERT_EQ(intra.size(), 3u);  // g rounds of M-1 = 1 step
  EXPECT_TRUE(inter[0].deps.empty() && inter[1].deps.empty());
  EXPECT_TRUE(intra[0].deps.empty());  // round 0: the own group's blocks
  EXPECT_EQ(intra[1].deps, (std::vector<StepRef>{{0, 0}}));
  EXPECT_EQ(intra[2].deps, (std::vector<StepRef>{{0, 1}}));
}

// ------------------------------------------------------------------ broken HO-Ring schedules

void ExpectRejected(const CollArgs& args, const ScheduleSource& source,
                    std::vector<std::string> needles) {
  const Status st = VerifyLoweredSchedules(args, "mutated", source);
  ASSERT_FALSE(st.ok()) << "verifier accepted a broken schedule";
  for (const auto& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

// All-gather without the edge "intra round 1 waits for inter step 1": the intra ring may read the
// block before the inter ring has written it.
TEST(HoRingMutations, AllGatherMissingEdgeIsARace) {
  const GroupLayout layout = Grid(2, 3);
  const CollArgs a = HoArgs(CollKind::kAllGather, layout, 5);
  const Algorithm& ho = *FindAlgorithm("ho_ring");
  ASSERT_TRUE(VerifySchedule(ho, a).ok());
  ExpectRejected(a,
                 Mutated(ho, a,
                         [](int r, RankSchedule& s) {
                           if (r != 4) return;
                           for (auto& st : s.channels[1].steps) st.deps.clear();
                         }),
                 {"rank 4", "race"});
}

// Reduce-scatter without the edges "inter step t waits for intra round t": the inter ring
// forwards a group sum the intra ring has not finished.
TEST(HoRingMutations, ReduceScatterMissingEdgeIsARace) {
  const GroupLayout layout = Grid(3, 2);
  const CollArgs a = HoArgs(CollKind::kReduceScatter, layout, 7);
  const Algorithm& ho = *FindAlgorithm("ho_ring");
  ASSERT_TRUE(VerifySchedule(ho, a).ok());
  ExpectRejected(a,
                 Mutated(ho, a,
                         [](int r, RankSchedule& s) {
                           if (r != 1) return;
                           for (auto& st : s.channels[0].steps) st.deps.clear();
                         }),
                 {"rank 1", "race"});
}

// All-reduce whose all-gather does not wait for the reduce-scatter's last inter step: the intra
// ring would send this rank's block before it is reduced.
TEST(HoRingMutations, AllReduceAllGatherStartingEarlyIsARace) {
  const GroupLayout layout = Grid(2, 2);
  const CollArgs a = HoArgs(CollKind::kAllReduce, layout, 40);
  const Algorithm& ho = *FindAlgorithm("ho_ring");
  ASSERT_TRUE(VerifySchedule(ho, a).ok());
  ExpectRejected(a,
                 Mutated(ho, a,
                         [](int r, RankSchedule& s) {
                           if (r != 0) return;
                           // The intra channel's edges into the inter channel's reduce-scatter
                           // steps: every edge the all-gather rounds hold.
                           for (auto& st : s.channels[1].steps) st.deps.clear();
                         }),
                 {"rank 0", "race"});
}

// One edge pointing one inter step too early: round 2 may read block (i-2, j) while it arrives.
TEST(HoRingMutations, EdgeToTheWrongInterStep) {
  const GroupLayout layout = Grid(3, 2);
  CollArgs a = HoArgs(CollKind::kAllGather, layout, 4);
  a.chunk_bytes = 1 << 20;  // one chunk per round: intra step k+... is round k
  const Algorithm& ho = *FindAlgorithm("ho_ring");
  ASSERT_TRUE(VerifySchedule(ho, a).ok());
  ExpectRejected(a,
                 Mutated(ho, a,
                         [](int r, RankSchedule& s) {
                           if (r != 2) return;
                           ASSERT_EQ(s.channels[1].steps[2].deps, (std::vector<StepRef>{{0, 1}}));
                           s.channels[1].steps[2].deps = {{0, 0}};
                         }),
                 {"rank 2", "race"});
}

// hier_tree's reduce staggers a leader's folds: the inter child's slice t is folded one step
// after the intra child's. Folding both into the slice's partial in one step is a race (two
// concurrent writes of one slot), and a leader that skips its inter child loses a node's sum.
TEST(HierTreeMutations, TwoFoldsOfOneSliceInOneStepIsARace) {
  const GroupLayout layout = Grid(3, 2);
  CollArgs a = HoArgs(CollKind::kReduce, layout, 37);
  a.nchannels = 1;
  a.chunk_bytes = 16;
  const Algorithm& tree = *FindAlgorithm("hier_tree");
  ASSERT_TRUE(VerifySchedule(tree, a).ok());
  // Root 0 = (0, 0): intra child 1 = (0, 1), inter child 2 = (1, 0).
  ExpectRejected(a,
                 Mutated(tree, a,
                         [](int r, RankSchedule& s) {
                           if (r != 0) return;
                           auto& steps = s.channels[0].steps;
                           for (size_t u = 1; u < steps.size(); ++u) {
                             auto& ops = steps[u].ops;
                             for (size_t i = 0; i < ops.size();)
                               if (ops[i].peer == 2) {
                                 steps[u - 1].ops.push_back(ops[i]);
                                 ops.erase(ops.begin() + static_cast<long>(i));
                               } else {
                                 ++i;
                               }
                           }
                         }),
                 {"rank 0"});
  ExpectRejected(a,
                 Mutated(tree, a,
                         [](int r, RankSchedule& s) {
                           if (r != 2) return;  // leader of node 1 stops folding node 2's sums
                           for (auto& st : s.channels[0].steps)
                             for (auto& op : st.ops)
                               if (op.kind == StepOpKind::kRecvReduce && op.peer == 4)
                                 op.kind = StepOpKind::kRecv;
                         }),
                 {});
}

// ------------------------------------------------------------------ simulator

// An inter-node link 10x slower than the intra-node one (both with small latency).
LinkModel TenToOne() {
  LinkModel m;
  m.intra = {2e-6, 10e9};
  m.inter = {10e-6, 1e9};
  return m;
}

// A large all-gather (16 MiB per rank) on 2x4 and 4x4: HO-Ring beats H-Ring beats the flat ring,
// as spec section 2 argues: the flat ring pushes N-1 blocks through the slow link, H-Ring g-1
// then waits for the intra phase, HO-Ring hides the shorter of the two.
TEST(HierarchicalSimulator, AllGatherOrderingOnTwoLevels) {
  const LinkModel m = TenToOne();
  for (auto [g, M] : {std::pair{2, 4}, {4, 4}}) {
    const GroupLayout layout = Grid(g, M);
    CollArgs a;
    a.kind = CollKind::kAllGather;
    a.dtype = DataType::kFloat32;
    a.count = 4 << 20;
    a.nranks = g * M;
    a.nchannels = 2;
    a.layout = &layout;
    const double ring = Simulate("ring", a, m);
    const double hring = Simulate("hring", a, m);
    const double ho = Simulate("ho_ring", a, m);
    EXPECT_LT(ho, hring) << g << "x" << M;
    EXPECT_LT(hring, ring) << g << "x" << M;
    // The spec's formula, per message of a round's chunk: max(g(M-1)c x, (g-1)c y + (M-1) x)
    // with c chunks per block (x, y: one chunk over the intra and inter link). The node's M
    // ranks send their chunks through its one NIC (simulator.h), so y is M chunk transfers.
    const double s = 4.0 * a.count;
    const double c = 8;  // min(8, s / chunk_bytes): 16 MiB blocks, 512 KiB chunks
    const double msgs = s / c / a.chunk_bytes;  // 2 MiB chunks go as 4 messages
    const double x = msgs * m.intra.alpha_s + s / c / m.intra.beta_bytes_s;
    const double y = M * (msgs * m.inter.alpha_s + s / c / m.inter.beta_bytes_s);
    const double formula = std::max(g * (M - 1) * c * x, (g - 1) * c * y + (M - 1) * x);
    EXPECT_NEAR(ho, formula, 0.05 * formula) << g << "x" << M;
    EXPECT_NEAR(FindAlgorithm("ho_ring")->estimate_seconds(a, m), formula, 1e-9 * formula);
  }
}

// Unchunked (one chunk per round), the prediction is the spec's formula as written:
// max(g(M-1)(a1 + s/B1), (g-1)(a2 + s/B2) + (M-1)(a1 + s/B1)), whichever ring is the longer,
// with a2 and s/B2 those of the node's NIC shared by its M ranks (M transfers per inter step).
TEST(HierarchicalSimulator, HoRingMatchesTheSpecFormulaUnchunked) {
  // Per-rank share of the node link: inter-bound, then intra-bound (the NIC M times as fast).
  for (double per_rank_beta : {1e9, 8e9}) {
    for (auto [g, M] : {std::pair{2, 4}, {4, 4}, {3, 2}}) {
      LinkModel m = TenToOne();
      m.inter.beta_bytes_s = per_rank_beta * M;
      const GroupLayout layout = Grid(g, M);
      CollArgs a;
      a.kind = CollKind::kAllGather;
      a.dtype = DataType::kFloat32;
      a.count = 1 << 20;
      a.nranks = g * M;
      a.nchannels = 2;
      a.chunk_bytes = uint64_t{1} << 40;
      a.layout = &layout;
      const double s = 4.0 * a.count;
      const double x = m.intra.alpha_s + s / m.intra.beta_bytes_s;
      const double y = M * (m.inter.alpha_s + s / m.inter.beta_bytes_s);
      const double formula = std::max(g * (M - 1) * x, (g - 1) * y + (M - 1) * x);
      EXPECT_NEAR(Simulate("ho_ring", a, m), formula, 0.02 * formula)
          << g << "x" << M << " inter per rank " << per_rank_beta;
      a.kind = CollKind::kReduceScatter;
      EXPECT_NEAR(Simulate("ho_ring", a, m), formula, 0.02 * formula)
          << "reduce-scatter " << g << "x" << M << " inter per rank " << per_rank_beta;
    }
  }
}

// The closed forms the tuner ranks with agree with the simulator.
TEST(HierarchicalSimulator, ClosedFormEstimatesAgree) {
  const LinkModel m = TenToOne();
  struct C {
    const char* algo;
    CollKind kind;
    int g, M;
    uint64_t count;
  };
  const C cases[] = {
      {"hring", CollKind::kAllGather, 2, 4, 1 << 18},
      {"hring", CollKind::kReduceScatter, 4, 2, 1 << 18},
      {"hring", CollKind::kAllReduce, 3, 3, 9 << 18},
      {"ho_ring", CollKind::kAllGather, 2, 4, 1 << 18},
      {"ho_ring", CollKind::kReduceScatter, 4, 4, 1 << 18},
      {"ho_ring", CollKind::kAllReduce, 2, 4, 8 << 18},
      {"torus2d", CollKind::kAllReduce, 4, 2, 8 << 18},
      {"hier_leader", CollKind::kAllReduce, 2, 4, 1 << 20},
      {"hring", CollKind::kAllGather, 1, 4, 1 << 18},
      {"ho_ring", CollKind::kAllGather, 4, 1, 1 << 18},
      {"hier_tree", CollKind::kBroadcast, 2, 4, 1 << 20},
      {"hier_tree", CollKind::kReduce, 4, 2, 1 << 20},
      {"hier_tree", CollKind::kBroadcast, 8, 4, 1 << 18},
      {"hier_tree", CollKind::kReduce, 3, 3, 1 << 20},
  };
  for (const C& c : cases) {
    const GroupLayout layout = Grid(c.g, c.M);
    CollArgs a;
    a.kind = c.kind;
    a.dtype = DataType::kFloat32;
    a.count = c.count;
    a.nranks = c.g * c.M;
    // The closed forms describe one channel (one pair for HO-Ring); more channels split the
    // range and interleave their phases on the shared ports, which only helps.
    a.nchannels = std::string(c.algo) == "ho_ring" ? 2 : 1;
    a.layout = &layout;
    const double est = FindAlgorithm(c.algo)->estimate_seconds(a, m);
    EXPECT_NEAR(Simulate(c.algo, a, m), est, 0.1 * est)
        << c.algo << " " << CollKindName(c.kind) << " " << c.g << "x" << c.M;
  }
}

// The emulated cluster of docs/hierarchical.md (2 nodes x 2 ranks, one 1 Gbit/s link per node
// and direction, 64 MiB): with the node's NIC shared, the predictions meet the link
// bounds: all-gather and reduce-scatter need (g-1) M s = 32 MiB through each NIC (0.27 s),
// the flat ring 3 blocks of 16 MiB in a row (0.40 s). The per-rank-port model predicted 0.14 s
// for HO-Ring, half of what the link allows. Printed for the table in docs/hierarchical.md.
TEST(HierarchicalSimulator, EmulatedTwoByTwoMeetsTheNodeLinkBound) {
  LinkModel m;
  m.intra = {2e-6, 10e9};
  m.inter = {50e-6, 125e6};  // 1 Gbit/s per node link
  const GroupLayout layout = Grid(2, 2);
  const uint64_t total = uint64_t{64} << 20;
  const double block = total / 4.0;
  const double link_ag = 2 * block / m.inter.beta_bytes_s;  // 32 MiB through each NIC
  struct C {
    CollKind kind;
    const char* algo;
  };
  const C cases[] = {{CollKind::kAllGather, "ring"},       {CollKind::kAllGather, "hring"},
                     {CollKind::kAllGather, "ho_ring"},    {CollKind::kReduceScatter, "ring"},
                     {CollKind::kReduceScatter, "hring"},  {CollKind::kReduceScatter, "ho_ring"},
                     {CollKind::kAllReduce, "ring"},       {CollKind::kAllReduce, "hring"},
                     {CollKind::kAllReduce, "ho_ring"},    {CollKind::kAllReduce, "torus2d"},
                     {CollKind::kAllReduce, "hier_leader"}};
  for (const C& c : cases) {
    CollArgs a;
    a.kind = c.kind;
    a.dtype = DataType::kFloat32;
    a.nranks = 4;
    a.count = c.kind == CollKind::kAllReduce ? total / 4 : total / 16;
    a.nchannels = 2;
    a.layout = &layout;
    const double t = Simulate(c.algo, a, m);
    const double bound = c.kind == CollKind::kAllReduce ? 2 * link_ag : link_ag;
    std::printf(
        "2x2 1gbit 64MiB %-13s %-11s simulated %.3f s, estimate %.3f s, link bound %.3f s\n",
        CollKindName(c.kind), c.algo, t, FindAlgorithm(c.algo)->estimate_seconds(a, m), bound);
    // Nothing beats the node link.
    EXPECT_GE(t, bound * 0.999) << c.algo << " " << CollKindName(c.kind);
    if (std::string(c.algo) == "ring") {
      // 3 blocks (6 for all-reduce) in a row through the one inter-node hop of each node.
      const double ring = (c.kind == CollKind::kAllReduce ? 6 : 3) * block / m.inter.beta_bytes_s;
      EXPECT_NEAR(t, ring, 0.02 * ring) << CollKindName(c.kind);
    } else {
      // Every hierarchical schedule sends the minimum across nodes; HO-Ring hides its intra
      // rounds, the others add them (and the leader's chains) but stay within 10 % here.
      EXPECT_LE(t, 1.1 * bound) << c.algo << " " << CollKindName(c.kind);
    }
  }
}

// ------------------------------------------------------------------ tuner

// With several nodes in equal groups, the tuner's table ranks the hierarchical algorithms, and a
// large all-gather goes to HO-Ring; on one node, or with uneven nodes, the flat set only.
TEST(HierarchicalTuner, RanksHierarchicalAlgorithmsAcrossNodes) {
  const LinkModel m = TenToOne();
  const GroupLayout layout = Grid(2, 4);
  auto t = Tuner::Create("", 8, m, &layout);
  ASSERT_TRUE(t.ok()) << t.status().message();
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.dtype = DataType::kFloat32;
  a.count = 4 << 20;
  a.nranks = 8;
  a.nchannels = 2;
  a.layout = &layout;
  EXPECT_STREQ(t->choose(a)->name(), "ho_ring") << t->describe();
  a.kind = CollKind::kReduceScatter;
  EXPECT_STREQ(t->choose(a)->name(), "ho_ring") << t->describe();
  // One channel (the express lane, BRAID_NCHANNELS=1): HO-Ring cannot serve; the best other.
  a.nchannels = 1;
  EXPECT_STREQ(t->choose(a)->name(), "hring") << t->describe();

  const GroupLayout one = Grid(1, 8);
  auto flat = Tuner::Create("", 8, m, &one);
  ASSERT_TRUE(flat.ok());
  a.layout = &one;
  a.nchannels = 2;
  a.kind = CollKind::kAllGather;
  EXPECT_STREQ(flat->choose(a)->name(), "ring") << flat->describe();
  EXPECT_EQ(flat->describe().find("ho_ring"), std::string::npos) << flat->describe();

  const GroupLayout uneven = Uneven({4, 3});
  auto u = Tuner::Create("", 7, m, &uneven);
  ASSERT_TRUE(u.ok());
  a.layout = &uneven;
  a.nranks = 7;
  const Algorithm* chosen = u->choose(a);
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(std::find(HierarchicalAlgorithms().begin(), HierarchicalAlgorithms().end(), chosen),
            HierarchicalAlgorithms().end())
      << chosen->name();
}

// Broadcast and reduce across many nodes: the flat ring's chain has N-1 hops, (g-1) across nodes
// and g (M-1) inside them; hier_tree's deepest path has the same (g-1) inter hops but only M-1
// intra ones, since the node chains run side by side. The tuner ranks it (with the root
// anywhere) and picks it for a 1 MiB broadcast or reduce on 8 nodes x 4 ranks.
TEST(HierarchicalTuner, PicksTheTreeForRootedCollectivesAcrossNodes) {
  const LinkModel m = TenToOne();
  const GroupLayout layout = Grid(8, 4);
  auto t = Tuner::Create("", 32, m, &layout);
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (CollKind k : {CollKind::kBroadcast, CollKind::kReduce}) {
    CollArgs a;
    a.kind = k;
    a.dtype = DataType::kFloat32;
    a.count = 1 << 18;
    a.nranks = 32;
    a.nchannels = 2;
    a.layout = &layout;
    for (int root : {0, 13, 31}) {
      a.root = root;
      EXPECT_STREQ(t->choose(a)->name(), "hier_tree") << CollKindName(k) << "\n" << t->describe();
      EXPECT_LT(Simulate("hier_tree", a, m), Simulate("ring", a, m)) << CollKindName(k);
    }
  }
}

// On the emulated 2x2 cluster of docs/hierarchical.md the tuner's own pick for 64 MiB is
// HO-Ring for all three collectives, with the nominal link (1 Gbit/s) and with what link
// calibration once measured there (inter 12 us, 0.24 GB/s: a 512 KiB probe passed in the 4 ms tbf
// burst of the time; the 4 MiB probe and the 1 ms bucket now give 8.6 us, 0.12 GB/s), so the
// table's `tuner` rows run HO-Ring.
TEST(HierarchicalTuner, PicksHoRingOnTheEmulatedTwoByTwo) {
  LinkModel nominal;
  nominal.intra = {2e-6, 10e9};
  nominal.inter = {50e-6, 125e6};
  LinkModel calibrated;
  calibrated.intra = {1.7e-6, 8e9};
  calibrated.inter = {12e-6, 0.24e9};
  const GroupLayout layout = Grid(2, 2);
  for (const LinkModel& m : {nominal, calibrated}) {
    auto t = Tuner::Create("", 4, m, &layout);
    ASSERT_TRUE(t.ok()) << t.status().message();
    for (CollKind k : {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce}) {
      CollArgs a;
      a.kind = k;
      a.dtype = DataType::kFloat32;
      a.nranks = 4;
      a.count = k == CollKind::kAllReduce ? 16 << 20 : 4 << 20;  // 64 MiB in all
      a.nchannels = 2;
      a.layout = &layout;
      EXPECT_STREQ(t->choose(a)->name(), "ho_ring") << CollKindName(k) << "\n" << t->describe();
    }
  }
}

// The override grammar knows the names; a forced hierarchical algorithm that cannot serve a
// request (uneven groups, one channel, a collective it lacks) falls back to a flat one.
TEST(HierarchicalTuner, OverridesAndFallbacks) {
  const LinkModel m = TenToOne();
  ASSERT_TRUE(ParseTunerOverride("allgather:ho_ring;reducescatter:hring;allreduce:torus2d@0-1M,"
                                 "hier_leader@1M-inf")
                  .ok());
  // `leader`, issue 10's name, is hier_leader.
  EXPECT_EQ(FindAlgorithm("leader"), FindAlgorithm("hier_leader"));
  {
    const GroupLayout grid = Grid(2, 2);
    auto alias = Tuner::Create("allreduce:leader", 4, m, &grid);
    ASSERT_TRUE(alias.ok()) << alias.status().message();
    CollArgs a;
    a.kind = CollKind::kAllReduce;
    a.count = 1000;
    a.nranks = 4;
    a.layout = &grid;
    EXPECT_STREQ(alias->choose(a)->name(), "hier_leader");
    EXPECT_NE(alias->describe().find("leader"), std::string::npos);
  }
  const GroupLayout layout = Grid(2, 2);
  auto t = Tuner::Create("allreduce:hier_leader;allgather:ho_ring;broadcast:hring", 4, m, &layout);
  ASSERT_TRUE(t.ok()) << t.status().message();
  CollArgs a;
  a.kind = CollKind::kAllReduce;
  a.count = 1000;
  a.nranks = 4;
  a.nchannels = 2;
  a.layout = &layout;
  EXPECT_STREQ(t->choose(a)->name(), "hier_leader");
  a.kind = CollKind::kAllGather;
  EXPECT_STREQ(t->choose(a)->name(), "ho_ring");
  a.nchannels = 1;
  EXPECT_NE(std::string(t->choose(a)->name()), "ho_ring");
  a.kind = CollKind::kBroadcast;  // hring has no broadcast
  ASSERT_NE(t->choose(a), nullptr);
  EXPECT_NE(std::string(t->choose(a)->name()), "hring");

  const GroupLayout uneven = Uneven({2, 1});
  auto u = Tuner::Create("all:ho_ring", 3, m, &uneven);
  ASSERT_TRUE(u.ok());
  a.layout = &uneven;
  a.nranks = 3;
  a.nchannels = 2;
  for (CollKind k : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter}) {
    a.kind = k;
    const Algorithm* chosen = u->choose(a);
    ASSERT_NE(chosen, nullptr);
    EXPECT_TRUE(chosen->supports(a));
    EXPECT_NE(std::string(chosen->name()), "ho_ring");
  }
}

}  // namespace
}  // namespace braid
