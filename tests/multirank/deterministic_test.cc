// Deterministic mode (BRAID_DETERMINISTIC=1, spec/reliability.md check 14): on inputs whose sums
// are NOT exact in float (so any change of reduction order changes bits), every reduction equals
// the rank-order fold x0 + x1 + ... + x(N-1) computed here, bit for bit, whatever algorithm
// BRAID_ALGO asks for, over shm and tcp and any channel count: results are identical across
// algorithms, transports and runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

// Rank r's element i: fractional values of varied magnitude (sums round).
float X(int r, uint64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.1 * r) * 1000.123 +
                            static_cast<double>(r) * 1e-3);
}

// The rank-order fold, in float, as the reference.
float Fold(int n, uint64_t i) {
  float acc = X(0, i);
  for (int q = 1; q < n; ++q) acc = X(q, i) + acc;
  return acc;
}

int Mismatch(const char* what, int rank, size_t i, float got, float want) {
  uint32_t g, w;
  std::memcpy(&g, &got, 4);
  std::memcpy(&w, &want, 4);
  std::fprintf(stderr,
               "[rank %d] %s: element %zu is %.9g (0x%08x), rank-order fold %.9g (0x%08x)\n", rank,
               what, i, got, g, want, w);
  return 1;
}

int CheckReductions(braidComm_t comm, int rank, int n) {
  const size_t count = 70001;  // several chunks, uneven per rank
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = X(rank, i);
  // All-reduce, out of place and in place.
  if (braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
    return 10;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != Fold(n, i)) return Mismatch("allreduce", rank, i, out[i], Fold(n, i));
  std::vector<float> io = in;
  if (braidAllReduce(io.data(), io.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
    return 11;
  if (std::memcmp(io.data(), out.data(), count * sizeof(float)) != 0)
    return Mismatch("allreduce in place", rank, 0, io[0], out[0]);
  // Reduce-scatter: block r of the fold over ranks of N blocks.
  const size_t per = 9001;
  std::vector<float> rs_in(per * n), rs_out(per);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = X(rank, i);
  if (braidReduceScatter(rs_in.data(), rs_out.data(), per, braidFloat32, braidSum, comm) !=
      braidSuccess)
    return 12;
  for (size_t i = 0; i < per; ++i)
    if (rs_out[i] != Fold(n, rank * per + i))
      return Mismatch("reducescatter", rank, i, rs_out[i], Fold(n, rank * per + i));
  // Reduce to the last rank.
  std::fill(out.begin(), out.end(), 0.0f);
  if (braidReduce(in.data(), out.data(), count, braidFloat32, braidSum, n - 1, comm) !=
      braidSuccess)
    return 13;
  if (rank == n - 1)
    for (size_t i = 0; i < count; ++i)
      if (out[i] != Fold(n, i)) return Mismatch("reduce", rank, i, out[i], Fold(n, i));
  return 0;
}

using Param = std::tuple<int, std::string, std::string>;  // ranks, transport, BRAID_ALGO
class Deterministic : public ::testing::TestWithParam<Param> {};

TEST_P(Deterministic, ReductionsEqualTheRankOrderFold) {
  auto [n, transport, algo] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TRANSPORTS", transport},
             {"BRAID_DETERMINISTIC", "1"},
             {"BRAID_NCHANNELS", algo == "ring" ? "4" : "2"}};
  if (algo != "default") opt.env.push_back({"BRAID_ALGO", algo});
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return CheckReductions(comm, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The control: without deterministic mode, the ring folds each block starting at another rank,
// so on these inputs its all-reduce differs from the rank-order fold somewhere. (If it did not,
// the test above would prove nothing.)
TEST(DeterministicControl, RingWithoutItRoundsDifferently) {
  JobOptions opt;
  opt.nranks = 5;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_DETERMINISTIC", "0"}, {"BRAID_ALGO", "ring"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int n, const braidUniqueId&) {
    const size_t count = 70001;
    std::vector<float> in(count), res(count);
    for (size_t i = 0; i < count; ++i) in[i] = X(rank, i);
    if (braidAllReduce(in.data(), res.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
      return 10;
    for (size_t i = 0; i < count; ++i)
      if (res[i] != Fold(n, i)) return 0;
    std::fprintf(stderr, "[rank %d] the ring matched the rank-order fold everywhere\n", rank);
    return 1;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Deterministic,
                         ::testing::Combine(::testing::Values(2, 3, 5),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::Values("default", "ring", "rd", "tree")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, Deterministic,
                         ::testing::Combine(::testing::Values(2, 3, 5), ::testing::Values("ucx"),
                                            ::testing::Values("default", "ring", "rd", "tree")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });
#endif

}  // namespace
}  // namespace braid_test
