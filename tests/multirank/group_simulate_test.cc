// braidGroupSimulateEnd: the group's calls are estimated by the cost model and discarded. No
// data moves, requests report that their call did not run, and the ranks stay in step for the
// next real collective; the error paths leave the thread's group state as it was.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

constexpr float kSentinel = -7.0f;

bool Untouched(const std::vector<float>& v) {
  for (float x : v)
    if (x != kSentinel) return false;
  return true;
}

// Everything a rank checks; returns 0 on success.
int SimulateAndThenRun(braidComm_t comm, int rank, int nranks) {
  const size_t count = 1 << 18;
  std::vector<float> in(4 * count), out(4 * count, kSentinel);
  for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(rank + j % 3);

  // An all-reduce (blocking) and a non-blocking one: estimated, not run.
  auto simulate = [&](size_t n, braidRequest_t* req, double* seconds) {
    if (braidGroupStart() != braidSuccess) return braidErrInternal;
    braidResult_t r = braidAllReduce(in.data(), out.data(), n, braidFloat32, braidSum, comm);
    if (r == braidSuccess && req)
      r = braidIallReduce(in.data(), out.data(), n, braidFloat32, braidSum, comm, req);
    braidResult_t end = braidGroupSimulateEnd(seconds);
    return r != braidSuccess ? r : end;
  };
  double t1 = 0, t4 = 0, t1_twice = 0;
  braidRequest_t req = nullptr;
  CHECK_OR_FAIL(simulate(count, nullptr, &t1) == braidSuccess, "simulate");
  CHECK_OR_FAIL(simulate(4 * count, nullptr, &t4) == braidSuccess, "simulate 4x");
  CHECK_OR_FAIL(simulate(count, &req, &t1_twice) == braidSuccess, "simulate with a request");
  CHECK_OR_FAIL(t1 > 0 && t4 > t1, "estimates %g s and %g s (4x the count)", t1, t4);
  CHECK_OR_FAIL(t1_twice > 1.99 * t1 && t1_twice < 2.01 * t1, "two calls %g s, one %g s", t1_twice,
                t1);
  CHECK_OR_FAIL(Untouched(out), "the receive buffer was written");
  CHECK_OR_FAIL(braidWait(&req, 10000) == braidErrInvalidUsage, "the discarded request");
  CHECK_OR_FAIL(
      std::string(braidGetLastError(nullptr)).find("braidGroupSimulateEnd") != std::string::npos,
      "the discarded request's error names braidGroupSimulateEnd");

  // Sends and receives around the ring: alpha + bytes / beta per message.
  double tp = 0;
  CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "group start");
  CHECK_OR_FAIL(
      braidSend(in.data(), count, braidFloat32, (rank + 1) % nranks, comm) == braidSuccess, "send");
  CHECK_OR_FAIL(braidRecv(out.data(), count, braidFloat32, (rank + nranks - 1) % nranks, comm) ==
                    braidSuccess,
                "recv");
  CHECK_OR_FAIL(braidGroupSimulateEnd(&tp) == braidSuccess, "simulate p2p");
  CHECK_OR_FAIL(tp > 0 && Untouched(out), "p2p estimate %g s, receive buffer untouched", tp);

  // An empty group costs nothing.
  double t0 = -1;
  CHECK_OR_FAIL(
      braidGroupStart() == braidSuccess && braidGroupSimulateEnd(&t0) == braidSuccess && t0 == 0,
      "empty group: %g s", t0);

  // Nothing ran, so every rank is at the same next collective: a real one agrees and is exact.
  CHECK_OR_FAIL(
      braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm) == braidSuccess,
      "all-reduce after simulation");
  for (size_t j = 0; j < count; ++j) {
    float want = 0;
    for (int q = 0; q < nranks; ++q) want += static_cast<float>(q + j % 3);
    CHECK_OR_FAIL(out[j] == want, "[%zu] = %g, want %g", j, out[j], want);
  }
  return 0;
}

TEST(GroupSimulateEnd, EstimatesWithoutRunning) {
  for (const char* transport : {"shm", "tcp"}) {
    JobOptions opt;
    opt.nranks = 4;
    opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
    auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
      return SimulateAndThenRun(comm, rank, nranks);
    });
    EXPECT_TRUE(AllSucceeded(out)) << transport << ": " << DescribeOutcomes(out);
  }
}

// With the ring forced and no call agreement, the estimate is the ring's: about proportional to
// the bytes once they dwarf the latencies.
TEST(GroupSimulateEnd, ForcedRingScalesWithTheBytes) {
  JobOptions opt;
  opt.nranks = 4;
  opt.env = {
      {"BRAID_ALGO", "allreduce:ring"}, {"BRAID_VERIFY_CALLS", "0"}, {"BRAID_TIMEOUT", "30"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int, const braidUniqueId&) {
    std::vector<float> buf(size_t{1} << 22, kSentinel);
    double t[2] = {};
    const size_t counts[2] = {size_t{1} << 20, size_t{1} << 22};
    for (int k = 0; k < 2; ++k) {
      CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "group start");
      CHECK_OR_FAIL(braidAllReduce(buf.data(), buf.data(), counts[k], braidFloat32, braidSum,
                                   comm) == braidSuccess,
                    "record");
      CHECK_OR_FAIL(braidGroupSimulateEnd(&t[k]) == braidSuccess, "simulate");
    }
    CHECK_OR_FAIL(t[1] > 3.5 * t[0] && t[1] < 4.5 * t[0], "%g s for 4x the count of %g s", t[1],
                  t[0]);
    CHECK_OR_FAIL(Untouched(buf), "the in-place buffer was written");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The estimate prices the call agreement only where it runs as rounds of its own: a small
// all-reduce on 4 ranks carries it in its data (wire_header.h) and costs the same with
// BRAID_VERIFY_CALLS on and off; a small broadcast (a tree: no butterfly) costs the agreement's
// rounds more with it on. Rank 0 of each job writes its estimates to a file.
TEST(GroupSimulateEnd, PricesTheAgreementWhereItRuns) {
  const std::string path = ::testing::TempDir() + "braid_simulate_agreement_";
  double t[2][2] = {};  // [verify][all-reduce, broadcast]
  for (int verify : {0, 1}) {
    JobOptions opt;
    opt.nranks = 4;
    // The constant link model: a calibration at init would measure each job's links anew.
    opt.env = {{"BRAID_TRANSPORTS", "tcp"},
               {"BRAID_VERIFY_CALLS", verify ? "1" : "0"},
               {"BRAID_LINK_CALIBRATION", "0"},
               {"BRAID_TIMEOUT", "30"}};
    const std::string file = path + std::to_string(verify);
    auto out = RunJob(opt, [&](braidComm_t comm, int rank, int, const braidUniqueId&) {
      std::vector<float> buf(64, kSentinel);
      double e[2] = {};
      for (int k = 0; k < 2; ++k) {
        CHECK_OR_FAIL(braidGroupStart() == braidSuccess, "group start");
        const braidResult_t r =
            k == 0
                ? braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm)
                : braidBroadcast(buf.data(), buf.data(), buf.size(), braidFloat32, 0, comm);
        CHECK_OR_FAIL(r == braidSuccess, "record");
        CHECK_OR_FAIL(braidGroupSimulateEnd(&e[k]) == braidSuccess, "simulate");
      }
      if (rank == 0) {
        FILE* f = std::fopen(file.c_str(), "w");
        CHECK_OR_FAIL(f && std::fprintf(f, "%.17g %.17g\n", e[0], e[1]) > 0, "write %s",
                      file.c_str());
        std::fclose(f);
      }
      return 0;
    });
    ASSERT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
    FILE* f = std::fopen(file.c_str(), "r");
    ASSERT_NE(f, nullptr) << file;
    ASSERT_EQ(std::fscanf(f, "%lf %lf", &t[verify][0], &t[verify][1]), 2);
    std::fclose(f);
    std::remove(file.c_str());
  }
  EXPECT_GT(t[0][0], 0);
  EXPECT_EQ(t[1][0], t[0][0]) << "a small all-reduce on 4 ranks carries its agreement";
  EXPECT_GT(t[1][1], t[0][1]) << "a broadcast runs the agreement first";
}

// Error paths need no communicator: they concern the calling thread's group.
TEST(GroupSimulateEnd, ErrorPaths) {
  double s = -1;
  EXPECT_EQ(braidGroupSimulateEnd(&s), braidErrInvalidUsage);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("braidGroupStart"), std::string::npos)
      << braidGetLastError(nullptr);
  ASSERT_EQ(braidGroupStart(), braidSuccess);
  EXPECT_EQ(braidGroupSimulateEnd(nullptr), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("seconds is NULL"), std::string::npos)
      << braidGetLastError(nullptr);
  EXPECT_EQ(braidGroupEnd(), braidSuccess);  // the NULL call left the group open
  EXPECT_EQ(braidGroupEnd(), braidErrInvalidUsage);

  // Nested: the inner end only closes its level.
  ASSERT_EQ(braidGroupStart(), braidSuccess);
  ASSERT_EQ(braidGroupStart(), braidSuccess);
  s = -1;
  EXPECT_EQ(braidGroupSimulateEnd(&s), braidSuccess);
  EXPECT_EQ(s, 0);
  s = -1;
  EXPECT_EQ(braidGroupSimulateEnd(&s), braidSuccess);
  EXPECT_EQ(s, 0);
  EXPECT_EQ(braidGroupSimulateEnd(&s), braidErrInvalidUsage);
}

}  // namespace
}  // namespace braid_test
