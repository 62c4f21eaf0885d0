// Collectives on device buffers as schedules (algorithms/device_staging.h): the verifier proves
// the staged schedules of every algorithm and collective, whole and in pieces, in and out of
// place; the structure check keeps device memory away from everything but the staging copies;
// mutations (a copy in or out missing, a piece that does not wait for its copy) are rejected; the
// simulator prices the copies on LinkModel::staging, exactly as the closed form adds them.
#include "algorithms/device_staging.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "algorithms/lowering.h"
#include "algorithms/simulator.h"
#include "algorithms/verifier.h"

namespace braid {
namespace {

struct Case {
  const char* algo;
  CollKind kind;
};

const Case kCases[] = {
    {"ring", CollKind::kAllReduce},
    {"ring", CollKind::kReduceScatter},
    {"ring", CollKind::kAllGather},
    {"ring", CollKind::kBroadcast},
    {"ring", CollKind::kReduce},
    {"rd", CollKind::kAllReduce},
    {"tree", CollKind::kBroadcast},
    {"tree", CollKind::kReduce},
    {"bruck", CollKind::kAllGather},
    {"pairwise", CollKind::kAllToAll},
    {"rabenseifner", CollKind::kAllReduce},
};

CollArgs Args(CollKind kind, int n, uint64_t count, bool in_place, uint64_t piece_bytes,
              int root = 0) {
  CollArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  a.op = ReduceOp::kSum;
  a.count = count;
  a.nranks = n;
  a.in_place = in_place;
  a.root = root % n;
  a.memory = MemoryType::kCuda;
  a.staging_piece_bytes = piece_bytes;
  return a;
}

class StagedVerify : public ::testing::TestWithParam<Case> {};

// N = 1..9, counts that do and do not divide into pieces, whole and 16-byte pieces, in and out
// of place (all-to-all out of place only), roots 0 and the last rank.
TEST_P(StagedVerify, ProvenForEveryShape) {
  const Algorithm* algo = FindAlgorithm(GetParam().algo);
  ASSERT_NE(algo, nullptr);
  int proven = 0;
  for (int n = 1; n <= 9; ++n)
    for (uint64_t count : {0ull, 1ull, 7ull, 37ull})
      for (bool in_place : {false, true})
        for (uint64_t piece : {0ull, 16ull})
          for (int root : {0, n - 1}) {
            if (in_place && GetParam().kind == CollKind::kAllToAll) continue;
            CollArgs a = Args(GetParam().kind, n, count, in_place, piece, root);
            CollArgs host = a;
            host.memory = MemoryType::kHost;
            if (!algo->supports(host)) continue;
            const Status st = VerifySchedule(*algo, a);
            ASSERT_TRUE(st.ok()) << "n " << n << " count " << count << " in place " << in_place
                                 << " piece " << piece << " root " << root << ": " << st.message();
            ++proven;
          }
  EXPECT_GT(proven, 0);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, StagedVerify, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           return std::string(info.param.algo) + "_" +
                                  CollKindName(info.param.kind);
                         });

// The shape: channel 0 copies in, then copies out; the user's buffers are device memory and only
// staging copies name them; an all-reduce of 37 floats in 16-byte pieces has 10 pieces.
TEST(Staged, PiecesOnTheStreamChannel) {
  const CollArgs a = Args(CollKind::kAllReduce, 4, 37, false, 16);
  auto s = BuildSchedule(*FindAlgorithm("ring"), a, 1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->buffers[kSendBuf].memory, MemoryType::kCuda);
  EXPECT_EQ(s->buffers[kRecvBuf].memory, MemoryType::kCuda);
  const auto& stream = s->channels[0].steps;
  ASSERT_EQ(stream.size(), 20u);  // 10 copies in, 10 out
  for (size_t k = 0; k < 10; ++k) {
    ASSERT_EQ(stream[k].ops.size(), 1u);
    EXPECT_EQ(stream[k].ops[0].src.buffer, kSendBuf);
    EXPECT_EQ(stream[k].ops[0].src.offset, 4 * k);
    EXPECT_EQ(stream[k].ops[0].src.count, k < 9 ? 4u : 1u);
    EXPECT_TRUE(IsStagingCopy(*s, stream[k].ops[0]));
    EXPECT_EQ(stream[10 + k].ops[0].dst.buffer, kRecvBuf);
    EXPECT_FALSE(stream[10 + k].deps.empty()) << "copy out " << k << " waits for its piece";
  }
  for (size_t c = 1; c < s->channels.size(); ++c)
    for (const Step& st : s->channels[c].steps)
      for (const StepOp& op : st.ops) {
        if (ReadsSrcKind(op.kind)) {
          EXPECT_EQ(s->buffers[op.src.buffer].memory, MemoryType::kHost);
        }
        if (WritesDstKind(op.kind)) {
          EXPECT_EQ(s->buffers[op.dst.buffer].memory, MemoryType::kHost);
        }
      }
}

// A host schedule whose user buffers are declared device memory: its sends read device memory,
// which the structure check refuses, naming the op.
TEST(Staged, DeviceMemoryOutsideAStagingCopyIsRefused) {
  CollArgs host = Args(CollKind::kAllReduce, 2, 8, false, 0);
  host.memory = MemoryType::kHost;
  auto s = BuildSchedule(*FindAlgorithm("ring"), host, 0);
  ASSERT_TRUE(s.ok());
  s->buffers[kSendBuf].memory = MemoryType::kCuda;
  s->buffers[kRecvBuf].memory = MemoryType::kCuda;
  const Status st = CheckScheduleStructure(*s, 0, 2, "");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("touches device memory, which only a staging copy"),
            std::string::npos)
      << st.message();
}

// What the verifier rejects in a staged schedule.
Status VerifyMutated(const CollArgs& a, const std::function<void(RankSchedule&, int)>& mutate) {
  const Algorithm* algo = FindAlgorithm("ring");
  return VerifyLoweredSchedules(a, "ring staged", [&](int r) -> Result<RankSchedule> {
    auto s = BuildSchedule(*algo, a, r);
    if (!s.ok()) return s.status();
    mutate(*s, r);
    return s;
  });
}

TEST(StagedRejects, AMissingCopyIn) {
  const CollArgs a = Args(CollKind::kAllReduce, 3, 37, false, 16);
  const Status st = VerifyMutated(a, [](RankSchedule& s, int r) {
    if (r == 1) s.channels[0].steps[2].ops.clear();  // piece 2's input never reaches the host
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("which nothing has written"), std::string::npos) << st.message();
}

TEST(StagedRejects, AMissingCopyOut) {
  const CollArgs a = Args(CollKind::kAllReduce, 3, 37, false, 16);
  const Status st = VerifyMutated(a, [](RankSchedule& s, int r) {
    if (r == 2) s.channels[0].steps.back().ops.clear();  // the last piece's result stays behind
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("wrong result on rank 2"), std::string::npos) << st.message();
}

TEST(StagedRejects, APieceThatDoesNotWaitForItsCopy) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 37, false, 16);
  const Status st = VerifyMutated(a, [](RankSchedule& s, int r) {
    if (r != 0) return;
    // Piece 3's first step loses its edge to its copy in (channel 0): the two race.
    for (size_t c = 1; c < s.channels.size(); ++c)
      for (Step& st : s.channels[c].steps)
        std::erase_if(st.deps, [](const StepRef& d) { return d.channel == 0 && d.step == 3; });
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("this is a race"), std::string::npos) << st.message();
}

TEST(StagedRejects, AOneSidedScheduleOrAnInPlaceAllToAll) {
  CollArgs a = Args(CollKind::kAllToAll, 2, 8, true, 0);
  auto s = BuildSchedule(*FindAlgorithm("pairwise"), a, 0);
  EXPECT_FALSE(s.ok());
}

// The simulator: whole, the staged call is the host call plus one copy in and one copy out, each
// alpha + bytes / beta of LinkModel::staging; in pieces, the copies overlap the pieces, so a call
// whose copies cost as much as its collective takes less than whole, and no less than the copies
// in plus the last piece's copy out.
TEST(StagedSimulation, CopiesPricedOnTheStagingLink) {
  LinkModel m;
  m.intra = {2e-6, 8e9};
  m.staging = {10e-6, 8e9};
  const Algorithm& ring = *FindAlgorithm("ring");
  const uint64_t count = 1 << 20;  // 4 MiB of floats
  const double bytes = 4.0 * count;
  CollArgs host = Args(CollKind::kAllReduce, 4, count, false, 0);
  host.memory = MemoryType::kHost;
  auto t_host = SimulateSeconds(ring, host, m);
  ASSERT_TRUE(t_host.ok());
  auto t_whole = SimulateSeconds(ring, Args(CollKind::kAllReduce, 4, count, false, 0), m);
  ASSERT_TRUE(t_whole.ok()) << t_whole.status().message();
  const double copy = m.staging.alpha_s + bytes / m.staging.beta_bytes_s;
  EXPECT_NEAR(*t_whole, *t_host + 2 * copy, 1e-9 * *t_whole);

  auto t_pieces = SimulateSeconds(ring, Args(CollKind::kAllReduce, 4, count, false, 512 * 1024), m);
  ASSERT_TRUE(t_pieces.ok()) << t_pieces.status().message();
  EXPECT_LT(*t_pieces, *t_whole);
  const double piece_copy = m.staging.alpha_s + 512.0 * 1024 / m.staging.beta_bytes_s;
  EXPECT_GE(*t_pieces, 8 * piece_copy + piece_copy);
}

}  // namespace
}  // namespace braid
