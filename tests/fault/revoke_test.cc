// braidCommRevoke (issue 8): pending and later operations fail with a revoked error, peers
// blocked on the revoking rank fail promptly, and the communicator can still be shrunk and
// destroyed. The late rank is held back by a pipe, not a sleep.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Has(const char* s, const char* what) {
  return std::strstr(s, what) != nullptr;
}

class Revoke : public ::testing::TestWithParam<std::string> {};

TEST_P(Revoke, PendingAndLaterOperationsFailAndPeersFailFast) {
  int gate[2];
  ASSERT_EQ(pipe(gate), 0);
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "60"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int, const braidUniqueId&) {
    // Above the express lane, so that the call starts with its agreement: a small call on two
    // ranks sends its data with the agreement (wire_header.h), and had rank 0's data left before
    // the revoke, rank 1 would legitimately complete the same call with it.
    std::vector<float> a(1 << 18, 1.0f), b(1 << 18);
    if (rank == 0) {
      braidRequest_t req;
      if (braidIallReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm, &req) !=
          braidSuccess)
        return 1;
      auto t0 = Clock::now();
      if (braidCommRevoke(comm) != braidSuccess) return 2;
      braidResult_t rc = braidWait(&req, 10000);
      if (rc != braidErrAborted || SecondsSince(t0) > 2 ||
          !Has(braidGetLastError(comm), "revoked")) {
        std::fprintf(stderr, "[rank 0] pending op: rc=%d after %.1fs: %s\n", rc, SecondsSince(t0),
                     braidGetLastError(comm));
        return 3;
      }
      rc = braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm);
      if (rc == braidSuccess || !Has(braidGetLastError(comm), "revoked")) return 4;
      char c = 1;
      if (write(gate[1], &c, 1) != 1) return 5;
      return 0;
    }
    char c;
    if (read(gate[0], &c, 1) != 1) return 6;
    // The peer revoked: this rank's call fails within milliseconds, not at BRAID_TIMEOUT.
    auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm);
    if (rc == braidSuccess || SecondsSince(t0) > 5) {
      std::fprintf(stderr, "[rank 1] rc=%d after %.1fs: %s\n", rc, SecondsSince(t0),
                   braidGetLastError(comm));
      return 7;
    }
    return 0;
  });
  close(gate[0]);
  close(gate[1]);
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// braidCommAbort on one rank: a peer waiting on it (or calling later) fails at once, naming the
// abort as the cause, not "a stream was shut down".
TEST_P(Revoke, AbortIsNamedByThePeers) {
  JobOptions opt;
  opt.nranks = 3;
  opt.timeout_s = 90;
  opt.init = false;  // rank 2 aborts its communicator itself
  opt.env = {{"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "60"}};
  auto out = RunJob(opt, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidComm_t comm = nullptr;
    if (braidCommInitRank(&comm, n, id, rank) != braidSuccess) return 1;
    std::vector<float> a(1000, 1.0f), b(1000);
    if (rank == 2) return braidCommAbort(comm) == braidSuccess ? 0 : 2;
    auto t0 = Clock::now();
    braidResult_t rc = braidAllReduce(a.data(), b.data(), a.size(), braidFloat32, braidSum, comm);
    const double s = SecondsSince(t0);
    if (rc == braidSuccess || s > 5 || !Has(braidGetLastError(comm), "rank 2") ||
        !Has(braidGetLastError(comm), "aborted the communicator")) {
      std::fprintf(stderr, "[rank %d] rc=%d after %.1fs: %s\n", rank, rc, s,
                   braidGetLastError(comm));
      return 3;
    }
    braidCommDestroy(comm);
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// After a revoke the survivors shrink the communicator and go on.
TEST_P(Revoke, RevokedCommunicatorStillShrinks) {
  JobOptions opt;
  opt.nranks = 3;
  opt.timeout_s = 90;
  opt.env = {{"BRAID_TRANSPORTS", GetParam()}, {"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    float x = 1, y = 0;
    if (braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm) != braidSuccess || y != n) return 1;
    if (rank == n - 1) return 0;  // leaves (its communicator is destroyed by the harness)
    if (braidCommRevoke(comm) != braidSuccess) return 2;
    const int excluded = n - 1;
    braidComm_t small = nullptr;
    if (braidCommShrink(comm, &excluded, 1, &small, nullptr, 0) != braidSuccess) {
      std::fprintf(stderr, "[rank %d] shrink: %s\n", rank, braidGetLastError(comm));
      return 3;
    }
    std::vector<int> v(100, rank + 1), w(100);
    if (braidAllReduce(v.data(), w.data(), v.size(), braidInt32, braidSum, small) != braidSuccess)
      return 4;
    for (int e : w)
      if (e != 3) return 5;  // ranks 0 and 1: 1 + 2
    return braidCommDestroy(small) == braidSuccess ? 0 : 6;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Fault, Revoke, ::testing::Values("shm", "tcp"));
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, Revoke, ::testing::Values("ucx"));
#endif

TEST(RevokeArguments, NullAndDeadHandles) {
  EXPECT_EQ(braidCommRevoke(nullptr), braidErrInvalidArgument);
  braidUniqueId id;
  ASSERT_EQ(braidGetUniqueId(&id), braidSuccess);
  braidComm_t comm = nullptr;
  ASSERT_EQ(braidCommInitRank(&comm, 1, id, 0), braidSuccess);
  ASSERT_EQ(braidCommDestroy(comm), braidSuccess);
  EXPECT_EQ(braidCommRevoke(comm), braidErrInvalidUsage);
  EXPECT_TRUE(Has(braidGetLastError(nullptr), "not live"));
}

}  // namespace
}  // namespace braid_test
