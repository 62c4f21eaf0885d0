// The board's one-sided schedules (board_schedules.h) proven by the verifier for N = 1..64 in
// every form (one-shot in an entry, a slot or a buffer; two-shot, in rounds; all-gather in
// rounds; by reference), every collective they serve, in and out of place, with pre-multiplied
// sums and AVG; the put-based proof vehicle; and mutations of the IR's one-sided steps that the
// verifier must reject, each with a message naming the defect.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/board_schedules.h"
#include "algorithms/lowering.h"
#include "algorithms/verifier.h"

namespace braid {
namespace {

// A small board, so that small counts reach every place: an entry holds 2 floats, a slot 8, a
// large buffer 32 (a post of more runs in rounds, where its form allows).
CollArgs::Board SmallBoard() {
  CollArgs::Board b;
  b.entry_bytes = 8;
  b.slot_bytes = 32;
  b.capacity = 128;
  return b;
}

CollArgs Args(CollKind kind, int n, uint64_t count, bool in_place, int root = 0) {
  CollArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  a.op = ReduceOp::kSum;
  a.count = kind == CollKind::kBarrier ? 0 : count;
  a.nranks = n;
  a.root = root % n;
  a.in_place = in_place && kind != CollKind::kAllToAll && kind != CollKind::kBarrier;
  a.board = SmallBoard();
  return a;
}

constexpr CollKind kKinds[] = {CollKind::kAllReduce, CollKind::kReduce,        CollKind::kBroadcast,
                               CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllToAll,
                               CollKind::kBarrier};

bool IsReduction(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduce || k == CollKind::kReduceScatter;
}

// Verifies `a` on the board and returns its plan's form (for the coverage checks).
BoardForm VerifyOnBoard(const CollArgs& a) {
  const auto plan = PlanBoardCall(a);
  EXPECT_TRUE(plan.has_value()) << CollKindName(a.kind) << " N=" << a.nranks
                                << " count=" << a.count;
  if (!plan) return BoardForm::kOneShot;
  const Status st = VerifySchedule(BoardAlgorithm(), a);
  EXPECT_TRUE(st.ok()) << BoardFormName(plan->form) << ": " << st.message();
  return plan->form;
}

TEST(BoardSchedules, EveryCollectiveEveryPlaceAllRankCounts) {
  int forms[4] = {};
  int places[3] = {};
  for (int n = 1; n <= 64; ++n) {
    // Entry, slot and buffer posts for the kinds whose post is one block; reduce-scatter and
    // all-to-all post N blocks, so small N reach the slot and the buffer.
    for (uint64_t count :
         {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{5}, uint64_t{19}, uint64_t{45}}) {
      for (CollKind kind : kKinds) {
        for (bool in_place : {false, true}) {
          CollArgs a = Args(kind, n, count, in_place, static_cast<int>(count) + n / 3);
          const auto plan = PlanBoardCall(a);
          if (!plan) continue;  // a post larger than the board in a form without rounds
          if (n > 12 && (count + static_cast<uint64_t>(in_place)) % 2) continue;  // sample
          ++forms[static_cast<int>(VerifyOnBoard(a))];
          ++places[static_cast<int>(plan->place)];
          if (HasFailure()) return;
          if (IsReduction(kind) && n <= 12) {
            a.avg = true;
            VerifyOnBoard(a);
            a.avg = false;
            a.premul = true;
            VerifyOnBoard(a);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(forms[static_cast<int>(BoardForm::kOneShot)], 0);
  EXPECT_GT(forms[static_cast<int>(BoardForm::kGatherInRounds)], 0);
  for (int p = 0; p < 3; ++p) EXPECT_GT(places[p], 0) << "place " << p << " never verified";
}

TEST(BoardSchedules, TwoShotInOneAndManyRounds) {
  for (int n = 1; n <= 64; n += (n < 12 ? 1 : 7)) {
    // A buffer's post (more than a slot's 8 floats) of at least one element per rank.
    for (uint64_t count :
         {std::max<uint64_t>(static_cast<uint64_t>(n), 9), uint64_t{20}, uint64_t{75}}) {
      if (count < static_cast<uint64_t>(n)) continue;
      for (bool in_place : {false, true}) {
        CollArgs a = Args(CollKind::kAllReduce, n, count, in_place);
        a.board.two_shot = 1;
        const auto plan = PlanBoardCall(a);
        ASSERT_TRUE(plan.has_value());
        EXPECT_EQ(plan->form, BoardForm::kTwoShot);
        EXPECT_EQ(plan->rounds, BoardRounds(count * 4, a.board.capacity));
        VerifyOnBoard(a);
        a.avg = true;
        VerifyOnBoard(a);
        a.avg = false;
        a.premul = true;
        VerifyOnBoard(a);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(BoardSchedules, ByReferenceEveryCollectiveItServes) {
  for (int n = 1; n <= 64; n += (n < 12 ? 1 : 5)) {
    for (uint64_t count : {uint64_t{1}, uint64_t{7}, static_cast<uint64_t>(n) + 3}) {
      for (CollKind kind : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter,
                            CollKind::kBroadcast}) {
        for (bool in_place : {false, true}) {
          CollArgs a = Args(kind, n, count, in_place, n - 1);
          a.board.by_reference_from = 1;
          ASSERT_EQ(PlanBoardCall(a)->form, BoardForm::kByReference);
          VerifyOnBoard(a);
          if (IsReduction(kind)) {
            a.avg = true;
            VerifyOnBoard(a);
            a.avg = false;
            a.premul = true;
            VerifyOnBoard(a);
          }
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(BoardSchedules, PutBasedAllGatherAndTheAgreement) {
  const Algorithm& put = *FindAlgorithm("putgather");
  for (int n = 2; n <= 64; n += (n < 12 ? 1 : 9))
    for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{2}})
      for (bool in_place : {false, true}) {
        const CollArgs a = Args(CollKind::kAllGather, n, count, in_place);
        if (!put.supports(a)) continue;
        const Status st = VerifySchedule(put, a);
        ASSERT_TRUE(st.ok()) << st.message();
      }
  // The agreement of an engine call: a barrier on the board (every rank hears from every rank).
  for (int n = 1; n <= 64; ++n) {
    CollArgs a = Args(CollKind::kBarrier, n, 0, false);
    const Status st = VerifyLoweredSchedules(a, "agreement", [&](int r) -> Result<RankSchedule> {
      RankSchedule s = BoardAgreementSchedule(n, r);
      s.buffers.resize(kFirstUserBuf);
      s.buffers[kSendBuf] = {BufferRole::kUserSend, a.dtype, 0};
      s.buffers[kRecvBuf] = {BufferRole::kUserRecv, a.dtype, 0};
      s.buffers[kScratchBuf] = {BufferRole::kScratch, a.dtype, 0};
      return s;
    });
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

TEST(BoardSchedules, PlanIsTheSameOnEveryRankAndRefusesWhatItCannotServe) {
  CollArgs a = Args(CollKind::kAllReduce, 4, 100, false);
  a.board.capacity = 0;
  EXPECT_FALSE(PlanBoardCall(a).has_value()) << "no board";
  a = Args(CollKind::kSendRecv, 4, 1, false);
  EXPECT_FALSE(PlanBoardCall(a).has_value());
  a = Args(CollKind::kAllReduce, 4, 1, false);
  a.codec = Codec(CodecId::kInt8, 32);
  EXPECT_FALSE(PlanBoardCall(a).has_value()) << "quantized calls run their own schedules";
  a = Args(CollKind::kAllToAll, 4, 100, false);  // 1600 bytes per post, no rounds for it
  EXPECT_FALSE(PlanBoardCall(a).has_value());
  a = Args(CollKind::kAllReduce, 2, 100, false);  // one-shot only on 2 ranks: too large
  EXPECT_FALSE(PlanBoardCall(a).has_value());
  a.board.two_shot = 1;
  EXPECT_EQ(PlanBoardCall(a)->form, BoardForm::kTwoShot);
  // A broadcast is placed by the root's post on every rank.
  for (int root : {0, 3}) {
    CollArgs b = Args(CollKind::kBroadcast, 4, 6, false, root);
    EXPECT_EQ(PlanBoardCall(b)->place, WindowPlace::kSlot);
  }
}

TEST(BoardSchedules, PreMultipliedSumScalesStraightIntoTheWindow) {
  CollArgs a = Args(CollKind::kAllReduce, 3, 4, false);
  a.premul = true;
  auto s = BuildSchedule(BoardAlgorithm(), a, 1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  int scales = 0;
  for (const Step& st : s->channels[0].steps)
    for (const StepOp& op : st.ops)
      if (op.kind == StepOpKind::kScale) {
        ++scales;
        EXPECT_EQ(s->buffers[op.dst.buffer].role, BufferRole::kWindow);
      }
  EXPECT_EQ(scales, 1);
  EXPECT_EQ(s->posts, 1u);
}

// ------------------------------------------------------------------ mutations
// Verifies a schedule of the board algorithm after `mutate` changed rank `victim`'s.
Status Mutated(const CollArgs& a, int victim, const std::function<void(RankSchedule&)>& mutate,
               const Algorithm& algo = BoardAlgorithm()) {
  return VerifyLoweredSchedules(a, "mutated", [&](int r) -> Result<RankSchedule> {
    auto s = BuildSchedule(algo, a, r);
    if (s.ok() && r == victim) mutate(*s);
    return s;
  });
}

// The first step of channel 0 that holds an op of `kind` (and counter `c` for waits/signals).
size_t StepWith(const RankSchedule& s, StepOpKind kind, Counter c, size_t from = 0) {
  const auto& steps = s.channels[0].steps;
  for (size_t i = from; i < steps.size(); ++i)
    for (const StepOp& op : steps[i].ops)
      if (op.kind == kind &&
          (kind != StepOpKind::kWait && kind != StepOpKind::kSignal ? true : op.counter == c))
        return i;
  ADD_FAILURE() << "no such step";
  return 0;
}

void EraseStep(RankSchedule& s, size_t i) {
  s.channels[0].steps.erase(s.channels[0].steps.begin() + static_cast<long>(i));
}

TEST(BoardMutations, TheUnmutatedSchedulesAreAccepted) {
  const CollArgs a = Args(CollKind::kAllReduce, 4, 6, false);
  EXPECT_TRUE(Mutated(a, 1, [](RankSchedule&) {}).ok());
}

TEST(BoardMutations, AGetBeforeItsSignalIsRejected) {
  // Rank 1 reads its peers' posts without waiting for them.
  const CollArgs a = Args(CollKind::kAllReduce, 4, 6, false);
  const Status st = Mutated(a, 1, [](RankSchedule& s) {
    EraseStep(s, StepWith(s, StepOpKind::kWait, Counter::kPosted));
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("before the signal"), std::string::npos) << st.message();
}

TEST(BoardMutations, AMissingWaitForOnePeerIsRejected) {
  const CollArgs a = Args(CollKind::kAllGather, 4, 1, false);
  const Status st = Mutated(a, 2, [](RankSchedule& s) {
    auto& ops = s.channels[0].steps[StepWith(s, StepOpKind::kWait, Counter::kPosted)].ops;
    ops.erase(ops.begin() + 1);  // rank 2 forgets to wait for one peer's post
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("before the signal"), std::string::npos) << st.message();
}

TEST(BoardMutations, ARegionReusedTooEarlyIsRejected) {
  // Rank 3 writes its window without waiting for its peers to consume the post it held.
  const CollArgs a = Args(CollKind::kAllReduce, 4, 6, false);
  const Status st = Mutated(a, 3, [](RankSchedule& s) {
    EraseStep(s, StepWith(s, StepOpKind::kWait, Counter::kConsumed));
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reused too early"), std::string::npos) << st.message();
}

TEST(BoardMutations, ReusingAWindowItsOwnEarlierCallMayStillReadIsRejected) {
  // Calls run side by side on one rank (the engine's window, a group on the board): the call
  // two posts back may still fold this rank's own large buffer, so waiting for the peers alone
  // is not enough. Rank 1 waits for every peer's consumed counter but not its own.
  const CollArgs a = Args(CollKind::kAllReduce, 4, 6, false);
  const Status st = Mutated(a, 1, [](RankSchedule& s) {
    auto& ops = s.channels[0].steps[StepWith(s, StepOpKind::kWait, Counter::kConsumed)].ops;
    const auto self =
        std::find_if(ops.begin(), ops.end(), [](const StepOp& o) { return o.peer == 1; });
    ASSERT_NE(self, ops.end());
    ops.erase(self);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reused too early"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("before rank 1 (this rank"), std::string::npos) << st.message();
}

TEST(BoardSchedules, EveryWindowWriteWaitsForThisRanksOwnCounterToo) {
  // Every form, on a few rank counts: the step that frees a window names every rank, this one
  // included, so that a call never overwrites what an earlier call of the same rank still reads.
  for (const CollKind kind : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kBroadcast,
                              CollKind::kReduce, CollKind::kBarrier})
    for (const int n : {2, 3, 8}) {
      const CollArgs a = Args(kind, n, 6, false);
      for (int r = 0; r < n; ++r) {
        // The barrier: the agreement a call on the streams takes on the board.
        auto s = kind == CollKind::kBarrier ? Result<RankSchedule>(BoardAgreementSchedule(n, r))
                                            : BuildSchedule(BoardAlgorithm(), a, r);
        ASSERT_TRUE(s.ok()) << s.status().message();
        bool found = false;
        for (const Step& st : s->channels[0].steps) {
          int waits = 0, own = 0;
          for (const StepOp& op : st.ops)
            if (op.kind == StepOpKind::kWait && op.counter == Counter::kConsumed && op.value < 0) {
              ++waits;
              own += op.peer == r;
            }
          if (waits == 0) continue;
          found = true;
          EXPECT_EQ(waits, n) << CollKindName(kind) << " n=" << n << " rank " << r;
          EXPECT_EQ(own, 1) << CollKindName(kind) << " n=" << n << " rank " << r;
        }
        EXPECT_TRUE(found) << CollKindName(kind) << " n=" << n;
      }
    }
}

TEST(BoardMutations, TwoShotReusingItsBufferTooEarlyIsRejected) {
  // The second round's first post overwrites the first round's before a peer folded it.
  CollArgs a = Args(CollKind::kAllReduce, 3, 75, false);
  a.board.two_shot = 1;
  ASSERT_GT(PlanBoardCall(a)->rounds, 1u);
  // Rank 0 fills round 1's first post (its buffer of round 0's first) before it has seen every
  // peer's second post of round 0, i.e. before they are sure to have folded round 0's.
  const Status st = Mutated(a, 0, [](RankSchedule& s) {
    auto& steps = s.channels[0].steps;
    size_t fill = 0, wait = 0;
    for (size_t i = 0; i < steps.size(); ++i)
      for (const StepOp& op : steps[i].ops) {
        if (op.kind == StepOpKind::kCopy && s.buffers[op.dst.buffer].role == BufferRole::kWindow &&
            s.buffers[op.dst.buffer].post == 2)
          fill = i;
        if (op.kind == StepOpKind::kWait && op.counter == Counter::kPosted && op.value == 1)
          wait = i;
      }
    ASSERT_GT(fill, wait);
    Step moved = steps[fill];
    steps.erase(steps.begin() + static_cast<long>(fill));
    steps.insert(steps.begin() + static_cast<long>(wait), std::move(moved));
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reused too early"), std::string::npos) << st.message();
}

TEST(BoardMutations, APutToTheWrongPeerIsRejected) {
  const Algorithm& put = *FindAlgorithm("putgather");
  const CollArgs a = Args(CollKind::kAllGather, 4, 1, false);
  const Status st = Mutated(
      a, 1,
      [](RankSchedule& s) {
        auto& ops = s.channels[0].steps[StepWith(s, StepOpKind::kPut, Counter::kPosted)].ops;
        ops[0].dst.rank = static_cast<int16_t>(ops[1].dst.rank);  // two puts to one peer
      },
      put);
  // Two puts of rank 1 land in one place of one peer's window, and nothing in the other's.
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 channel 0 step 1 op 1 (put"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("'s window"), std::string::npos) << st.message();
}

TEST(BoardMutations, ConsumingBeforeReadingIsRejected) {
  const CollArgs a = Args(CollKind::kAllToAll, 3, 2, false);
  const Status st = Mutated(a, 1, [](RankSchedule& s) {
    auto& steps = s.channels[0].steps;
    const size_t c = StepWith(s, StepOpKind::kSignal, Counter::kConsumed);
    const size_t get = StepWith(s, StepOpKind::kGet, Counter::kPosted);
    std::swap(steps[c], steps[get]);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("consumed"), std::string::npos) << st.message();
}

TEST(BoardMutations, ReadingABufferItsOwnerDidNotExposeIsRejected) {
  CollArgs a = Args(CollKind::kAllGather, 3, 2, false);
  a.board.by_reference_from = 1;
  const Status st = Mutated(a, 2, [](RankSchedule& s) {
    EraseStep(s, StepWith(s, StepOpKind::kExpose, Counter::kPosted));
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not exposed"), std::string::npos) << st.message();
}

TEST(BoardMutations, ReturningWhilePeersStillReadIsRejected) {
  // By reference, rank 0 does not wait for its peers' last post: its caller could reuse its
  // buffers while they read them.
  CollArgs a = Args(CollKind::kBroadcast, 3, 4, false, 0);
  a.board.by_reference_from = 1;
  const Status st = Mutated(a, 0, [](RankSchedule& s) {
    auto& steps = s.channels[0].steps;
    size_t last = 0;
    for (size_t i = 0; i < steps.size(); ++i)
      for (const StepOp& op : steps[i].ops)
        if (op.kind == StepOpKind::kWait && op.counter == Counter::kPosted) last = i;
    EraseStep(s, last);
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("may return while"), std::string::npos) << st.message();
}

TEST(BoardMutations, WaitingForAPostNobodyMakesIsADeadlock) {
  const CollArgs a = Args(CollKind::kAllReduce, 2, 1, false);
  const Status st = Mutated(a, 0, [](RankSchedule& s) {
    s.channels[0].steps[StepWith(s, StepOpKind::kWait, Counter::kPosted)].ops[0].value = 5;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("never does"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace braid
