// The communicator's plan cache (braidComm::planCache, active_op.cc): a repeated call shape runs
// the schedule built for its first call, so every repeat must still be bit-exact with new data
// and new buffers, in and out of place, blocking or several in flight at once sharing one
// schedule; each distinct shape is one entry, a call of many chunks is not kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "core/runtime/comm.h"
#include "core/runtime/comm_registry.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

// Rank r's element i of call k: small integers, so sums over the ranks are exact in float.
float In(int k, int r, uint64_t i) {
  return static_cast<float>(static_cast<int64_t>((r * 11 + i * 7 + k * 5) % 500) - 250);
}

// Checks recv against the all-reduce of call k; returns 0 or prints and returns 1.
int Check(const std::vector<float>& recv, int k, int rank, int n, const char* what) {
  for (uint64_t i = 0; i < recv.size(); ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += In(k, q, i);
    if (recv[i] != want) {
      std::fprintf(stderr, "[rank %d] %s, call %d: element %llu is %g, want %g\n", rank, what, k,
                   static_cast<unsigned long long>(i), recv[i], want);
      return 1;
    }
  }
  return 0;
}

std::vector<float> Input(int k, int rank, uint64_t count) {
  std::vector<float> v(count);
  for (uint64_t i = 0; i < count; ++i) v[i] = In(k, rank, i);
  return v;
}

size_t Entries(braidComm_t comm) {
  return braid::LookupComm(comm)->planCache().size();
}

using Param = std::tuple<int, std::string>;  // ranks, transport
class PlanCache : public ::testing::TestWithParam<Param> {};

TEST_P(PlanCache, RepeatedShapesReuseOneScheduleAndStayBitExact) {
  JobOptions opt;
  opt.nranks = std::get<0>(GetParam());
  opt.timeout_s = 120;
  // The engine runs every call (the shm board would take the small ones); 4 KiB chunks, so the
  // large call below is hundreds of messages.
  opt.env = {{"BRAID_TRANSPORTS", std::get<1>(GetParam())},
             {"BRAID_ONESHOT_BYTES", "0"},
             {"BRAID_CHUNK_BYTES", "4096"},
             {"BRAID_TIMEOUT", "60"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const uint64_t count = 1001;
    const size_t before = Entries(comm);
    int k = 0;
    // The same shape three times, out of place: one entry.
    for (int rep = 0; rep < 3; ++rep, ++k) {
      std::vector<float> send = Input(k, rank, count), recv(count, -1.0f);
      CHECK_OR_FAIL(braidAllReduce(send.data(), recv.data(), count, braidFloat32, braidSum, comm) ==
                        braidSuccess,
                    "all-reduce: %s", braidGetLastError(comm));
      if (Check(recv, k, rank, n, "out of place")) return 1;
    }
    CHECK_OR_FAIL(Entries(comm) == before + 1, "%zu entries after one shape (from %zu)",
                  Entries(comm), before);
    // In place is another shape; twice.
    for (int rep = 0; rep < 2; ++rep, ++k) {
      std::vector<float> buf = Input(k, rank, count);
      CHECK_OR_FAIL(braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm) ==
                        braidSuccess,
                    "in-place all-reduce: %s", braidGetLastError(comm));
      if (Check(buf, k, rank, n, "in place")) return 1;
    }
    CHECK_OR_FAIL(Entries(comm) == before + 2, "%zu entries after two shapes", Entries(comm));
    // Four of the first shape in flight at once, sharing its schedule.
    std::vector<std::vector<float>> sends, recvs;
    std::vector<braidRequest_t> reqs(4, nullptr);
    for (int j = 0; j < 4; ++j) {
      sends.push_back(Input(k + j, rank, count));
      recvs.emplace_back(count, -1.0f);
    }
    for (int j = 0; j < 4; ++j)
      CHECK_OR_FAIL(braidIallReduce(sends[j].data(), recvs[j].data(), count, braidFloat32, braidSum,
                                    comm, &reqs[j]) == braidSuccess,
                    "iallreduce: %s", braidGetLastError(comm));
    for (int j = 3; j >= 0; --j)
      CHECK_OR_FAIL(braidWait(&reqs[j], -1) == braidSuccess, "wait: %s", braidGetLastError(comm));
    for (int j = 0; j < 4; ++j)
      if (Check(recvs[j], k + j, rank, n, "in flight")) return 1;
    k += 4;
    CHECK_OR_FAIL(Entries(comm) == before + 2, "%zu entries after repeats", Entries(comm));
    // A call of hundreds of messages runs, and is not kept.
    const uint64_t large = uint64_t{1} << 18;
    std::vector<float> send = Input(k, rank, large), recv(large, -1.0f);
    CHECK_OR_FAIL(braidAllReduce(send.data(), recv.data(), large, braidFloat32, braidSum, comm) ==
                      braidSuccess,
                  "large all-reduce: %s", braidGetLastError(comm));
    if (Check(recv, k, rank, n, "large")) return 1;
    CHECK_OR_FAIL(Entries(comm) == before + 2, "%zu entries after the large call", Entries(comm));
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PlanCache,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("shm", "tcp")),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, PlanCache,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("ucx")),
                         RanksTransportName<::testing::TestParamInfo<Param>>);
#endif

}  // namespace
}  // namespace braid_test
