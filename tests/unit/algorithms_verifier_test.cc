// Every built-in algorithm, every collective it serves, N = 1..64, in and out of place, odd
// counts, several channels and chunk sizes, proven correct by the symbolic verifier; and
// hand-made broken schedules that the verifier must reject with a useful message.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/codec.h"
#include "algorithms/lowering.h"
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
    {"dissemination", CollKind::kBarrier},
    {"qtest", CollKind::kAllReduce},
    {"rd", CollKind::kAllGather},
    {"rd", CollKind::kReduceScatter},
    {"rabenseifner", CollKind::kAllReduce},
    {"pat", CollKind::kAllGather},
    {"pat", CollKind::kReduceScatter},
};

constexpr DataType kTypes[] = {DataType::kInt8, DataType::kFloat32, DataType::kFloat64};
constexpr int kChannels[] = {1, 2, 4};
constexpr uint64_t kSmallChunk = 16;  // bytes: 2..16 elements per message, many slices
constexpr uint64_t kDefaultChunk = 512 * 1024;

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.algo) + "_" + CollKindName(info.param.kind);
}

class AlgorithmVerify : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    algo_ = FindAlgorithm(GetParam().algo);
    ASSERT_NE(algo_, nullptr);
  }

  // Verifies one configuration and checks the schedule's shape: channels within nchannels,
  // messages within chunk_bytes, no zero-count messages except for the barrier.
  void Check(int n, uint64_t count, bool in_place, int nch, DataType dt, uint64_t chunk, int root) {
    CollArgs a;
    a.kind = GetParam().kind;
    a.dtype = dt;
    a.op = ReduceOp::kSum;
    a.count = a.kind == CollKind::kBarrier ? 0 : count;
    a.root = root;
    a.nranks = n;
    a.in_place = in_place;
    a.nchannels = nch;
    a.chunk_bytes = chunk;
    if (!algo_->supports(a)) return;
    ++verified_;
    const Status st = VerifySchedule(*algo_, a);
    ASSERT_TRUE(st.ok()) << st.message();
    if (n > 8 && count > 8) return;  // the shape lint is cheap but not free; small cases suffice
    for (int r = 0; r < n; ++r) {
      auto s = BuildSchedule(*algo_, a, r);
      ASSERT_TRUE(s.ok());
      ASSERT_LE(static_cast<int>(s->channels.size()), nch);
      for (const Channel& ch : s->channels)
        for (const Step& step : ch.steps)
          for (const StepOp& op : step.ops) {
            if (op.kind != StepOpKind::kSend) continue;
            const uint64_t elsize = DataTypeSize(s->buffers[op.src.buffer].dtype);
            ASSERT_LE(op.src.count, std::max<uint64_t>(chunk / elsize, 1))
                << "rank " << r << " sends more than a chunk";
            if (a.kind != CollKind::kBarrier) {
              ASSERT_GT(op.src.count, 0u) << "zero-count send on rank " << r;
            }
          }
    }
  }

  const Algorithm* algo_ = nullptr;
  int verified_ = 0;
};

// Small counts (0, 1, 7, N-1, N, N+1) on every N from 1 to 64. Up to N = 12 the full product of
// in-place x channels x types x chunk sizes; above, each (N, count) takes one (in-place,
// channels, type, chunk) combination in rotation, so every combination still meets every region
// of N (and the test stays fast under sanitizers).
TEST_P(AlgorithmVerify, SmallCountsAllRankCounts) {
  int rot = 0;
  for (int n = 1; n <= 64; ++n) {
    const uint64_t counts[] = {0,
                               1,
                               7,
                               static_cast<uint64_t>(n - 1),
                               static_cast<uint64_t>(n),
                               static_cast<uint64_t>(n + 1)};
    for (uint64_t count : counts) {
      if (n > 12) {
        ++rot;
        const bool in_place = rot % 2;
        const uint64_t chunk = (rot / 2) % 2 ? kSmallChunk : kDefaultChunk;
        const int root = static_cast<int>((count * 7 + rot) % n);
        Check(n, count, in_place, kChannels[(rot / 4) % 3], kTypes[(rot / 12) % 3], chunk, root);
        if (HasFatalFailure()) return;
        continue;
      }
      for (bool in_place : {false, true})
        for (uint64_t chunk : {kDefaultChunk, kSmallChunk})
          for (int nch : kChannels)
            for (DataType dt : kTypes) {
              const int root = static_cast<int>((count * 7 + (in_place ? 3 : 0) + nch) % n);
              Check(n, count, in_place, nch, dt, chunk, root);
              if (HasFatalFailure()) return;
            }
    }
  }
  EXPECT_GT(verified_, 0);
}

// count 1000 (several blocks per rank, uneven) with the default chunk and with a small chunk
// (hundreds of slices), on a spread of N including powers of two and their neighbours.
TEST_P(AlgorithmVerify, LargerCountsSampledRankCounts) {
  const bool per_rank_blocks = GetParam().kind == CollKind::kAllGather ||
                               GetParam().kind == CollKind::kReduceScatter ||
                               GetParam().kind == CollKind::kAllToAll;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64}) {
    // Per-rank-block collectives move N*count elements per rank; keep those within reason.
    const uint64_t count = per_rank_blocks && n > 17 ? 129 : 1000;
    for (bool in_place : {false, true})
      for (int nch : kChannels)
        for (DataType dt : kTypes) {
          const uint64_t chunk = (nch + static_cast<int>(dt)) % 2 ? kSmallChunk * 4 : kDefaultChunk;
          Check(n, count, in_place, nch, dt, chunk, n / 3);
          if (HasFatalFailure()) return;
          if (n > 17) break;  // one type per channel count for the big groups
        }
  }
  // A long pipeline: many chunks through every channel.
  for (int n : {2, 3, 6, 8}) {
    Check(n, 5003, false, 4, DataType::kFloat32, 64, n - 1);
    if (HasFatalFailure()) return;
    Check(n, 5003, true, 2, DataType::kInt8, 100, 0);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(verified_, 0);
}

// The reductions lowered with a pre-multiplied sum (a scale step first, which every other
// channel's first step waits on) and with AVG (a divide step after every channel's last step),
// in and out of place, over 1..4 channels: the edges are what makes them race-free.
class LoweredReductionVerify : public AlgorithmVerify {};

TEST_P(LoweredReductionVerify, PreMultipliedSumAndAvg) {
  const CollKind kind = GetParam().kind;
  for (int n : {1, 2, 3, 5, 8, 13})
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{100}})
      for (bool in_place : {false, true})
        for (int nch : kChannels)
          for (int variant = 0; variant < 2; ++variant) {
            CollArgs a;
            a.kind = kind;
            a.dtype = DataType::kFloat32;
            a.count = count;
            a.root = static_cast<int>(count % n);
            a.nranks = n;
            a.in_place = in_place;
            a.nchannels = nch;
            a.chunk_bytes = kSmallChunk;
            (variant == 0 ? a.premul : a.avg) = true;
            if (!algo_->supports(a)) continue;
            const Status st = VerifySchedule(*algo_, a);
            ASSERT_TRUE(st.ok()) << st.message();
          }
}

INSTANTIATE_TEST_SUITE_P(Builtin, AlgorithmVerify, ::testing::ValuesIn(kCases), CaseName);

const Case kReductionCases[] = {
    {"ring", CollKind::kAllReduce},
    {"ring", CollKind::kReduceScatter},
    {"ring", CollKind::kReduce},
    {"rd", CollKind::kAllReduce},
    {"tree", CollKind::kReduce},
    {"ordered", CollKind::kAllReduce},
    {"ordered", CollKind::kReduceScatter},
    {"ordered", CollKind::kReduce},
    {"qtest", CollKind::kAllReduce},
    {"rd", CollKind::kReduceScatter},
    {"rabenseifner", CollKind::kAllReduce},
    {"pat", CollKind::kReduceScatter},
};
INSTANTIATE_TEST_SUITE_P(Builtin, LoweredReductionVerify, ::testing::ValuesIn(kReductionCases),
                         CaseName);

TEST(AlgorithmRegistry, NamesAndLookup) {
  std::vector<std::string> names;
  for (const Algorithm* a : AllAlgorithms()) names.push_back(a->name());
  EXPECT_EQ(names, (std::vector<std::string>{"ring", "rd", "rabenseifner", "tree", "bruck", "pat",
                                             "pairwise", "dissemination", "ordered"}));
  EXPECT_EQ(FindAlgorithm("ring"), AllAlgorithms()[0]);
  EXPECT_EQ(FindAlgorithm("nope"), nullptr);
  EXPECT_STREQ(CollKindName(CollKind::kReduceScatter), "reducescatter");
  EXPECT_STREQ(StepOpKindName(StepOpKind::kRecvReduce), "recv-reduce");
}

TEST(AlgorithmRegistry, EveryCollectiveHasAnAlgorithm) {
  for (CollKind k :
       {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather, CollKind::kBroadcast,
        CollKind::kReduce, CollKind::kAllToAll, CollKind::kBarrier}) {
    CollArgs a;
    a.kind = k;
    a.count = 10;
    a.nranks = 5;
    bool any = false;
    for (const Algorithm* algo : AllAlgorithms()) any |= algo->supports(a);
    EXPECT_TRUE(any) << CollKindName(k);
  }
}

TEST(AlgorithmRegistry, PairwiseRefusesInPlace) {
  CollArgs a;
  a.kind = CollKind::kAllToAll;
  a.count = 4;
  a.nranks = 3;
  a.in_place = true;
  EXPECT_FALSE(FindAlgorithm("pairwise")->supports(a));
  EXPECT_FALSE(FindAlgorithm("pairwise")->build(a, 0).ok());
}

TEST(AlgorithmRegistry, BuildRejectsBadArguments) {
  CollArgs a;
  a.kind = CollKind::kBroadcast;
  a.count = 4;
  a.nranks = 3;
  a.root = 3;
  auto s = FindAlgorithm("tree")->build(a, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("root 3"), std::string::npos) << s.status().message();
  a.root = 0;
  EXPECT_FALSE(FindAlgorithm("tree")->build(a, 3).ok());
  EXPECT_FALSE(FindAlgorithm("ring")->build(a, -1).ok());
}

// ------------------------------------------------------------------ broken schedules

// An "algorithm" whose schedules are written by hand in the test.
class HandMade final : public Algorithm {
 public:
  HandMade(CollKind kind, std::function<RankSchedule(int)> build)
      : kind_(kind), build_(std::move(build)) {}
  const char* name() const override { return "handmade"; }
  bool supports(const CollArgs& a) const override { return a.kind == kind_; }
  Result<RankSchedule> build(const CollArgs& a, int rank) const override { return build_(rank); }

 private:
  CollKind kind_;
  std::function<RankSchedule(int)> build_;
};

StepOp Send(int peer, uint16_t buf, uint64_t off, uint64_t n) {
  return StepOp{StepOpKind::kSend, peer, Slice{buf, off, n}, {}};
}
StepOp Recv(int peer, uint16_t buf, uint64_t off, uint64_t n) {
  return StepOp{StepOpKind::kRecv, peer, {}, Slice{buf, off, n}};
}
StepOp RecvReduce(int peer, Slice src, Slice dst) {
  return StepOp{StepOpKind::kRecvReduce, peer, src, dst};
}
StepOp Copy(Slice src, Slice dst) {
  return StepOp{StepOpKind::kCopy, -1, src, dst};
}
StepOp LocalReduce(Slice src, Slice dst) {
  return StepOp{StepOpKind::kReduce, -1, src, dst};
}

// A schedule of one channel whose steps hold the given ops.
RankSchedule OneChannel(std::vector<std::vector<StepOp>> steps, uint64_t scratch = 0) {
  RankSchedule s;
  s.channels.resize(1);
  for (auto& ops : steps) s.channels[0].steps.push_back(Step{std::move(ops), {}});
  s.scratch_count = scratch;
  return s;
}

CollArgs Args(CollKind kind, int n, uint64_t count, bool in_place = false, int nch = 1) {
  CollArgs a;
  a.kind = kind;
  a.nranks = n;
  a.count = count;
  a.in_place = in_place;
  a.nchannels = nch;
  return a;
}

// Expects rejection with a message containing every one of `needles`.
void ExpectRejected(CollKind kind, const CollArgs& args, std::function<RankSchedule(int)> build,
                    std::vector<std::string> needles) {
  HandMade algo(kind, std::move(build));
  const Status st = VerifySchedule(algo, args);
  ASSERT_FALSE(st.ok()) << "verifier accepted a broken schedule";
  EXPECT_EQ(st.cls(), ErrorClass::kInternal);
  for (const auto& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

// A correct 2-rank all-reduce of one element: exchange inputs, reduce into recvbuf.
RankSchedule GoodPairAllReduce(int r) {
  return OneChannel(
      {{Send(1 - r, kSendBuf, 0, 1), RecvReduce(1 - r, {kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
}

TEST(VerifierRejects, AcceptsTheHandMadeReference) {
  HandMade algo(CollKind::kAllReduce, GoodPairAllReduce);
  const Status st = VerifySchedule(algo, Args(CollKind::kAllReduce, 2, 1));
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(VerifierRejects, MissingReceive) {
  ExpectRejected(
      CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
      [](int r) {
        if (r == 0) return GoodPairAllReduce(0);
        return OneChannel({{Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
      },
      {"rank 0 channel 0 step 0", "send to rank 1", "never matched", "rank 1 has finished"});
}

TEST(VerifierRejects, DoubleContribution) {
  ExpectRejected(
      CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
      [](int r) {
        RankSchedule s = GoodPairAllReduce(r);
        if (r == 1)
          s.channels[0].steps.push_back(Step{{LocalReduce({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
        return s;
      },
      {"rank 1 channel 0 step 1", "double contribution", "ranks {1}", "recvbuf[0]"});
}

TEST(VerifierRejects, CountMismatch) {
  ExpectRejected(CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 2),
                 [](int r) {
                   if (r == 0) return OneChannel({{Send(1, kSendBuf, 0, 2)}});
                   return OneChannel({{Recv(0, kRecvBuf, 0, 1)}});
                 },
                 {"count mismatch", "rank 0 channel 0 step 0 op 0 (send to rank 1, 2 elements)",
                  "rank 1 channel 0 step 0 op 0 (recv from rank 0, 1 elements)"});
}

TEST(VerifierRejects, ReadOfUnwrittenScratch) {
  ExpectRejected(CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
                 [](int r) {
                   return OneChannel({{Send(1 - r, kScratchBuf, 0, 1),
                                       RecvReduce(1 - r, {kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}},
                                     1);
                 },
                 {"reads scratch[0], which nothing has written"});
}

TEST(VerifierRejects, Deadlock) {
  // Both ranks wait for the other before sending.
  ExpectRejected(
      CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
      [](int r) {
        return OneChannel({{RecvReduce(1 - r, {kSendBuf, 0, 1}, {kRecvBuf, 0, 1})},
                           {Send(1 - r, kSendBuf, 0, 1)}});
      },
      {"deadlock", "rank 0 channel 0 step 0", "recv-reduce from rank 1", "rank 1 waits at step 0"});
}

TEST(VerifierRejects, OutOfBoundsSlice) {
  ExpectRejected(
      CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
      [](int r) {
        return OneChannel(
            {{Send(1 - r, kSendBuf, 0, 2), RecvReduce(1 - r, {kSendBuf, 0, 2}, {kRecvBuf, 0, 2})}});
      },
      {"rank 0 channel 0 step 0 op 0", "slice [0, 2) of sendbuf is out of bounds (size 1)"});
}

TEST(VerifierRejects, WrongFinalContents) {
  // All-gather that forgets the own block.
  ExpectRejected(
      CollKind::kAllGather, Args(CollKind::kAllGather, 2, 3),
      [](int r) {
        return OneChannel({{Send(1 - r, kSendBuf, 0, 3), Recv(1 - r, kRecvBuf, (1 - r) * 3, 3)}});
      },
      {"wrong result on rank 0", "recvbuf[0] holds never-written memory",
       "expected element 0 of ranks {0}"});
}

TEST(VerifierRejects, DifferentAssociationAcrossRanks) {
  // Everyone gathers all inputs, then each rank sums them in its own order: (x0+x1)+x2 on rank
  // 0 but (x1+x2)+x0 on rank 1 -- right contributions, not bitwise reproducible.
  ExpectRejected(CollKind::kAllReduce, Args(CollKind::kAllReduce, 3, 1),
                 [](int r) {
                   const int a = (r + 1) % 3, b = (r + 2) % 3;
                   std::vector<StepOp> exchange = {Send(a, kSendBuf, 0, 1), Send(b, kSendBuf, 0, 1),
                                                   Recv(a, kScratchBuf, a, 1),
                                                   Recv(b, kScratchBuf, b, 1)};
                   std::vector<std::vector<StepOp>> steps = {
                       exchange, {Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}};
                   steps.push_back(
                       {LocalReduce({kScratchBuf, static_cast<uint64_t>(a), 1}, {kRecvBuf, 0, 1})});
                   steps.push_back(
                       {LocalReduce({kScratchBuf, static_cast<uint64_t>(b), 1}, {kRecvBuf, 0, 1})});
                   return OneChannel(steps, 3);
                 },
                 {"different association orders", "bitwise"});
}

TEST(VerifierRejects, RaceInsideAStep) {
  // Rank 0 forwards recvbuf[0] to rank 1 while receiving into it from rank 2.
  ExpectRejected(CollKind::kBroadcast, Args(CollKind::kBroadcast, 3, 1),
                 [](int r) {
                   if (r == 0)
                     return OneChannel({{Send(1, kSendBuf, 0, 1), Send(2, kSendBuf, 0, 1)},
                                        {Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
                   if (r == 1) return OneChannel({{Recv(0, kRecvBuf, 0, 1)}});
                   return OneChannel({{Recv(0, kRecvBuf, 0, 1), Send(0, kRecvBuf, 0, 1)}});
                 },
                 {"rank 2 channel 0 step 0", "overlaps op 0", "race"});
}

TEST(VerifierRejects, RaceBetweenChannels) {
  // Channel 0 writes recvbuf[0] on rank 1 while channel 1 sends it on.
  ExpectRejected(CollKind::kBroadcast, Args(CollKind::kBroadcast, 3, 1, false, 2),
                 [](int r) {
                   RankSchedule s;
                   s.channels.resize(2);
                   if (r == 0) {
                     s.channels[0].steps.push_back(
                         Step{{Send(1, kSendBuf, 0, 1), Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
                   } else if (r == 1) {
                     s.channels[0].steps.push_back(Step{{Recv(0, kRecvBuf, 0, 1)}});
                     s.channels[1].steps.push_back(Step{{Send(2, kRecvBuf, 0, 1)}});
                   } else {
                     s.channels[1].steps.push_back(Step{{Recv(1, kRecvBuf, 0, 1)}});
                   }
                   return s;
                 },
                 {"rank 1 channel 1", "channel 0 also uses", "race"});
}

TEST(VerifierRejects, WriteToSendBuffer) {
  ExpectRejected(CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 1),
                 [](int r) {
                   return OneChannel({{Send(1 - r, kSendBuf, 0, 1),
                                       RecvReduce(1 - r, {kSendBuf, 0, 1}, {kSendBuf, 0, 1})}});
                 },
                 {"writes sendbuf, which is the read-only input"});
}

TEST(VerifierRejects, SendBufferReferencedByInPlaceAllGather) {
  ExpectRejected(
      CollKind::kAllGather, Args(CollKind::kAllGather, 2, 1, true),
      [](int r) {
        return OneChannel({{Send(1 - r, kSendBuf, 0, 1), Recv(1 - r, kRecvBuf, 1 - r, 1)}});
      },
      {"references sendbuf", "in-place all-gather"});
}

TEST(VerifierRejects, ReduceWritingNonRootRecvBuffer) {
  ExpectRejected(
      CollKind::kReduce, Args(CollKind::kReduce, 2, 1),
      [](int r) {
        if (r == 1)
          return OneChannel({{Send(0, kSendBuf, 0, 1), Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
        return OneChannel({{RecvReduce(1, {kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
      },
      {"rank 1", "writes recvbuf, which is written on the root only"});
}

TEST(VerifierRejects, BarrierThatDoesNotHearFromEveryone) {
  // One ring round: rank r hears from r-1 only.
  ExpectRejected(
      CollKind::kBarrier, Args(CollKind::kBarrier, 3, 0),
      [](int r) {
        return OneChannel({{Send((r + 1) % 3, kSendBuf, 0, 0), Recv((r + 2) % 3, kRecvBuf, 0, 0)}});
      },
      {"can leave the barrier without hearing from ranks"});
}

TEST(VerifierRejects, MisalignedReduction) {
  // Two one-element messages, folded into the wrong places.
  ExpectRejected(CollKind::kAllReduce, Args(CollKind::kAllReduce, 2, 2),
                 [](int r) {
                   return OneChannel({{Send(1 - r, kSendBuf, 0, 1), Send(1 - r, kSendBuf, 1, 1),
                                       RecvReduce(1 - r, {kSendBuf, 1, 1}, {kRecvBuf, 0, 1}),
                                       RecvReduce(1 - r, {kSendBuf, 0, 1}, {kRecvBuf, 1, 1})}});
                 },
                 {"combines input element 1 with element 0", "misaligned"});
}

// ------------------------------------------------------------------ IR v2: mutations
// Each test takes a correct lowered schedule, checks that the verifier accepts it, then breaks it
// one way and expects a rejection naming the defect.

// Every rank's lowered schedule of `algo` for `args`, mutated by `mutate` (rank, schedule).
ScheduleSource Mutated(const Algorithm& algo, const CollArgs& args,
                       std::function<void(int, RankSchedule&)> mutate) {
  return [&algo, args, mutate](int r) -> Result<RankSchedule> {
    auto s = BuildSchedule(algo, args, r);
    if (s.ok() && mutate) mutate(r, *s);
    return s;
  };
}

void ExpectLoweredRejected(const CollArgs& args, const ScheduleSource& source,
                           std::vector<std::string> needles) {
  const Status st = VerifyLoweredSchedules(args, "mutated", source);
  ASSERT_FALSE(st.ok()) << "verifier accepted a broken schedule";
  for (const auto& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

CollArgs Reduction(CollKind kind, int n, uint64_t count, int nch, bool premul, bool avg) {
  CollArgs a = Args(kind, n, count, false, nch);
  a.chunk_bytes = 8;
  a.premul = premul;
  a.avg = avg;
  return a;
}

TEST(VerifierIrV2, PreMultipliedSumWithoutItsScaleStep) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 4, 16, 2, true, false);
  ASSERT_TRUE(VerifySchedule(ring, a).ok());
  // Channel 0's first step is the scale; turn it into a plain copy.
  ExpectLoweredRejected(
      a,
      Mutated(ring, a,
              [](int, RankSchedule& s) { s.channels[0].steps[0].ops[0].kind = StepOpKind::kCopy; }),
      {"wrong result", "each pre-multiplied once"});
}

TEST(VerifierIrV2, ScaleTwice) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 3, 9, 1, true, false);
  ExpectLoweredRejected(
      a,
      Mutated(ring, a,
              [](int, RankSchedule& s) {
                StepOp again = s.channels[0].steps[0].ops[0];
                again.src = again.dst;
                s.channels[0].steps.insert(s.channels[0].steps.begin() + 1, Step{{again}, {}});
              }),
      {"pre-multiplies", "twice"});
}

TEST(VerifierIrV2, ScaleOutsideAPreMultipliedSum) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs premul = Reduction(CollKind::kAllReduce, 2, 4, 1, true, false);
  CollArgs plain = premul;
  plain.premul = false;
  ExpectLoweredRejected(plain, Mutated(ring, premul, nullptr),
                        {"scales data, but the call is not a pre-multiplied sum"});
}

TEST(VerifierIrV2, MissingEdgeAfterTheScaleIsARace) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 3, 30, 2, true, false);
  ExpectLoweredRejected(a,
                        Mutated(ring, a,
                                [](int, RankSchedule& s) {
                                  for (auto& st : s.channels[1].steps) st.deps.clear();
                                }),
                        {"channel 1", "channel 0 also uses with no dependency edge", "race"});
}

TEST(VerifierIrV2, AvgWithoutItsDivideStep) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kReduceScatter, 4, 5, 2, false, true);
  ASSERT_TRUE(VerifySchedule(ring, a).ok());
  ExpectLoweredRejected(
      a, Mutated(ring, a, [](int, RankSchedule& s) { s.channels[0].steps.pop_back(); }),
      {"wrong result", "divided once"});
}

TEST(VerifierIrV2, AvgDividingBeforeTheSumIsComplete) {
  CollArgs a = Args(CollKind::kAllReduce, 2, 1);
  a.avg = true;
  const ScheduleSource early = [](int r) -> Result<RankSchedule> {
    RankSchedule s = GoodPairAllReduce(r);
    s.buffers = {{BufferRole::kUserSend, DataType::kFloat32, 1},
                 {BufferRole::kUserRecv, DataType::kFloat32, 1},
                 {BufferRole::kScratch, DataType::kFloat32, 0}};
    // Copy the own input, divide it, then fold the peer's in.
    auto& steps = s.channels[0].steps;
    steps.insert(steps.begin(), {{Copy({kSendBuf, 0, 1}, {kRecvBuf, 0, 1})}});
    steps.insert(steps.begin() + 1, {{StepOp{StepOpKind::kDivide, -1, {}, {kRecvBuf, 0, 1}}}});
    steps[2].ops[1].src = {kRecvBuf, 0, 1};
    return s;
  };
  ExpectLoweredRejected(a, early, {"divides recvbuf[0] before the sum is complete"});
}

TEST(VerifierIrV2, AvgDividingWhileAnotherChannelStillWrites) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 2, 64, 2, false, true);
  ExpectLoweredRejected(
      a, Mutated(ring, a, [](int, RankSchedule& s) { s.channels[0].steps.back().deps.clear(); }),
      {"race"});
}

TEST(VerifierIrV2, DependencyCycleIsRejected) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 2, 64, 2, false, false);
  ExpectLoweredRejected(a,
                        Mutated(ring, a,
                                [](int r, RankSchedule& s) {
                                  if (r != 1) return;
                                  s.channels[0].steps[0].deps.push_back({1, 1});
                                  s.channels[1].steps[1].deps.push_back({0, 0});
                                }),
                        {"rank 1 channel", "dependency cycle"});
}

TEST(VerifierIrV2, EdgeToAStepThatDoesNotExist) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 2, 64, 2, false, false);
  ExpectLoweredRejected(a,
                        Mutated(ring, a,
                                [](int, RankSchedule& s) {
                                  s.channels[1].steps[0].deps.push_back({0, 100000});
                                }),
                        {"dependency on channel 0 step 100000", "does not exist"});
}

// An edge that waits for a step of another channel that itself waits on a transfer the peer
// only posts after its own edge: a deadlock across ranks, found by the run.
TEST(VerifierIrV2, EdgesThatDeadlockAcrossRanks) {
  const Algorithm& ring = *FindAlgorithm("ring");
  const CollArgs a = Reduction(CollKind::kAllReduce, 2, 64, 2, false, false);
  ExpectLoweredRejected(
      a,
      Mutated(ring, a,
              [](int, RankSchedule& s) {
                // Channel 0 cannot start before channel 1 ends, and the
                // reverse on the peer: both ranks wait.
                const auto last1 = static_cast<uint32_t>(s.channels[1].steps.size() - 1);
                s.channels[0].steps[0].deps.push_back({1, last1});
                const auto last0 = static_cast<uint32_t>(s.channels[0].steps.size() - 1);
                s.channels[1].steps[0].deps.push_back({0, last0});
              }),
      {"dependency cycle"});
}

// A hand-made quantized all-reduce of 2 ranks: each encodes its input, sends the encoding,
// decodes what it receives and reduces it into its own copy.
RankSchedule QuantizedPair(int r, uint64_t count, DataType dt) {
  RankSchedule s;
  s.channels.resize(1);
  const uint64_t enc = EncodedBytes(CodecId::kTest, dt, count);
  const uint16_t out = AddBuffer(s, DataType::kUint8, enc);
  const uint16_t in = AddBuffer(s, DataType::kUint8, enc);
  s.buffers[kSendBuf] = {BufferRole::kUserSend, dt, count};
  s.buffers[kRecvBuf] = {BufferRole::kUserRecv, dt, count};
  s.buffers[kScratchBuf] = {BufferRole::kScratch, dt, 0};
  auto& steps = s.channels[0].steps;
  steps.push_back(
      {{StepOp{StepOpKind::kQuantize, -1, {kSendBuf, 0, count}, {out, 0, enc}, CodecId::kTest},
        Copy({kSendBuf, 0, count}, {kRecvBuf, 0, count})}});
  steps.push_back({{Send(1 - r, out, 0, enc), Recv(1 - r, in, 0, enc)}});
  steps.push_back({{StepOp{
      StepOpKind::kDequantizeReduce, -1, {in, 0, enc}, {kRecvBuf, 0, count}, CodecId::kTest}}});
  return s;
}

ScheduleSource QuantizedSource(uint64_t count, std::function<void(int, RankSchedule&)> mutate) {
  return [count, mutate](int r) -> Result<RankSchedule> {
    RankSchedule s = QuantizedPair(r, count, DataType::kFloat32);
    if (mutate) mutate(r, s);
    return s;
  };
}

TEST(VerifierIrV2, QuantizedExchangeIsAccepted) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  const Status st = VerifyLoweredSchedules(a, "qpair", QuantizedSource(6, nullptr));
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(VerifierIrV2, DecodingPartOfAnEncoding) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  ExpectLoweredRejected(a,
                        QuantizedSource(6,
                                        [](int, RankSchedule& s) {
                                          // Decode 5 elements from the first bytes of the frame.
                                          StepOp& dq = s.channels[0].steps[2].ops[0];
                                          dq.dst.count = 5;
                                          dq.src.count =
                                              EncodedBytes(CodecId::kTest, DataType::kFloat32, 5);
                                        }),
                        {"not one whole encoding"});
}

TEST(VerifierIrV2, CombiningEncodedBytesAsValues) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  ExpectLoweredRejected(a,
                        QuantizedSource(6,
                                        [](int, RankSchedule& s) {
                                          // Add the peer's frame to the own one, byte-wise.
                                          StepOp& dq = s.channels[0].steps[2].ops[0];
                                          const Slice in = dq.src;
                                          const Slice out = s.channels[0].steps[1].ops[0].src;
                                          dq = LocalReduce(in, out);
                                        }),
                        {"encoded bytes"});
}

TEST(VerifierIrV2, DecodingBytesNothingEncoded) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  ExpectLoweredRejected(a,
                        QuantizedSource(6,
                                        [](int, RankSchedule& s) {
                                          // Decode our own (never written) inbound buffer
                                          // before the exchange.
                                          std::swap(s.channels[0].steps[1], s.channels[0].steps[2]);
                                        }),
                        {"which nothing has written"});
}

TEST(VerifierIrV2, SendingValuesIntoAnEncodedBuffer) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  ExpectLoweredRejected(a,
                        QuantizedSource(6,
                                        [](int, RankSchedule& s) {
                                          // Send the raw floats instead of the frame: the
                                          // receiver's slice is bytes.
                                          StepOp& send = s.channels[0].steps[1].ops[0];
                                          send.src = {kSendBuf, 0, send.src.count};
                                        }),
                        {"slice [0, 40) of sendbuf is out of bounds"});
}

TEST(VerifierIrV2, TypeMismatchOnTheWire) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 64);
  ExpectLoweredRejected(a,
                        QuantizedSource(6,
                                        [](int, RankSchedule& s) {
                                          // 24 float elements of sendbuf, received as 24 bytes.
                                          s.buffers[kSendBuf].count = 64;
                                          s.buffers[kRecvBuf].count = 64;
                                          StepOp& send = s.channels[0].steps[1].ops[0];
                                          send.src = {kSendBuf, 0, send.src.count};
                                        }),
                        {"type mismatch", "float"});
}

TEST(VerifierIrV2, QuantizeWithTheWrongFrameSize) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 6);
  ExpectLoweredRejected(
      a,
      QuantizedSource(6,
                      [](int, RankSchedule& s) { s.channels[0].steps[0].ops[0].dst.count -= 1; }),
      {"encodes 6 float", "needs"});
}

// ------------------------------------------------------------------ point-to-point
TEST(VerifierIrV2, PointToPointGroupsAreProven) {
  // Rank 0 sends two messages to 1 and one to itself; rank 1 receives in order and sends back;
  // rank 2 exchanges with 1 in the other order.
  std::vector<std::vector<P2PSpec>> calls = {
      {{1, true, 5}, {0, true, 3}, {1, true, 7}, {0, false, 3}, {1, false, 4}},
      {{0, false, 5}, {0, false, 7}, {0, true, 4}, {2, false, 2}, {2, true, 9}},
      {{1, false, 9}, {1, true, 2}},
  };
  const Status st = VerifyPointToPoint(calls);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(VerifierIrV2, PointToPointMutations) {
  std::vector<std::vector<P2PSpec>> calls = {
      {{1, true, 5}, {1, true, 5}},
      {{0, false, 5}, {0, false, 5}},
  };
  ASSERT_TRUE(VerifyPointToPoint(calls).ok());
  // The receiver's two receives swapped in the schedule: the bytes land in the wrong call.
  auto swapped = [&](int r) -> Result<RankSchedule> {
    auto s = BuildPointToPointSchedule(calls[r], r, 2);
    if (s.ok() && r == 1) std::swap(s->channels[0].steps[0].ops[0], s->channels[0].steps[0].ops[1]);
    return s;
  };
  Status st = VerifyPointToPoint(calls, swapped);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("wrong result on rank 1"), std::string::npos) << st.message();
  // A receive dropped: the send is never matched.
  auto dropped = [&](int r) -> Result<RankSchedule> {
    auto s = BuildPointToPointSchedule(calls[r], r, 2);
    if (s.ok() && r == 1) s->channels[0].steps[0].ops.pop_back();
    return s;
  };
  st = VerifyPointToPoint(calls, dropped);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("never matched"), std::string::npos) << st.message();
  // A schedule that writes a send buffer.
  auto writes_send = [&](int r) -> Result<RankSchedule> {
    auto s = BuildPointToPointSchedule(calls[r], r, 2);
    if (s.ok() && r == 0) s->channels[0].steps.push_back({{Copy({0, 0, 5}, {1, 0, 5})}});
    return s;
  };
  st = VerifyPointToPoint(calls, writes_send);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("writes call1, which is a send buffer"), std::string::npos)
      << st.message();
}

TEST(VerifierIrV2, PointToPointGroupsThatDoNotPair) {
  std::vector<std::vector<P2PSpec>> calls = {{{1, true, 5}}, {{0, false, 6}}};
  const Status st = VerifyPointToPoint(calls);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("do not pair"), std::string::npos) << st.message();
  // Unpaired sends to self are refused by the builder.
  auto self = BuildPointToPointSchedule({{0, true, 4}}, 0, 1);
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("sends to self"), std::string::npos);
}

}  // namespace
}  // namespace braid
