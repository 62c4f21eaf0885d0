// Every collective x type x op x in/out-of-place at small counts (0, 1, 7, 1000), over real
// processes and real transports (shm and TCP), for every algorithm the tuner can be forced to,
// bit-exact against references computed in the test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "multirank/collective_cases.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

// ---------------------------------------------------------------- the reference itself

// The references tile one period of the inputs (reference.h, TileElements): every input repeats
// with the period InputPeriod names, and a tiled buffer is the one computed element by element.
TEST(ReferenceInputs, RepeatWithTheirPeriod) {
  for (DataType t : kTypes) {
    for (int case_op : kOps) {
      const int op = case_op == kPreMul ? braidNumOps : case_op;
      const uint64_t p = InputPeriod(t, op);
      for (int r = 0; r < 9; ++r)
        for (uint64_t i = 0; i < 2 * p + 5; ++i)
          ASSERT_EQ(InputValue(t, op, r, i), InputValue(t, op, r, i + p))
              << braid::DataTypeName(t) << " op " << op << " rank " << r << " element " << i;
      // Tiled from an offset, to a length that is not a multiple of the period.
      const size_t es = braid::DataTypeSize(t);
      const uint64_t n = 7 * p + p / 2 + 1, from = 12345;
      std::vector<uint8_t> tiled(n * es), direct(n * es);
      auto store = [&](void* b, uint64_t i) { StoreExpected(t, b, i, op, 5, from + i); };
      TileElements(tiled.data(), n, es, p, store);
      for (uint64_t i = 0; i < n; ++i) store(direct.data(), i);
      ASSERT_EQ(tiled, direct) << braid::DataTypeName(t) << " op " << op;
    }
  }
}

// ---------------------------------------------------------------- every type x op, small counts

using SmallParam = std::tuple<int, std::string, std::string>;  // nranks, transport, algorithm
class CollectivesSmall : public ::testing::TestWithParam<SmallParam> {};

TEST_P(CollectivesSmall, EveryTypeOpAndPlacementIsBitExact) {
  auto [n, transport, algo] = GetParam();
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 240;
  opt.env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}};
  if (algo != "default") opt.env.push_back({"BRAID_ALGO", "all:" + algo});
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  auto cases = Matrix({0, 1, 7, 1000}, types, ops);
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::vector<std::string> AlgorithmChoices() {
  std::vector<std::string> v{"default"};
  for (const auto* a : braid::AllAlgorithms()) v.push_back(a->name());
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesSmall,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values("shm", "tcp"),
                                            ::testing::ValuesIn(AlgorithmChoices())),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });

// The small-message board forced (BRAID_ALGO=all:oneshot): every call that fits runs on it, the
// rest on the engine. shm only: the board needs every peer on shared memory.
INSTANTIATE_TEST_SUITE_P(OneShot, CollectivesSmall,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 8),
                                            ::testing::Values("shm"), ::testing::Values("oneshot")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });

#ifdef BRAID_HAVE_UCX
// UCX forced (BRAID_TRANSPORTS=ucx: every pair over UCX, here its shared memory, or its tcp
// across emulated nodes): the whole matrix in the ucx tier (ctest -L ucx, tests/CMakeLists.txt),
// a few cases (UcxQuick) in the default one.
INSTANTIATE_TEST_SUITE_P(Ucx, CollectivesSmall,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values("ucx"),
                                            ::testing::ValuesIn(AlgorithmChoices())),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });
INSTANTIATE_TEST_SUITE_P(UcxQuick, CollectivesSmall,
                         ::testing::Combine(::testing::Values(3), ::testing::Values("ucx"),
                                            ::testing::Values("default", "ring")),
                         [](const auto& info) {
                           return RanksTransportName(info) + "_" + std::get<2>(info.param);
                         });
#endif

}  // namespace
}  // namespace braid_test
