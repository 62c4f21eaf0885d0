// Every built-in algorithm, every collective it serves, N = 1..64, in and out of place, odd
// counts, several channels and chunk sizes, proven correct by the symbolic verifier; and
// hand-made broken schedules that the verifier must reject with a useful message.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "algorithms/verifier.h"

namespace braid {
namespace {

struct Case {
  const char* algo;
  CollKind kind;
};

const Case kCases[] = {
    {"ring", CollKind::kAllReduce},        {"ring", CollKind::kReduceScatter},
    {"ring", CollKind::kAllGather},        {"ring", CollKind::kBroadcast},
    {"ring", CollKind::kReduce},           {"rd", CollKind::kAllReduce},
    {"tree", CollKind::kBroadcast},        {"tree", CollKind::kReduce},
    {"bruck", CollKind::kAllGather},       {"pairwise", CollKind::kAllToAll},
    {"dissemination", CollKind::kBarrier},
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
    const uint64_t chunk_elems = std::max<uint64_t>(chunk / DataTypeSize(dt), 1);
    for (int r = 0; r < n; ++r) {
      auto s = algo_->build(a, r);
      ASSERT_TRUE(s.ok());
      ASSERT_LE(static_cast<int>(s->channels.size()), nch);
      for (const Channel& ch : s->channels)
        for (const Step& step : ch.steps)
          for (const StepOp& op : step.ops) {
            if (op.kind != StepOpKind::kSend) continue;
            ASSERT_LE(op.src.count, chunk_elems) << "rank " << r << " sends more than a chunk";
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

INSTANTIATE_TEST_SUITE_P(Builtin, AlgorithmVerify, ::testing::ValuesIn(kCases), CaseName);

TEST(AlgorithmRegistry, NamesAndLookup) {
  std::vector<std::string> names;
  for (const Algorithm* a : AllAlgorithms()) names.push_back(a->name());
  EXPECT_EQ(names, (std::vector<std::string>{"ring", "rd", "tree", "bruck", "pairwise",
                                             "dissemination", "ordered"}));
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
  for (auto& ops : steps) s.channels[0].steps.push_back(Step{std::move(ops)});
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

}  // namespace
}  // namespace braid
