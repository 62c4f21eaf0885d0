// The event simulator against the alpha-beta closed forms of spec/algorithms.md, and the
// built-in algorithms' closed-form estimates (what the tuner uses) against the simulator.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/simulator.h"
#include "algorithms/tuner.h"

namespace braid {
namespace {

constexpr double kTolerance = 0.03;  // relative

CollArgs Args(CollKind kind, int n, uint64_t count, uint64_t chunk_bytes = uint64_t{1} << 40) {
  CollArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  a.nranks = n;
  a.count = count;
  a.chunk_bytes = chunk_bytes;
  return a;
}

double Simulate(const char* algo, const CollArgs& a, const LinkModel& m) {
  auto t = SimulateSeconds(*FindAlgorithm(algo), a, m);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : -1;
}

#define EXPECT_CLOSE(actual, expected)                                                    \
  EXPECT_NEAR(actual, expected, kTolerance*(expected)) << "actual " << (actual) << " s, " \
                                                       << "closed form " << (expected) << " s"

TEST(Simulator, RingAllGatherMatchesClosedForm) {
  const LinkModel m;
  for (int n : {2, 3, 8, 16}) {
    const uint64_t count = 1 << 20;  // s = 4 MiB per rank
    const double s = 4.0 * count;
    const double expected = (n - 1) * (m.intra.alpha_s + s / m.intra.beta_bytes_s);
    EXPECT_CLOSE(Simulate("ring", Args(CollKind::kAllGather, n, count), m), expected) << "N=" << n;
  }
}

TEST(Simulator, RingAllReduceMatchesClosedForm) {
  const LinkModel m;
  for (int n : {2, 4, 8, 12}) {
    const uint64_t count = 3 << 20;  // divisible by every n above
    const double shard = 4.0 * count / n;
    const double expected = 2 * (n - 1) * (m.intra.alpha_s + shard / m.intra.beta_bytes_s);
    EXPECT_CLOSE(Simulate("ring", Args(CollKind::kAllReduce, n, count), m), expected) << "N=" << n;
  }
}

TEST(Simulator, ChunkingCostsOneAlphaPerMessage) {
  const LinkModel m;
  const int n = 8;
  const uint64_t count = 1 << 20;     // 4 MiB blocks
  const uint64_t chunk = 256 * 1024;  // 16 messages per block
  const double s = 4.0 * count;
  const double expected = (n - 1) * (16 * m.intra.alpha_s + s / m.intra.beta_bytes_s);
  EXPECT_CLOSE(Simulate("ring", Args(CollKind::kAllGather, n, count, chunk), m), expected);
}

TEST(Simulator, RingAcrossNodesRunsAtTheInterNodeLink) {
  // 2 nodes x 4 ranks: every ring step waits for the one inter-node hop.
  const LinkModel m;
  GroupLayout layout;
  layout.nnodes = 2;
  for (int r = 0; r < 8; ++r) {
    layout.node_of.push_back(r / 4);
    layout.local_rank.push_back(r % 4);
  }
  CollArgs a = Args(CollKind::kAllGather, 8, 1 << 18);
  a.layout = &layout;
  const double s = 4.0 * a.count;
  const double expected = 7 * (m.inter.alpha_s + s / m.inter.beta_bytes_s);
  EXPECT_CLOSE(Simulate("ring", a, m), expected);
}

TEST(Simulator, PipelinedChainBroadcast) {
  // ns slices through N-1 links: (ns + N - 2) slice times.
  const LinkModel m;
  const int n = 6;
  const uint64_t count = 1 << 20, chunk = 64 * 1024;
  const double ns = 4.0 * count / chunk;
  const double expected = (ns + n - 2) * (m.intra.alpha_s + chunk / m.intra.beta_bytes_s);
  EXPECT_CLOSE(Simulate("ring", Args(CollKind::kBroadcast, n, count, chunk), m), expected);
  CollArgs r = Args(CollKind::kReduce, n, count, chunk);
  r.root = 2;
  EXPECT_CLOSE(Simulate("ring", r, m), expected);
}

TEST(Simulator, LatencyAlgorithmsTakeLogSteps) {
  const LinkModel m;
  for (int n : {2, 4, 8, 32}) {
    const double steps = std::log2(n);
    const double msg = m.intra.alpha_s + 4096.0 / m.intra.beta_bytes_s;
    EXPECT_CLOSE(Simulate("rd", Args(CollKind::kAllReduce, n, 1024), m), steps * msg) << "N=" << n;
    EXPECT_CLOSE(Simulate("tree", Args(CollKind::kBroadcast, n, 1024), m), steps * msg)
        << "N=" << n;
    EXPECT_CLOSE(Simulate("tree", Args(CollKind::kReduce, n, 1024), m), steps * msg) << "N=" << n;
    EXPECT_CLOSE(Simulate("dissemination", Args(CollKind::kBarrier, n, 0), m),
                 steps * m.intra.alpha_s)
        << "N=" << n;
  }
}

TEST(Simulator, PortContentionSerialisesAllToAll) {
  // Each rank sends N-1 blocks through one port: (N-1) message times at least.
  const LinkModel m;
  const int n = 8;
  const uint64_t count = 1 << 16;
  const double expected = (n - 1) * (m.intra.alpha_s + 4.0 * count / m.intra.beta_bytes_s);
  EXPECT_CLOSE(Simulate("pairwise", Args(CollKind::kAllToAll, n, count), m), expected);
}

// The closed forms the tuner ranks with agree with the simulator where they claim to be exact.
TEST(Simulator, ClosedFormEstimatesAgree) {
  const LinkModel m;
  struct C {
    const char* algo;
    CollKind kind;
    int n;
    uint64_t count;
    uint64_t chunk;
  };
  const C cases[] = {
      {"ring", CollKind::kAllReduce, 8, 1 << 20, 512 * 1024},
      {"ring", CollKind::kAllGather, 5, 100000, 64 * 1024},
      {"ring", CollKind::kReduceScatter, 7, 100000, 1 << 20},
      {"ring", CollKind::kBroadcast, 9, 1 << 20, 128 * 1024},
      {"rd", CollKind::kAllReduce, 16, 256, 512 * 1024},
      {"rd", CollKind::kAllReduce, 6, 256, 512 * 1024},
      {"bruck", CollKind::kAllGather, 8, 1000, 512 * 1024},
      {"bruck", CollKind::kAllGather, 11, 1000, 512 * 1024},
      {"pairwise", CollKind::kAllToAll, 6, 5000, 512 * 1024},
      {"tree", CollKind::kBroadcast, 16, 100, 512 * 1024},
  };
  for (const C& c : cases) {
    const CollArgs a = Args(c.kind, c.n, c.count, c.chunk);
    const double est = FindAlgorithm(c.algo)->estimate_seconds(a, m);
    EXPECT_NEAR(Simulate(c.algo, a, m), est, 0.05 * est)
        << c.algo << " " << CollKindName(c.kind) << " N=" << c.n;
  }
}

TEST(Simulator, RefusesUnsupportedRequests) {
  auto t = SimulateSeconds(*FindAlgorithm("rd"), Args(CollKind::kAllGather, 4, 10), LinkModel{});
  EXPECT_FALSE(t.ok());
}

TEST(Simulator, HandlesLargeGroups) {
  auto t = SimulateSeconds(*FindAlgorithm("ring"), Args(CollKind::kAllReduce, 128, 1 << 16),
                           LinkModel{});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_GT(*t, 0);
}

}  // namespace
}  // namespace braid
