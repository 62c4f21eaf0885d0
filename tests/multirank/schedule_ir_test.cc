// IR v2 in the engine: "qtest" (src/algorithms/test_codec_allreduce.cc) runs an all-reduce
// through quantize and dequantize-reduce steps with the lossless test codec, kUint8 scratch
// buffers of frames and dependency edges between channels. Its result must equal the rank-order
// fold x0 + x1 + ... computed here, bit for bit (inputs whose float sums round, so a wrong order,
// a skipped decode or a frame read before it arrived shows), over shm and tcp, 1 and 4 channels,
// in and out of place, at sizes on the express lane and above it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "multirank/harness.h"

namespace braid_test {
namespace {

float X(int r, uint64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.1 * r) * 1000.123 +
                            static_cast<double>(r) * 1e-3);
}

float Fold(int n, uint64_t i) {
  float acc = X(0, i);
  for (int q = 1; q < n; ++q) acc = acc + X(q, i);
  return acc;
}

int Check(braidComm_t comm, int rank, int n) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{70001}}) {
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = X(rank, i);
    if (braidAllReduce(in.data(), out.data(), count, braidFloat32, braidSum, comm) !=
        braidSuccess) {
      std::fprintf(stderr, "[rank %d] allreduce: %s\n", rank, braidGetLastError(comm));
      return 10;
    }
    for (size_t i = 0; i < count; ++i)
      if (const float want = Fold(n, i); std::memcmp(&out[i], &want, 4) != 0) {
        std::fprintf(stderr, "[rank %d] count %zu: element %zu is %.9g, the fold %.9g\n", rank,
                     count, i, out[i], Fold(n, i));
        return 11;
      }
    std::vector<float> io = in;
    if (braidAllReduce(io.data(), io.data(), count, braidFloat32, braidSum, comm) != braidSuccess)
      return 12;
    if (std::memcmp(io.data(), out.data(), count * sizeof(float)) != 0) {
      std::fprintf(stderr, "[rank %d] count %zu: in place differs from out of place\n", rank,
                   count);
      return 13;
    }
  }
  // Max through the same steps (the dequantize-reduce applies the call's operator).
  const size_t count = 4097;
  std::vector<float> in(count), out(count);
  for (size_t i = 0; i < count; ++i) in[i] = X(rank, i);
  if (braidAllReduce(in.data(), out.data(), count, braidFloat32, braidMax, comm) != braidSuccess)
    return 14;
  for (size_t i = 0; i < count; ++i) {
    float want = X(0, i);
    for (int q = 1; q < n; ++q) want = std::max(want, X(q, i));
    if (out[i] != want) return 15;
  }
  return 0;
}

using Param = std::tuple<int, std::string, std::string>;  // ranks, transport, channels
class ScheduleIr : public ::testing::TestWithParam<Param> {};

TEST_P(ScheduleIr, TestCodecAllReduceEqualsTheRankOrderFold) {
  auto [n, transport, channels] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 120;
  opt.env = {{"BRAID_TRANSPORTS", transport},
             {"BRAID_ALGO", "qtest"},
             {"BRAID_NCHANNELS", channels},
             {"BRAID_CHUNK_BYTES", "16K"}};
  auto out = RunJob(opt, [](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return Check(comm, rank, nranks);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ScheduleIr,
                         ::testing::Combine(::testing::Values(2, 3, 5),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::Values("1", "4")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_ch" + std::get<2>(info.param);
                         });
#ifdef BRAID_HAVE_UCX
INSTANTIATE_TEST_SUITE_P(Ucx, ScheduleIr,
                         ::testing::Combine(::testing::Values(2, 3, 5), ::testing::Values("ucx"),
                                            ::testing::Values("1", "4")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_ch" + std::get<2>(info.param);
                         });
#endif

}  // namespace
}  // namespace braid_test
