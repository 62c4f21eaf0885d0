// The hierarchical algorithms over real processes and real transports: ranks are given emulated
// hosts (BRAID_HOSTID per rank) so the communicator's layout has g nodes of M ranks, each
// algorithm is forced with BRAID_ALGO, and every all-gather, reduce-scatter and all-reduce (and
// broadcast and reduce, hier_tree's, with roots on every node) is checked bit-exactly against the
// reference computed in the test (reference.h). Counts include ones above the express-lane limit,
// so that the schedules run on two channels and HO-Ring's cross-channel edges are executed by the
// engine. An uneven layout (2 + 1) forced to HO-Ring falls back to a flat algorithm and stays
// exact.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "core/runtime/comm.h"
#include "core/runtime/comm_registry.h"
#include "multirank/collective_cases.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

struct Shape {
  int g, m;
  bool interleaved;         // node of rank r: r % g (else r / m)
  std::vector<int> uneven;  // node sizes, when not a grid
  int nranks() const {
    if (uneven.empty()) return g * m;
    int n = 0;
    for (int s : uneven) n += s;
    return n;
  }
  int node(int r) const {
    if (!uneven.empty()) {
      for (int i = 0, end = 0;; ++i) {
        end += uneven[i];
        if (r < end) return i;
      }
    }
    return interleaved ? r % g : r / m;
  }
  std::string name() const {
    if (!uneven.empty()) {
      std::string s = "uneven";
      for (int x : uneven) {
        s += "_";  // appended piece by piece: "_" + ... trips GCC 12's -Wrestrict
        s += std::to_string(x);
      }
      return s;
    }
    return std::to_string(g) + "x" + std::to_string(m) + (interleaved ? "_interleaved" : "");
  }
};

// 40000 elements: above the 64 KiB express lane for every type below but int8, so these calls
// get BRAID_NCHANNELS (2) channels.
constexpr uint64_t kLargeCount = 40000;

// The collectives `algo` serves ("default": the three the tuner ranks hierarchical ones for).
std::vector<CollKind> KindsOf(const std::string& algo) {
  if (algo == "torus2d" || algo == "torus2d3" || algo == "hier_leader")
    return {CollKind::kAllReduce};
  if (algo == "hier_tree") return {CollKind::kBroadcast, CollKind::kReduce};
  if (algo == "hpat") return {CollKind::kReduceScatter, CollKind::kAllGather};
  if (algo == "default")
    return {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
            CollKind::kBroadcast, CollKind::kReduce};
  return {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather};
}

// Rooted collectives vary the root with the count (collective_cases.h: (count + 1) % N), so the
// counts below put it on either node and on local ranks 0 and 1.
std::vector<Case> Cases(const std::vector<CollKind>& kinds) {
  const DataType types[] = {DataType::kInt32, DataType::kFloat32, DataType::kBfloat16,
                            DataType::kFloat64};
  const int ops[] = {braidSum, braidMax, braidAvg, kPreMul};
  std::vector<Case> cases;
  for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1000}, kLargeCount})
    for (CollKind k : kinds) {
      for (DataType t : types)
        for (int op : (Reduces(k) ? std::vector<int>(std::begin(ops), std::end(ops))
                                  : std::vector<int>{braidSum}))
          for (bool in_place : {false, true}) cases.push_back({k, t, op, count, in_place});
    }
  return cases;
}

// Fails (returns 1) unless the communicator sees `shape`'s nodes and the tuner hands a large
// request of each collective the algorithm forces serves to `algo` itself (not a fallback).
int CheckForcedAlgorithm(braidComm_t handle, int rank, const Shape& shape,
                         const std::string& algo) {
  auto comm = braid::LookupComm(handle);
  if (!comm) return 1;
  const int want_nodes = shape.uneven.empty() ? shape.g : static_cast<int>(shape.uneven.size());
  if (comm->layout().nnodes != want_nodes) {
    std::fprintf(stderr, "[rank %d] layout has %d nodes, expected %d\n", rank,
                 comm->layout().nnodes, want_nodes);
    return 1;
  }
  for (CollKind k : KindsOf(algo)) {
    braid::CollArgs a;
    a.kind = k;
    a.dtype = DataType::kFloat32;
    a.count = kLargeCount;
    a.nranks = comm->nranks();
    a.nchannels = comm->nchannels();
    a.chunk_bytes = comm->config().chunk_bytes;
    a.layout = &comm->layout();
    const braid::Algorithm* chosen = comm->tuner().choose(a);
    const bool grid = shape.uneven.empty();
    const bool is_forced = chosen && algo == chosen->name();
    if (grid != is_forced) {
      std::fprintf(stderr, "[rank %d] %s of %llu floats runs %s (forced %s, %s layout)\n", rank,
                   braid::CollKindName(k), static_cast<unsigned long long>(kLargeCount),
                   chosen ? chosen->name() : "nothing", algo.c_str(),
                   grid ? "a grid" : "an uneven");
      return 1;
    }
  }
  return 0;
}

using Param = std::tuple<Shape, std::string, std::string>;  // shape, transports, algorithm

class HierarchicalCollectives : public ::testing::TestWithParam<Param> {};

TEST_P(HierarchicalCollectives, ForcedAlgorithmIsBitExact) {
  const auto& [shape, transports, algo] = GetParam();
  JobOptions opt;
  opt.nranks = shape.nranks();
  opt.timeout_s = 300;
  opt.init = false;  // each rank sets its emulated host first
  opt.env = {{"BRAID_TRANSPORTS", transports},
             {"BRAID_TIMEOUT", "60"},
             {"BRAID_NCHANNELS", "2"},
             // The forced algorithm does not depend on the link model; skip measuring it.
             {"BRAID_LINK_CALIBRATION", "0"},
             {"BRAID_ALGO", algo == "default" ? "" : "all:" + algo}};
  const std::vector<Case> cases = Cases(KindsOf(algo));
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    const std::string host = "hier-node-" + std::to_string(shape.node(rank));
    setenv("BRAID_HOSTID", host.c_str(), 1);
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, nranks, id, rank) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] init: %s\n", rank, braidGetLastError(nullptr));
      return 90;
    }
    // "default": whatever the tuner's model picks on these nodes (hierarchical for large calls).
    int code = algo == "default" ? 0 : CheckForcedAlgorithm(comm, rank, shape, algo);
    uint64_t wrong = 0;
    for (const Case& c : cases) wrong += RunCase(comm, rank, nranks, c);
    if (wrong) code = 1;
    if (braidCommDestroy(comm) != braidSuccess && code == 0) code = 91;
    return code;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  std::string t = std::get<1>(info.param);
  for (char& c : t)
    if (c == ',') c = '_';
  return std::get<0>(info.param).name() + "_" + t + "_" + std::get<2>(info.param);
}

const std::vector<std::string> kAlgorithms = {"hring",     "ho_ring", "torus2d",   "hier_leader",
                                              "hier_tree", "hpat",    "rail_ring", "default"};

// 2x2 over shm inside a node and tcp between nodes, and over tcp alone; 2x3; 2x2 with the nodes
// interleaved (ranks 0 and 2 on one host).
INSTANTIATE_TEST_SUITE_P(
    Grids, HierarchicalCollectives,
    ::testing::Combine(::testing::Values(Shape{2, 2, false, {}}, Shape{2, 3, false, {}}),
                       ::testing::Values(std::string("shm,tcp")), ::testing::ValuesIn(kAlgorithms)),
    ParamName);
INSTANTIATE_TEST_SUITE_P(TcpOnly, HierarchicalCollectives,
                         ::testing::Combine(::testing::Values(Shape{2, 2, false, {}}),
                                            ::testing::Values(std::string("tcp")),
                                            ::testing::ValuesIn(kAlgorithms)),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(Interleaved, HierarchicalCollectives,
                         ::testing::Combine(::testing::Values(Shape{2, 2, true, {}}),
                                            ::testing::Values(std::string("shm,tcp")),
                                            ::testing::Values(std::string("ho_ring"),
                                                              std::string("torus2d"),
                                                              std::string("hier_tree"))),
                         ParamName);
#ifdef BRAID_HAVE_UCX
// UCX forced for every pair, and UCX between nodes with shm inside them (its net route: UCX's tcp).
INSTANTIATE_TEST_SUITE_P(
    Ucx, HierarchicalCollectives,
    ::testing::Combine(::testing::Values(Shape{2, 2, false, {}}, Shape{2, 3, false, {}}),
                       ::testing::Values(std::string("ucx"), std::string("shm,ucx")),
                       ::testing::ValuesIn(kAlgorithms)),
    ParamName);
#endif
// The rail-aligned ring on 4 nodes of 2 (its channels enter every node at another local rank)
// and with the nodes interleaved (its order follows nodes and local ranks, not rank numbers).
INSTANTIATE_TEST_SUITE_P(RailRing, HierarchicalCollectives,
                         ::testing::Combine(::testing::Values(Shape{4, 2, false, {}},
                                                              Shape{2, 2, true, {}}),
                                            ::testing::Values(std::string("shm,tcp")),
                                            ::testing::Values(std::string("rail_ring"))),
                         ParamName);
// Nodes of 2 and 1 ranks: no grid, so the forced algorithm falls back to a flat one.
INSTANTIATE_TEST_SUITE_P(Uneven, HierarchicalCollectives,
                         ::testing::Combine(::testing::Values(Shape{0, 0, false, {2, 1}}),
                                            ::testing::Values(std::string("shm,tcp")),
                                            ::testing::Values(std::string("ho_ring"),
                                                              std::string("hier_leader"),
                                                              std::string("hier_tree"))),
                         ParamName);

// The 3-level variants on the machine of topologies/frontier.topo (4 MI250X = 8 GCDs in pairs per
// node): 8 ranks as 2 emulated hosts of 4 (g = 2 nodes of p = 2 GCD pairs of d = 2) or one host of
// 8 (p = 4), each variant forced, every case bit-exact. The communicator's layout must carry the
// pairs (local ranks 2k and 2k + 1 share MI250X k) and the tuner hand the forced variant every
// large call, so the third level really runs.
using ThreeLevelParam = std::tuple<int, std::string>;  // hosts, algorithm

class ThreeLevelCollectives : public ::testing::TestWithParam<ThreeLevelParam> {};

TEST_P(ThreeLevelCollectives, ForcedVariantOnFrontierGcdPairsIsBitExact) {
  const auto& [hosts, algo] = GetParam();
  JobOptions opt;
  opt.nranks = 8;
  opt.timeout_s = 300;
  opt.init = false;
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/frontier.topo"},
             {"BRAID_TIMEOUT", "60"},
             {"BRAID_NCHANNELS", "2"},
             {"BRAID_LINK_CALIBRATION", "0"},
             {"BRAID_ALGO", "all:" + algo}};
  const std::vector<Case> cases = Cases(KindsOf(algo));
  auto out = RunJob(opt, [&](braidComm_t, int rank, int nranks, const braidUniqueId& id) {
    const int per_host = nranks / hosts;
    setenv("BRAID_HOSTID", ("frontier-host" + std::to_string(rank / per_host)).c_str(), 1);
    braidComm_t handle = nullptr;
    if (braidCommInitRank(&handle, nranks, id, rank) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] init: %s\n", rank, braidGetLastError(nullptr));
      return 90;
    }
    int code = 0;
    {
      auto comm = braid::LookupComm(handle);
      if (!comm) return 92;
      const auto& l = comm->layout();
      for (int r = 0; r < nranks && code == 0; ++r)
        if (static_cast<int>(l.dgroup_of.size()) != nranks ||
            l.dgroup_of[r] != (r % per_host) / 2) {
          std::fprintf(stderr, "[rank %d] rank %d is not in device group %d\n", rank, r,
                       (r % per_host) / 2);
          code = 1;
        }
      // The cost model's device-group link is the file's (200 GB/s, 1 us between an MI250X's GCDs).
      const auto& group = comm->tuner().model().group;
      if (!group || group->beta_bytes_s != 200e9 || group->alpha_s != 1e-6) {
        std::fprintf(stderr, "[rank %d] device-group link %s\n", rank,
                     group ? (std::to_string(group->alpha_s) + " s, " +
                              std::to_string(group->beta_bytes_s) + " B/s")
                                 .c_str()
                           : "unset");
        code = 1;
      }
      for (CollKind k : KindsOf(algo)) {
        braid::CollArgs a;
        a.kind = k;
        a.count = kLargeCount;
        a.nranks = nranks;
        a.nchannels = comm->nchannels();
        a.chunk_bytes = comm->config().chunk_bytes;
        a.layout = &l;
        const braid::Algorithm* chosen = comm->tuner().choose(a);
        if (!chosen || algo != chosen->name()) {
          std::fprintf(stderr, "[rank %d] %s runs %s, not %s\n", rank, braid::CollKindName(k),
                       chosen ? chosen->name() : "nothing", algo.c_str());
          code = 1;
        }
      }
    }
    uint64_t wrong = 0;
    for (const Case& c : cases) wrong += RunCase(handle, rank, nranks, c);
    if (wrong) code = 1;
    if (braidCommDestroy(handle) != braidSuccess && code == 0) code = 91;
    return code;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Frontier, ThreeLevelCollectives,
                         ::testing::Combine(::testing::Values(2, 1),
                                            ::testing::Values(std::string("hring3"),
                                                              std::string("ho_ring3"),
                                                              std::string("torus2d3"))),
                         [](const ::testing::TestParamInfo<ThreeLevelParam>& info) {
                           return std::to_string(std::get<0>(info.param)) + "hosts_" +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace braid_test
