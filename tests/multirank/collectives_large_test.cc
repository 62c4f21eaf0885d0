// Large counts (1000003 elements, 64 MiB buffers) for every collective over real processes and
// transports, bit-exact against references computed in the test. Labelled 'large': the
// sanitizer tier skips it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/builtin_algorithms.h"
#include "multirank/collective_cases.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

// ---------------------------------------------------------------- large counts

// (ranks, transport): "shm", "tcp", or "shm-engine": shm without the small-message board, so the
// engine runs every call (with more ranks than cores the board takes a large all-reduce, in
// rounds, and the engine's large shm all-reduce would go untested on such a host).
using LargeParam = std::tuple<int, std::string>;
class CollectivesLarge : public ::testing::TestWithParam<LargeParam> {};

JobOptions LargeOptions(int n, const std::string& transport) {
  JobOptions opt;
  opt.nranks = n;
  opt.timeout_s = 400;
  const bool engine_only = transport == "shm-engine";
  opt.env = {{"BRAID_TRANSPORTS", engine_only ? "shm" : transport}, {"BRAID_TIMEOUT", "120"}};
  if (engine_only) opt.env.push_back({"BRAID_ONESHOT_BYTES", "0"});
  return opt;
}

// count 1000003 (odd, not divisible by any rank count) for each element size and every op.
TEST_P(CollectivesLarge, OddMillionElementsBitExact) {
  auto [n, transport] = GetParam();
  const JobOptions opt = LargeOptions(n, transport);
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
  const JobOptions opt = LargeOptions(n, transport);
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

// Runs `cases` on n ranks over `transport` with `algo` forced (a BRAID_ALGO spec) and 4 KiB
// chunks, so that every step or round is many messages of uneven lengths; bit-exact on every rank.
void RunForcedInSmallChunks(int n, const std::string& transport, const char* algo,
                            const std::vector<Case>& cases) {
  JobOptions opt = LargeOptions(n, transport);
  opt.env.push_back({"BRAID_ALGO", algo});
  opt.env.push_back({"BRAID_CHUNK_BYTES", "4096"});
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int nranks, const braidUniqueId&) {
    return RunCases(comm, rank, nranks, cases);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

// The ring with 4 KiB chunks, so that an odd count of 100003 runs in pieces (ring.cc,
// RingPieces: tens of them per channel, of uneven lengths), every type x op x placement of the
// collectives that run in pieces (all-reduce; reduce-scatter and all-gather from 3 ranks).
class RingInPieces : public ::testing::TestWithParam<LargeParam> {};

TEST_P(RingInPieces, EveryTypeOpAndPlacementIsBitExact) {
  auto [n, transport] = GetParam();
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  std::vector<Case> cases;
  for (const Case& c : Matrix({100003}, types, ops))
    if (c.kind == CollKind::kAllReduce || c.kind == CollKind::kReduceScatter ||
        c.kind == CollKind::kAllGather)
      cases.push_back(c);
  RunForcedInSmallChunks(n, transport, "all:ring", cases);
}

// The butterfly all-gather ("rd") at the sizes it serves on one node beyond the small ones
// (up to kButterflyAllGatherMaxBytes gathered), forced, with 4 KiB chunks so every round is many
// messages: every type at the largest count it takes and at an odd count, both placements.
class ButterflyAllGather : public ::testing::TestWithParam<LargeParam> {};

TEST_P(ButterflyAllGather, EveryTypeAndPlacementUpToItsCapIsBitExact) {
  auto [n, transport] = GetParam();
  std::vector<Case> cases;
  for (DataType t : kTypes) {
    const uint64_t most = braid::kButterflyAllGatherMaxBytes / braid::DataTypeSize(t) / n;
    for (bool in_place : {false, true})
      for (uint64_t count : {most, uint64_t{20011}})
        cases.push_back({CollKind::kAllGather, t, braidSum, count, in_place});
  }
  RunForcedInSmallChunks(n, transport, "allgather:rd", cases);
}

// Rabenseifner's all-reduce forced, with 4 KiB chunks: every type x op x placement at an odd
// count (halves of uneven length in every round, many messages per round).
class RabenseifnerAllReduce : public ::testing::TestWithParam<LargeParam> {};

TEST_P(RabenseifnerAllReduce, EveryTypeOpAndPlacementIsBitExact) {
  auto [n, transport] = GetParam();
  std::vector<Case> cases;
  for (DataType t : kTypes)
    for (int op : kOps)
      for (bool in_place : {false, true})
        cases.push_back({CollKind::kAllReduce, t, op, 100003, in_place});
  RunForcedInSmallChunks(n, transport, "allreduce:rabenseifner", cases);
}

// PAT forced (pat.cc), with 4 KiB chunks: every type x op x placement of its two collectives at
// an odd count, which its 1 MiB scratch cap runs in pieces on 3 ranks and more (each piece the
// whole schedule: tens of messages of uneven lengths); float sums also at a count that takes
// pieces on 2 ranks (the reduce-scatter's slots).
class PatInPieces : public ::testing::TestWithParam<LargeParam> {};

TEST_P(PatInPieces, EveryTypeOpAndPlacementIsBitExact) {
  auto [n, transport] = GetParam();
  std::vector<DataType> types(std::begin(kTypes), std::end(kTypes));
  std::vector<int> ops(std::begin(kOps), std::end(kOps));
  std::vector<Case> cases;
  for (const Case& c : Matrix({100003}, types, ops))
    if (c.kind == CollKind::kReduceScatter || c.kind == CollKind::kAllGather) cases.push_back(c);
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllGather})
    for (bool in_place : {false, true})
      cases.push_back({k, DataType::kFloat32, braidSum, 400009, in_place});
  RunForcedInSmallChunks(n, transport, "allgather:pat;reducescatter:pat", cases);
}

constexpr auto LargeName = RanksTransportName<::testing::TestParamInfo<LargeParam>>;

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesLarge,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values("shm", "tcp", "shm-engine")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ranks, ButterflyAllGather,
                         ::testing::Combine(::testing::Values(4, 8),
                                            ::testing::Values("shm-engine", "tcp")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ranks, RabenseifnerAllReduce,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("shm-engine", "tcp")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ranks, RingInPieces,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values("shm", "tcp")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ranks, PatInPieces,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 8),
                                            ::testing::Values("shm", "tcp")),
                         LargeName);

#ifdef BRAID_HAVE_UCX
// UCX forced (collectives_test.cc says how the tiers split).
INSTANTIATE_TEST_SUITE_P(Ucx, CollectivesLarge,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values("ucx")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ucx, ButterflyAllGather,
                         ::testing::Combine(::testing::Values(4, 8), ::testing::Values("ucx")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ucx, RabenseifnerAllReduce,
                         ::testing::Combine(::testing::Values(2, 4, 8), ::testing::Values("ucx")),
                         LargeName);
INSTANTIATE_TEST_SUITE_P(Ucx, RingInPieces,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values("ucx")),
                         LargeName);
#endif

}  // namespace
}  // namespace braid_test
