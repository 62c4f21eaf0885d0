// Ranks placed on the topology (issue 9): every rank learns every rank's node and NIC fabric at
// init; braidCommSplitByFabric puts the IB and the RoCE nodes of the shipped mixed cluster in
// separate groups; braidCommSplitLevel makes node-local and same-local-rank views without any
// communication. Every view's collectives are checked bit for bit. Ranks emulate their nodes with
// BRAID_HOSTID, set in each rank before its init.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

int CountFds() {
  return braid_test_common::CountEntries("/proc/self/fd");
}

float In(int k, int r, size_t i) {
  return static_cast<float>(static_cast<int>((r * 3 + i * 17 + k * 5) % 777) - 388);
}

// An all-reduce on `comm` whose ranks are the global ranks `members` (in its rank order),
// checked bit for bit; also checks the view's size and this rank's place in it.
int CheckView(braidComm_t comm, int rank, const std::vector<int>& members, int k) {
  int vr = -1, vn = -1;
  CHECK_OR_FAIL(
      braidCommUserRank(comm, &vr) == braidSuccess && braidCommCount(comm, &vn) == braidSuccess,
      "rank/count");
  CHECK_OR_FAIL(vn == static_cast<int>(members.size()), "view of %d ranks, want %zu", vn,
                members.size());
  CHECK_OR_FAIL(vr >= 0 && vr < vn && members[vr] == rank, "view rank %d", vr);
  const size_t count = 2000 + 37 * k;
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = In(k, rank, i);
  CHECK_OR_FAIL(
      braidAllReduce(send.data(), recv.data(), count, braidFloat32, braidSum, comm) == braidSuccess,
      "allreduce: %s", braidGetLastError(comm));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int m : members) want += In(k, m, i);
    CHECK_OR_FAIL(recv[i] == want, "element %zu is %g, want %g", i, recv[i], want);
  }
  return 0;
}

int Init(braidComm_t* comm, int rank, int n, const braidUniqueId& id) {
  CHECK_OR_FAIL(braidCommInitRank(comm, n, id, rank) == braidSuccess, "init");
  return 0;
}

// topologies/mixed-ib-roce.topo: nodes ib0, ib1 (InfiniBand), roce0, roce1 (RoCE), Ethernet on
// all. Two ranks per node, nodes interleaved over the ranks (rank r on node r % 4), so the
// groups are not contiguous blocks of ranks.
TEST(Placement, FabricSplitSeparatesInfiniBandFromRoCE) {
  JobOptions opt;
  opt.nranks = 8;
  opt.timeout_s = 120;
  opt.init = false;
  // Connections made at init, so that the descriptor count below sees only what the split
  // itself opens (lazily, the view's first calls would connect pairs: lazy_connect_test.cc).
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo"},
             {"BRAID_TIMEOUT", "30"},
             {"BRAID_LAZY_CONNECT", "0"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    static const char* kNodes[] = {"ib0", "ib1", "roce0", "roce1"};
    setenv("BRAID_HOSTID", kNodes[rank % 4], 1);
    braidComm_t comm = nullptr;
    if (Init(&comm, rank, n, id)) return 1;
    // Pairs of ranks on different nodes, by the RDMA type both nodes have: IB-IB 2x2, RoCE-RoCE
    // 2x2, IB-RoCE 4x4 (none in common: TCP).
    const std::string pairs = braid::LookupComm(comm)->fabricSummary();
    CHECK_OR_FAIL(pairs.find("ib 4 none 16 roce 4") != std::string::npos, "%s", pairs.c_str());
    const int fds = CountFds();
    braidComm_t fab = nullptr;
    const char* name = nullptr;
    CHECK_OR_FAIL(braidCommSplitByFabric(comm, &fab, &name) == braidSuccess, "fabric split");
    const bool ib = rank % 4 < 2;
    CHECK_OR_FAIL(name && std::string(name) == (ib ? "ib" : "roce"), "fabric '%s'",
                  name ? name : "(null)");
    std::vector<int> members;
    for (int r = 0; r < n; ++r)
      if ((r % 4 < 2) == ib) members.push_back(r);
    if (CheckView(fab, rank, members, 1)) return 1;
    CHECK_OR_FAIL(CountFds() == fds, "the fabric split opened descriptors");
    // Levels: the node (2 ranks: r and r + 4) and the same local rank (4 ranks, one per node).
    braidComm_t node = nullptr, same = nullptr;
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelNode, &node) == braidSuccess, "node level");
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelSameLocalRank, &same) == braidSuccess,
                  "same-local-rank level");
    if (CheckView(node, rank, {rank % 4, rank % 4 + 4}, 2)) return 1;
    std::vector<int> same_members;
    for (int r = 0; r < n; ++r)
      if (r / 4 == rank / 4) same_members.push_back(r);
    if (CheckView(same, rank, same_members, 3)) return 1;
    // The root still works, interleaved with its views in the same order everywhere.
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    if (CheckView(comm, rank, all, 4)) return 1;
    if (CheckView(fab, rank, members, 5)) return 1;
    for (braidComm_t c : {node, same, fab})
      CHECK_OR_FAIL(braidCommDestroy(c) == braidSuccess, "destroy view");
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// topologies/frontier.topo: a node of 4 MI250X = 8 GCDs in pairs. 8 ranks on one such node:
// the device-group level pairs local ranks (0,1), (2,3), ... (the GCDs of one MI250X); 4 ranks
// on each of 2 emulated nodes named like the file's node: pairs per node, never across nodes.
TEST(Placement, DeviceGroupLevelPairsTheGcdsOfOneMi250x) {
  for (int nodes : {1, 2}) {
    JobOptions opt;
    opt.nranks = 8;
    opt.timeout_s = 120;
    opt.init = false;
    opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/frontier.topo"}, {"BRAID_TIMEOUT", "30"}};
    auto out = RunJob(opt, [nodes](braidComm_t, int rank, int n, const braidUniqueId& id) {
      // One file node, two emulated hosts: the file describes the node type; BRAID_HOSTID
      // separates the hosts (a one-node file applies to every rank).
      const int per_node = n / nodes;
      setenv("BRAID_HOSTID", ("frontier-host" + std::to_string(rank / per_node)).c_str(), 1);
      braidComm_t comm = nullptr;
      if (Init(&comm, rank, n, id)) return 1;
      braidComm_t pair = nullptr;
      CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelDeviceGroup, &pair) == braidSuccess,
                    "device-group level");
      const int first = rank - rank % 2;  // local ranks 2k and 2k + 1 share MI250X k
      if (CheckView(pair, rank, {first, first + 1}, 6)) return 1;
      const char* fabric = nullptr;
      braidComm_t fab = nullptr;
      CHECK_OR_FAIL(braidCommSplitByFabric(comm, &fab, &fabric) == braidSuccess, "fabric");
      CHECK_OR_FAIL(std::string(fabric) == "slingshot", "fabric %s", fabric);
      for (braidComm_t c : {pair, fab, comm})
        CHECK_OR_FAIL(braidCommDestroy(c) == braidSuccess, "destroy");
      return 0;
    });
    EXPECT_TRUE(AllSucceeded(out)) << nodes << " node(s): " << DescribeOutcomes(out);
  }
}

// Without a topology file every node is discovered here (Ethernet only): one fabric group, the
// whole communicator. Bad arguments are refused and change nothing.
TEST(Placement, DiscoveredEthernetAndBadArguments) {
  JobOptions opt;
  opt.nranks = 4;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    braidComm_t fab = nullptr;
    const char* name = nullptr;
    CHECK_OR_FAIL(braidCommSplitByFabric(comm, &fab, &name) == braidSuccess, "fabric split");
    CHECK_OR_FAIL(std::string(name) == "ethernet", "fabric %s", name);
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    if (CheckView(fab, rank, all, 1)) return 1;
    braidComm_t none = nullptr;
    CHECK_OR_FAIL(
        braidCommSplitLevel(comm, static_cast<braidLevel_t>(7), &none) == braidErrInvalidArgument,
        "level 7 accepted");
    CHECK_OR_FAIL(none == nullptr, "a handle for a refused call");
    CHECK_OR_FAIL(std::strstr(braidGetLastError(comm), "braidLevelNode") != nullptr, "message %s",
                  braidGetLastError(comm));
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelNode, nullptr) == braidErrInvalidArgument,
                  "NULL newcomm accepted");
    CHECK_OR_FAIL(braidCommSplitByFabric(comm, nullptr, nullptr) == braidErrInvalidArgument,
                  "NULL newcomm accepted");
    // One node: the node level is everyone, the same-local-rank level is this rank alone.
    braidComm_t node = nullptr, same = nullptr;
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelNode, &node) == braidSuccess, "node");
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelSameLocalRank, &same) == braidSuccess,
                  "same");
    if (CheckView(node, rank, all, 2)) return 1;
    if (CheckView(same, rank, {rank}, 3)) return 1;
    // No devices here: each rank is a device group of its own.
    braidComm_t dev = nullptr;
    CHECK_OR_FAIL(braidCommSplitLevel(comm, braidLevelDeviceGroup, &dev) == braidSuccess, "dev");
    if (CheckView(dev, rank, {rank}, 7)) return 1;
    CHECK_OR_FAIL(braidCommDestroy(dev) == braidSuccess, "destroy");
    if (CheckView(comm, rank, all, 4)) return 1;
    for (braidComm_t c : {node, same, fab})
      CHECK_OR_FAIL(braidCommDestroy(c) == braidSuccess, "destroy view");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A cluster file that does not describe this rank's node is an init error naming the file's
// nodes and the missing one, on every rank (all fail alike, nobody hangs).
TEST(Placement, TopologyFileWithoutThisNodeFailsInit) {
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 120;
  opt.init = false;
  opt.env = {{"BRAID_TOPO_FILE", BRAID_TOPOLOGIES_DIR "/mixed-ib-roce.topo"},
             {"BRAID_HOSTID", "nosuchnode"},
             {"BRAID_TIMEOUT", "10"}};
  auto out = RunJob(opt, [](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    braidResult_t r = braidCommInitRank(&comm, n, id, rank);
    CHECK_OR_FAIL(r == braidErrInvalidArgument, "init returned %d", static_cast<int>(r));
    const std::string m = braidGetLastError(nullptr);
    CHECK_OR_FAIL(m.find("not this rank's node 'nosuchnode'") != std::string::npos &&
                      m.find("ib0") != std::string::npos,
                  "message: %s", m.c_str());
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
