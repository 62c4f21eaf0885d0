// The ring's schedules in pieces (ring.cc, RingPieces): a channel whose ring blocks span more than
// two chunks runs all the steps of one piece before the next piece, and every op of a piece stays
// inside that piece's part of each block. (The verifier proves the pieced schedules correct in
// algorithms_verifier_test; the multi-rank suite runs them bit-exact in collectives_large_test.)
#include <gtest/gtest.h>

#include <cstdint>

#include "algorithms/algorithm.h"
#include "algorithms/lowering.h"
#include "algorithms/schedule_builder.h"
#include "algorithms/verifier.h"

namespace braid {
namespace {

CollArgs RingArgs(CollKind kind, int n, uint64_t count, uint64_t chunk_bytes, bool in_place) {
  CollArgs a;
  a.kind = kind;
  a.dtype = DataType::kFloat32;
  a.count = count;
  a.nranks = n;
  a.nchannels = 1;
  a.chunk_bytes = chunk_bytes;
  a.in_place = in_place;
  return a;
}

// Every op of step `s` of a schedule in `pieces` pieces of `steps_per_piece` steps touches only
// elements inside its piece: of the whole buffer for all-reduce, of each rank's block (`len`
// elements) otherwise.
void ExpectOpsInsidePieces(const RankSchedule& rs, uint64_t len, uint64_t pieces,
                           size_t steps_per_piece) {
  ASSERT_EQ(rs.channels.size(), 1u);
  const auto& steps = rs.channels[0].steps;
  ASSERT_EQ(steps.size(), pieces * steps_per_piece);
  for (size_t s = 0; s < steps.size(); ++s) {
    const ElemRange piece = EvenPart(len, pieces, s / steps_per_piece);
    const uint64_t lo = piece.off, hi = piece.off + piece.len;
    for (const StepOp& op : steps[s].ops)
      for (const Slice* x : {&op.src, &op.dst}) {
        if (x->count == 0 ||
            (x->buffer != kSendBuf && x->buffer != kRecvBuf && x->buffer != kScratchBuf))
          continue;
        // All-reduce's pieces cut the whole buffer; the per-rank-block collectives' cut each
        // rank's block alike.
        const uint64_t at = x->offset % len;
        EXPECT_GE(at, lo) << "step " << s;
        EXPECT_LE(at + x->count, hi) << "step " << s;
      }
  }
}

TEST(RingPieces, AllReduceRunsEachPieceThroughBothHalvesBeforeTheNext) {
  const Algorithm& ring = *FindAlgorithm("ring");
  // 3 ranks, 64-byte chunks: a piece's blocks are two chunks (32 floats), so 3 * 32 * 5 floats
  // make 5 pieces of 2 (N - 1) steps each.
  for (bool in_place : {false, true}) {
    const CollArgs a = RingArgs(CollKind::kAllReduce, 3, 3 * 32 * 5, 64, in_place);
    ASSERT_TRUE(VerifySchedule(ring, a).ok());
    for (int r = 0; r < 3; ++r) {
      auto s = BuildSchedule(ring, a, r);
      ASSERT_TRUE(s.ok());
      ExpectOpsInsidePieces(*s, a.count, 5, 4);
    }
  }
  // Blocks under two chunks: one piece, the plain 2 (N - 1) steps.
  auto s = BuildSchedule(ring, RingArgs(CollKind::kAllReduce, 3, 3 * 31, 64, false), 0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->channels[0].steps.size(), 4u);
}

TEST(RingPieces, ReduceScatterAndAllGatherRunInPiecesFromThreeRanks) {
  const Algorithm& ring = *FindAlgorithm("ring");
  for (CollKind kind : {CollKind::kReduceScatter, CollKind::kAllGather})
    for (bool in_place : {false, true}) {
      // 4 ranks, a block of 32 * 7 + 3 floats per rank with 64-byte chunks: 7 pieces (the
      // first three one element longer), N - 1 steps each.
      const CollArgs a = RingArgs(kind, 4, 32 * 7 + 3, 64, in_place);
      ASSERT_TRUE(VerifySchedule(ring, a).ok()) << CollKindName(kind);
      for (int r = 0; r < 4; ++r) {
        auto s = BuildSchedule(ring, a, r);
        ASSERT_TRUE(s.ok());
        ExpectOpsInsidePieces(*s, a.count, 7, 3);
      }
      // Two ranks make one step, nothing of which a later step sends: no pieces.
      auto two = BuildSchedule(ring, RingArgs(kind, 2, 32 * 7 + 3, 64, in_place), 0);
      ASSERT_TRUE(two.ok());
      EXPECT_EQ(two->channels[0].steps.size(), 1u) << CollKindName(kind);
    }
}

}  // namespace
}  // namespace braid
