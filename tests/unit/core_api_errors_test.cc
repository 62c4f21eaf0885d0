// Every argument error a user can make on the native C API gets the right status and a message
// that names the problem, and leaves the communicator usable.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <string>
#include <vector>

#include "braid/braid.h"

namespace {

class ApiErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("BRAID_TIMEOUT", "20", 1);
    braidUniqueId id;
    ASSERT_EQ(braidGetUniqueId(&id), braidSuccess) << braidGetLastError(nullptr);
    ASSERT_EQ(braidCommInitRank(&comm_, 1, id, 0), braidSuccess) << braidGetLastError(nullptr);
  }
  void TearDown() override {
    if (comm_) {
      EXPECT_EQ(braidCommDestroy(comm_), braidSuccess);
    }
  }
  std::string last() { return braidGetLastError(comm_); }
  // The communicator still works after the error.
  void ExpectHealthy() {
    float in[3] = {1, 2, 3}, out[3] = {};
    ASSERT_EQ(braidAllReduce(in, out, 3, braidFloat32, braidSum, comm_), braidSuccess) << last();
    EXPECT_EQ(out[2], 3.0f);
  }
  braidComm_t comm_ = nullptr;
};

TEST_F(ApiErrors, NullBuffers) {
  float x[4] = {};
  EXPECT_EQ(braidAllReduce(nullptr, x, 4, braidFloat32, braidSum, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("sendbuff is NULL"), std::string::npos) << last();
  EXPECT_EQ(braidAllReduce(x, nullptr, 4, braidFloat32, braidSum, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("recvbuff is NULL"), std::string::npos) << last();
  EXPECT_EQ(braidAllGather(nullptr, x, 1, braidFloat32, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidSend(nullptr, 1, braidFloat32, 0, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidAllReduce(x, x, 4, braidFloat32, braidSum, nullptr), braidErrInvalidArgument);
  EXPECT_EQ(braidCommCount(comm_, nullptr), braidErrInvalidArgument);
  EXPECT_EQ(braidCommInitRank(nullptr, 1, braidUniqueId{}, 0), braidErrInvalidArgument);
  // Null buffers with count 0 are fine (no-op).
  EXPECT_EQ(braidAllReduce(nullptr, nullptr, 0, braidFloat32, braidSum, comm_), braidSuccess);
  ExpectHealthy();
}

TEST_F(ApiErrors, PeerTrafficArguments) {
  uint64_t sent = 7, received = 7;
  char name[8];
  EXPECT_EQ(braidCommPeerTraffic(nullptr, 0, &sent, &received, name, sizeof name),
            braidErrInvalidArgument);
  EXPECT_EQ(braidCommPeerTraffic(comm_, 1, &sent, &received, name, sizeof name),
            braidErrInvalidArgument);
  EXPECT_NE(last().find("peer 1 is not a rank of this communicator (0..0)"), std::string::npos)
      << last();
  EXPECT_EQ(braidCommPeerTraffic(comm_, -1, &sent, &received, nullptr, 0), braidErrInvalidArgument);
  EXPECT_EQ(braidCommPeerTraffic(comm_, 0, &sent, &received, name, 0), braidErrInvalidArgument);
  // This rank itself: "self", nothing moved; every output is optional; the name is truncated
  // to the buffer.
  ASSERT_EQ(braidCommPeerTraffic(comm_, 0, &sent, &received, name, sizeof name), braidSuccess);
  EXPECT_STREQ(name, "self");
  EXPECT_EQ(sent, 0u);
  EXPECT_EQ(received, 0u);
  EXPECT_EQ(braidCommPeerTraffic(comm_, 0, nullptr, nullptr, nullptr, 0), braidSuccess);
  char tiny[3];
  ASSERT_EQ(braidCommPeerTraffic(comm_, 0, nullptr, nullptr, tiny, sizeof tiny), braidSuccess);
  EXPECT_STREQ(tiny, "se");
  ExpectHealthy();
}

TEST_F(ApiErrors, UnknownTypeAndOp) {
  float x[4] = {};
  EXPECT_EQ(braidAllReduce(x, x, 4, static_cast<braidDataType_t>(12), braidSum, comm_),
            braidErrInvalidArgument);
  EXPECT_NE(last().find("unknown datatype 12"), std::string::npos) << last();
  EXPECT_EQ(braidAllReduce(x, x, 4, static_cast<braidDataType_t>(-1), braidSum, comm_),
            braidErrInvalidArgument);
  EXPECT_EQ(braidAllReduce(x, x, 4, braidFloat32, static_cast<braidRedOp_t>(5), comm_),
            braidErrInvalidArgument);
  EXPECT_NE(last().find("unknown reduction op 5"), std::string::npos) << last();
  EXPECT_EQ(braidAllReduce(x, x, 4, braidFloat32, static_cast<braidRedOp_t>(-3), comm_),
            braidErrInvalidArgument);
  EXPECT_EQ(braidSend(x, 1, static_cast<braidDataType_t>(99), 0, comm_), braidErrInvalidArgument);
  ExpectHealthy();
}

TEST_F(ApiErrors, PreMulSumLifecycle) {
  float two = 2, x[2] = {1, 2}, y[2] = {};
  braidRedOp_t op;
  ASSERT_EQ(braidRedOpCreatePreMulSum(&op, &two, braidFloat32, comm_), braidSuccess);
  ASSERT_EQ(braidAllReduce(x, y, 2, braidFloat32, op, comm_), braidSuccess) << last();
  EXPECT_EQ(y[1], 4.0f);
  // Type mismatch between op and call.
  double d[2] = {1, 2};
  EXPECT_EQ(braidAllReduce(d, d, 2, braidFloat64, op, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("created for float"), std::string::npos) << last();
  EXPECT_EQ(braidRedOpDestroy(op, comm_), braidSuccess);
  EXPECT_EQ(braidRedOpDestroy(op, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidAllReduce(x, y, 2, braidFloat32, op, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidRedOpDestroy(braidSum, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidRedOpCreatePreMulSum(&op, nullptr, braidFloat32, comm_), braidErrInvalidArgument);
  ExpectHealthy();
}

TEST_F(ApiErrors, RootOutOfRange) {
  float x[4] = {};
  EXPECT_EQ(braidBroadcast(x, x, 4, braidFloat32, 1, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("root 1 is outside [0, 1)"), std::string::npos) << last();
  EXPECT_EQ(braidReduce(x, x, 4, braidFloat32, braidSum, -1, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidSend(x, 4, braidFloat32, 5, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("peer 5"), std::string::npos) << last();
  ExpectHealthy();
}

TEST_F(ApiErrors, CountOverflow) {
  float x[4] = {};
  EXPECT_EQ(braidAllReduce(x, x, SIZE_MAX / 2, braidFloat32, braidSum, comm_),
            braidErrInvalidArgument);
  EXPECT_NE(last().find("overflows"), std::string::npos) << last();
  EXPECT_EQ(braidAllGather(x, x + 1, SIZE_MAX / 4, braidFloat64, comm_), braidErrInvalidArgument);
  EXPECT_EQ(braidRecv(x, SIZE_MAX, braidInt64, 0, comm_), braidErrInvalidArgument);
  ExpectHealthy();
}

TEST_F(ApiErrors, OverlapAndInPlaceRules) {
  float x[8] = {};
  EXPECT_EQ(braidAllReduce(x, x + 1, 4, braidFloat32, braidSum, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("overlap"), std::string::npos) << last();
  EXPECT_EQ(braidAllToAll(x, x, 1, braidFloat32, comm_), braidErrInvalidArgument);
  EXPECT_NE(last().find("in-place all-to-all"), std::string::npos) << last();
  ExpectHealthy();
}

TEST_F(ApiErrors, SelfSendOutsideGroupAndGroupMisuse) {
  int v = 1, w = 0;
  EXPECT_EQ(braidSend(&v, 1, braidInt32, 0, comm_), braidErrInvalidUsage);
  EXPECT_NE(last().find("braidGroupStart"), std::string::npos) << last();
  EXPECT_EQ(braidGroupEnd(), braidErrInvalidUsage);
  // Unmatched self send inside a group fails at GroupEnd, naming the imbalance.
  braidGroupStart();
  braidSend(&v, 1, braidInt32, 0, comm_);
  EXPECT_EQ(braidGroupEnd(), braidErrInvalidUsage);
  // Matched: works.
  braidGroupStart();
  braidSend(&v, 1, braidInt32, 0, comm_);
  braidRecv(&w, 1, braidInt32, 0, comm_);
  EXPECT_EQ(braidGroupEnd(), braidSuccess) << last();
  EXPECT_EQ(w, 1);
}

TEST_F(ApiErrors, UseAfterDestroy) {
  braidComm_t dead = comm_;
  ASSERT_EQ(braidCommDestroy(comm_), braidSuccess);
  comm_ = nullptr;
  float x[1] = {};
  EXPECT_EQ(braidAllReduce(x, x, 1, braidFloat32, braidSum, dead), braidErrInvalidUsage);
  EXPECT_NE(std::string(braidGetLastError(dead)).find("not live"), std::string::npos)
      << braidGetLastError(dead);
  EXPECT_EQ(braidCommDestroy(dead), braidErrInvalidUsage);
  int n;
  EXPECT_EQ(braidCommCount(dead, &n), braidErrInvalidUsage);
  braidResult_t async;
  EXPECT_EQ(braidCommGetAsyncError(dead, &async), braidErrInvalidUsage);
}

// A destroyed handle must stay dead when a new communicator is created, even where the allocator
// puts the new one at the old one's address (issue 7 item 6: calls on the stale handle used to
// act on the new communicator). Several cycles, since reuse of the address is likely, not certain.
TEST(ApiHandles, StaleHandleNeverAliasesANewCommunicator) {
  std::vector<braidComm_t> dead;
  for (int cycle = 0; cycle < 20; ++cycle) {
    braidUniqueId id;
    ASSERT_EQ(braidGetUniqueId(&id), braidSuccess) << braidGetLastError(nullptr);
    braidComm_t old_comm = nullptr;
    ASSERT_EQ(braidCommInitRank(&old_comm, 1, id, 0), braidSuccess) << braidGetLastError(nullptr);
    ASSERT_EQ(braidCommDestroy(old_comm), braidSuccess);
    dead.push_back(old_comm);
    braidUniqueId id2;
    ASSERT_EQ(braidGetUniqueId(&id2), braidSuccess) << braidGetLastError(nullptr);
    braidComm_t fresh = nullptr;
    ASSERT_EQ(braidCommInitRank(&fresh, 1, id2, 0), braidSuccess) << braidGetLastError(nullptr);
    for (braidComm_t d : dead) {
      ASSERT_NE(d, fresh) << "a handle was handed out twice (cycle " << cycle << ")";
      int n = 0;
      EXPECT_EQ(braidCommCount(d, &n), braidErrInvalidUsage) << "cycle " << cycle;
      float x = 1;
      EXPECT_EQ(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, d), braidErrInvalidUsage);
    }
    int n = 0;
    EXPECT_EQ(braidCommCount(fresh, &n), braidSuccess);
    EXPECT_EQ(n, 1);
    ASSERT_EQ(braidCommDestroy(fresh), braidSuccess);
    dead.push_back(fresh);
  }
}

// Each thread caches its last handle lookup (comm_registry.cc). A view keeps its parent
// communicator alive after the parent's handle is destroyed: the handle must read as not live all
// the same, on the thread that used it last too (the cache's weak reference still locks).
TEST(ApiHandles, ADestroyedParentHandleIsNotLiveWhileItsViewKeepsTheCommunicatorAlive) {
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess) << braidGetLastError(nullptr);
  braidComm_t parent = nullptr, view = nullptr;
  ASSERT_EQ(braidCommInitRank(&parent, 1, id, 0), braidSuccess) << braidGetLastError(nullptr);
  ASSERT_EQ(braidCommSplit(parent, 0, 0, &view, nullptr), braidSuccess)
      << braidGetLastError(parent);
  ASSERT_NE(view, nullptr);
  int n = 0;
  ASSERT_EQ(braidCommCount(parent, &n), braidSuccess);  // this thread's last lookup
  ASSERT_EQ(braidCommDestroy(parent), braidSuccess) << braidGetLastError(parent);
  EXPECT_EQ(braidCommCount(parent, &n), braidErrInvalidUsage);
  float x = 2;
  EXPECT_EQ(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, parent), braidErrInvalidUsage);
  EXPECT_NE(std::string(braidGetLastError(parent)).find("not live"), std::string::npos)
      << braidGetLastError(parent);
  EXPECT_EQ(braidAllReduce(&x, &x, 1, braidFloat32, braidSum, view), braidSuccess)
      << braidGetLastError(view);
  EXPECT_EQ(x, 2.0f);
  EXPECT_EQ(braidCommDestroy(view), braidSuccess);
}

TEST_F(ApiErrors, RequestsAndWait) {
  float x[16] = {1}, y[16] = {};
  braidRequest_t req = nullptr;
  ASSERT_EQ(braidIallReduce(x, y, 16, braidFloat32, braidSum, comm_, &req), braidSuccess);
  ASSERT_EQ(braidWait(&req, 10000), braidSuccess) << last();
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(braidWait(&req, 0), braidErrInvalidArgument);
  EXPECT_EQ(braidIallReduce(x, y, 16, braidFloat32, braidSum, comm_, nullptr),
            braidErrInvalidArgument);
  ASSERT_EQ(braidIbarrier(comm_, &req), braidSuccess);
  int done = 0;
  while (!done) ASSERT_EQ(braidTest(&req, &done), braidSuccess);
  EXPECT_EQ(req, nullptr);
}

TEST(ApiConfig, BadInitArgumentsAndEnvironment) {
  braidComm_t comm = nullptr;
  braidUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_EQ(braidCommInitRank(&comm, 1, garbage, 0), braidErrInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess);
  EXPECT_EQ(braidCommInitRank(&comm, 0, id, 0), braidErrInvalidArgument);
  EXPECT_EQ(braidCommInitRank(&comm, 2, id, 2), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("rank 2 is outside"), std::string::npos);
  braidConfig_t cfg = BRAID_CONFIG_INITIALIZER;
  cfg.size = 3;
  EXPECT_EQ(braidCommInitRankConfig(&comm, 1, id, 0, &cfg), braidErrInvalidArgument);
  cfg = BRAID_CONFIG_INITIALIZER;
  cfg.transports = "carrier-pigeon";
  EXPECT_EQ(braidCommInitRankConfig(&comm, 1, id, 0, &cfg), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("carrier-pigeon"), std::string::npos)
      << braidGetLastError(nullptr);
  setenv("BRAID_TIMEOUT", "soon", 1);
  EXPECT_EQ(braidCommInitRank(&comm, 1, id, 0), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("BRAID_TIMEOUT='soon'"),
            std::string::npos);
  setenv("BRAID_TIMEOUT", "20", 1);
  cfg = BRAID_CONFIG_INITIALIZER;
  cfg.algorithms = "allreduce:warp-drive";
  EXPECT_NE(braidCommInitRankConfig(&comm, 1, id, 0, &cfg), braidSuccess);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("warp-drive"), std::string::npos)
      << braidGetLastError(nullptr);
  // NCCL_ALGO in NVIDIA's grammar is ignored with a warning; BRAID_ALGO stays strict.
  setenv("NCCL_ALGO", "^NVLS", 1);
  braidUniqueId id2;
  ASSERT_EQ(braidGetUniqueId(&id2), braidSuccess);
  EXPECT_EQ(braidCommInitRank(&comm, 1, id2, 0), braidSuccess) << braidGetLastError(nullptr);
  EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
  setenv("BRAID_ALGO", "^NVLS", 1);
  EXPECT_EQ(braidCommInitRank(&comm, 1, id2, 0), braidErrInvalidArgument);
  unsetenv("BRAID_ALGO");
  unsetenv("NCCL_ALGO");
  EXPECT_EQ(braidInitFromEnv(nullptr), braidErrInvalidArgument);
  EXPECT_STREQ(braidGetErrorString(braidErrRemote), "remote error");
  int v = 0;
  EXPECT_EQ(braidGetVersion(&v), braidSuccess);
  EXPECT_EQ(v, BRAID_VERSION_CODE);
}

TEST(ApiConfig, NonBlockingInitReportsInProgress) {
  setenv("BRAID_TIMEOUT", "20", 1);
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess);
  braidConfig_t cfg = BRAID_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  braidComm_t comm = nullptr;
  ASSERT_EQ(braidCommInitRankConfig(&comm, 1, id, 0, &cfg), braidInProgress);
  ASSERT_NE(comm, nullptr);
  braidResult_t st = braidInProgress;
  // Polled every millisecond (pacing, not ordering) until the init's own deadline (BRAID_TIMEOUT),
  // not for a number of polls, which a loaded machine could outlast.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (st == braidInProgress && std::chrono::steady_clock::now() < give_up) {
    ASSERT_EQ(braidCommGetAsyncError(comm, &st), braidSuccess);
    if (st == braidInProgress) usleep(1000);
  }
  EXPECT_EQ(st, braidSuccess);
  int n = 0;
  EXPECT_EQ(braidCommCount(comm, &n), braidSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(braidCommDestroy(comm), braidSuccess);
}

}  // namespace

// The local codec calls: bad configurations, types and buffers are refused with a message and
// write nothing; a round trip of values on the INT8 grid is exact; the size is the layout's.
TEST(ApiQuantize, RefusesBadArgumentsAndRoundTripsTheGrid) {
  const braidQuantConfig_t int8 = {8, 256, 1};
  size_t bytes = 0;
  EXPECT_EQ(braidQuantizedSize(256, nullptr, &bytes), braidErrInvalidArgument);
  EXPECT_EQ(braidQuantizedSize(256, &int8, nullptr), braidErrInvalidArgument);
  const braidQuantConfig_t bad_bits = {5, 256, 1}, bad_block = {8, 0, 1}, bad_sym = {4, 32, 2};
  EXPECT_EQ(braidQuantizedSize(256, &bad_bits, &bytes), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("bits must be 8 or 4"), std::string::npos);
  EXPECT_EQ(braidQuantizedSize(256, &bad_block, &bytes), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("blockSize"), std::string::npos);
  EXPECT_EQ(braidQuantizedSize(256, &bad_sym, &bytes), braidErrInvalidArgument);
  // 256 codes and one fp32 scale, rounded up to 16 bytes.
  ASSERT_EQ(braidQuantizedSize(256, &int8, &bytes), braidSuccess);
  EXPECT_EQ(bytes, 272u);
  ASSERT_EQ(braidQuantizedSize(0, &int8, &bytes), braidSuccess);
  EXPECT_EQ(bytes, 0u);

  // q * 0.5 for q in [-128, 127]: absmax 64, step 64 / 128 = 0.5, every value on the grid.
  std::vector<float> x(256), y(256, 7.0f);
  for (int q = -128; q < 128; ++q) x[q + 128] = 0.5f * static_cast<float>(q);
  std::vector<unsigned char> enc(272, 0xAB);
  EXPECT_EQ(braidQuantize(x.data(), 256, braidInt32, &int8, enc.data()), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("float32, float16 or bfloat16"),
            std::string::npos);
  EXPECT_EQ(braidQuantize(x.data(), 256, braidFloat32, &bad_bits, enc.data()),
            braidErrInvalidArgument);
  EXPECT_EQ(braidQuantize(nullptr, 256, braidFloat32, &int8, enc.data()), braidErrInvalidArgument);
  EXPECT_EQ(braidDequantize(enc.data(), 256, braidFloat32, &int8, nullptr),
            braidErrInvalidArgument);
  EXPECT_EQ(braidQuantize(x.data(), 256, braidFloat32, nullptr, enc.data()),
            braidErrInvalidArgument);
  for (unsigned char b : enc) EXPECT_EQ(b, 0xAB);  // refused calls wrote nothing
  EXPECT_EQ(braidQuantize(nullptr, 0, braidFloat32, &int8, nullptr), braidSuccess);
  ASSERT_EQ(braidQuantize(x.data(), 256, braidFloat32, &int8, enc.data()), braidSuccess);
  ASSERT_EQ(braidDequantize(enc.data(), 256, braidFloat32, &int8, y.data()), braidSuccess);
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
}

// The communicator's link model as braidEstimateCollective takes it: believable numbers, and a
// NULL output or a destroyed communicator refused with a message.
TEST_F(ApiErrors, CommLinkParams) {
  braidLinkParams_t link{};
  EXPECT_EQ(braidCommLinkParams(comm_, nullptr), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("braidCommLinkParams"), std::string::npos);
  ASSERT_EQ(braidCommLinkParams(comm_, &link), braidSuccess) << last();
  EXPECT_GT(link.intraLatency, 0.0);
  EXPECT_GT(link.intraBandwidth, 1e6);
  EXPECT_GT(link.interLatency, 0.0);
  EXPECT_GT(link.interBandwidth, 1e6);
  EXPECT_GE(link.nicsPerNode, 1);
  double s = 0;
  EXPECT_EQ(braidEstimateCollective(braidCollAllReduce, 1 << 20, braidFloat32, 0, 2, 2, 1, &link,
                                    &s, nullptr, 0),
            braidSuccess);
  EXPECT_GT(s, 0.0);
  ASSERT_EQ(braidCommDestroy(comm_), braidSuccess);
  EXPECT_NE(braidCommLinkParams(comm_, &link), braidSuccess);
  comm_ = nullptr;
}
