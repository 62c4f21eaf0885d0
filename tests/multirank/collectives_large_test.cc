// Large counts (1000003 elements, 64 MiB buffers) for every collective over real processes and
// transports, bit-exact against references computed in the test. Labelled 'large': the
// sanitizer tier skips it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "multirank/collective_cases.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

// ---------------------------------------------------------------- large counts

using LargeParam = std::tuple<int, std::string>;
class CollectivesLarge : public ::testing::TestWithParam<LargeParam> {};

// count 1000003 (odd, not divisible by any rank count) for each element size and every op.
TEST_P(CollectivesLarge, OddMillionElementsBitExact) {
  auto [n, transport] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 400;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  // Every collective with (type, op) pairs that cover every element size and every op; the
  // full type x op product runs at small counts above. Float sum also in place.
  const std::pair<DataType, int> pairs[] = {
      {DataType::kFloat32, braidSum}, {DataType::kBfloat16, braidAvg},
      {DataType::kInt8, braidMax},    {DataType::kFloat8e4m3, kPreMul},
      {DataType::kUint64, braidProd}, {DataType::kFloat64, braidMin}};
  std::vector<Case> cases;
  for (CollKind k : kColls)
    for (auto [t, op] : pairs) {
      if (!Reduces(k) && op != braidSum && t != DataType::kInt8 && t != DataType::kFloat64)
        continue;
      cases.push_back({k, t, Reduces(k) ? op : braidSum, 1000003, false});
      if (t == DataType::kFloat32 && k != CollKind::kAllToAll)
        cases.push_back({k, t, braidSum, 1000003, true});
    }
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// A 64 MiB buffer (the collective's largest buffer) for every collective, float sum.
TEST_P(CollectivesLarge, SixtyFourMiBBitExact) {
  auto [n, transport] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 400;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    std::vector<Case> cases;
    const uint64_t elems = (64ull << 20) / sizeof(float);
    for (CollKind k : kColls) {
      bool spread =
          k == CollKind::kAllGather || k == CollKind::kReduceScatter || k == CollKind::kAllToAll;
      cases.push_back({k, DataType::kFloat32, braidSum, spread ? elems / nranks : elems, false});
    }
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesLarge,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values("shm", "tcp")),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace braid_test
