// Which transport the registry picks per pair once UCX is in the build (issue 40), on the shipped
// mixed cluster (topologies/mixed-ib-roce.topo: nodes ib0, ib1 with an InfiniBand HCA, roce0,
// roce1 with a RoCE NIC) emulated with BRAID_HOSTID:
//   - by default, a pair of IB nodes would run on UCX restricted to the HCA; this machine's UCX
//     finds no such device, so the pair runs on tcp, and each rank says so in one log line;
//   - with BRAID_TRANSPORTS=ucx every pair runs on UCX: a node's pairs on its local route (UCX's
//     shared memory), the others on its net route (UCX's tcp), whatever their fabric;
//   - with BRAID_TRANSPORTS=shm,ucx a node's pairs keep shm.
// Collectives are checked bit for bit in each case.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

const char* kNodes[] = {"ib0", "ib1", "roce0", "roce1"};

int CheckedAllReduce(braidComm_t comm, int rank, int nranks, size_t count) {
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((rank * 31 + i * 7) % 1021);
  CHECK_OR_FAIL(
      braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm) == braidSuccess,
      "all-reduce of %zu: %s", count, braidGetLastError(comm));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += static_cast<float>((r * 31 + i * 7) % 1021);
    CHECK_OR_FAIL(out[i] == want, "element %zu is %g, want %g", i, out[i], want);
  }
  return 0;
}

// Rank r on node kNodes[node_of(r)]; returns the transport serving each peer after a checked
// all-reduce, and (in *routes) each peer's first channel as the endpoint describes itself.
int RunOnNodes(int rank, int n, const braidUniqueId& id, int (*node_of)(int),
               std::vector<std::string>* transports, std::vector<std::string>* routes) {
  setenv("BRAID_HOSTID", kNodes[node_of(rank)], 1);
  braidComm_t comm = nullptr;
  CHECK_OR_FAIL(braidCommInitRank(&comm, n, id, rank) == braidSuccess, "init");
  if (CheckedAllReduce(comm, rank, n, 1000) || CheckedAllReduce(comm, rank, n, 200000)) return 1;
  transports->assign(n, "");
  routes->assign(n, "");
  for (int q = 0; q < n; ++q) {
    uint64_t sent = 0, received = 0;
    char name[16] = "";
    CHECK_OR_FAIL(
        braidCommPeerTraffic(comm, q, &sent, &received, name, sizeof name) == braidSuccess,
        "traffic");
    (*transports)[q] = name;
    if (q == rank) continue;
    auto c = braid::LookupComm(comm);
    (*routes)[q] = c->endpoint(q, 0)->describe();
  }
  CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
  return 0;
}

int TwoPerNode(int r) {
  return r / 2;  // ranks 0, 1 on ib0; 2, 3 on ib1; 4, 5 on roce0
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Two IB nodes of two ranks each: a node's pairs on shm, the IB pairs on tcp (no HCA for UCX
// here), one line per rank saying why.
TEST(UcxRoute, AnIbPairWithoutUcxDeviceFallsBackToTcpWithOneLogLine) {
  char dir[] = "/tmp/braid-ucx-route-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string logs = std::string(dir) + "/rank.%r";
  JobOptions opt;
  opt.nranks = 4;
  opt.init = false;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo"},
             {"BRAID_TIMEOUT", "30"},
             {"BRAID_DEBUG", "WARN"},
             {"BRAID_DEBUG_FILE", logs}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    std::vector<std::string> transports, routes;
    if (RunOnNodes(rank, n, id, TwoPerNode, &transports, &routes)) return 1;
    for (int q = 0; q < n; ++q) {
      const char* want = q == rank ? "self" : TwoPerNode(q) == TwoPerNode(rank) ? "shm" : "tcp";
      CHECK_OR_FAIL(transports[q] == want, "peer %d on %s, want %s", q, transports[q].c_str(),
                    want);
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
  for (int r = 0; r < 4; ++r) {
    int said = 0;
    std::string all;
    for (const std::string& line : ReadLines(std::string(dir) + "/rank." + std::to_string(r))) {
      all += line + "\n";
      if (line.find("ucx: ") != std::string::npos) ++said;
      if (line.find("ucx: rank " + std::to_string(r) +
                    ": ib pairs use tcp: UCX found none of "
                    "this node's InfiniBand devices (mlx5_0:1)") != std::string::npos)
        ++said;  // counted twice: the one line must be this one
    }
    EXPECT_EQ(said, 2) << "rank " << r << "'s log:\n" << all;
  }
  std::system(("rm -rf " + std::string(dir)).c_str());
}

// BRAID_TRANSPORTS=ucx on three nodes of two ranks (ib0, ib1, roce0): every pair on UCX, a
// node's pairs over its local route, the others over the net route.
TEST(UcxRoute, ForcedUcxServesEveryPair) {
  JobOptions opt;
  opt.nranks = 6;
  opt.init = false;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo"},
             {"BRAID_TIMEOUT", "30"},
             {"BRAID_TRANSPORTS", "ucx"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    std::vector<std::string> transports, routes;
    if (RunOnNodes(rank, n, id, TwoPerNode, &transports, &routes)) return 1;
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      const bool local = TwoPerNode(q) == TwoPerNode(rank);
      CHECK_OR_FAIL(transports[q] == "ucx", "peer %d on %s", q, transports[q].c_str());
      const char* want = local ? "(local route)" : "(net route)";
      CHECK_OR_FAIL(routes[q].find(want) != std::string::npos, "peer %d: %s, want %s", q,
                    routes[q].c_str(), want);
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// BRAID_TRANSPORTS=shm,ucx: shm keeps a node's pairs, UCX (net route) the rest.
TEST(UcxRoute, ShmFirstThenUcx) {
  JobOptions opt;
  opt.nranks = 4;
  opt.init = false;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo"},
             {"BRAID_TIMEOUT", "30"},
             {"BRAID_TRANSPORTS", "shm,ucx"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    std::vector<std::string> transports, routes;
    if (RunOnNodes(rank, n, id, TwoPerNode, &transports, &routes)) return 1;
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      const bool local = TwoPerNode(q) == TwoPerNode(rank);
      CHECK_OR_FAIL(transports[q] == (local ? "shm" : "ucx"), "peer %d on %s", q,
                    transports[q].c_str());
      CHECK_OR_FAIL(local || routes[q].find("(net route)") != std::string::npos, "peer %d: %s", q,
                    routes[q].c_str());
    }
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
