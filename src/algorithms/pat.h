// PAT ("Parallel Aggregated Trees", NCCL 2.23+, arXiv 2506.20252): all-gather and
// reduce-scatter in logarithmic rounds for any N, with scratch bounded by a byte cap whatever N
// and the count. pat.cc describes the schedule; this header gives its shape to the tests, the
// docs and the cost model.
#pragma once

#include <cstdint>

#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

// The scratch one PAT call may use, in bytes, whatever N and the count: the builder aggregates
// fewer blocks per message, and then runs the call in pieces of every block, to stay within it.
inline constexpr uint64_t kPatScratchBytes = 1 << 20;

// How PAT runs a call (pat.cc): `agg` blocks travel in one message at most (A, a power of two);
// the offsets 1 .. N-1 fall into `delta` = 2^ceil(log2 N) / A classes (offsets congruent modulo
// delta), each a message of one step; class 0 (the multiples of delta) then takes `tail_rounds`
// more rounds. Each block's elements run in `pieces` passes of at most `piece` elements, so
// that the scratch, (log2(delta) + 1) x ceil(N / delta) x piece elements (ceil(N / delta) <= A;
// none for an all-gather at A = 1), stays within the cap.
struct PatShape {
  int agg = 1;
  int delta = 1;
  int levels = 0;       // log2(delta): the scratch slots besides class 0's
  int tail_rounds = 0;  // ceil(log2(ceil(N / delta)))
  uint64_t piece = 0;   // elements of a block per pass (the longest pass)
  uint64_t pieces = 0;  // passes
  uint64_t scratch_count = 0;
  uint64_t messages = 0;  // per rank and direction, before chunking: pieces x (steps + tail)
};

// The shape for `args` (all-gather or reduce-scatter, count > 0, N >= 2) under `cap_bytes`: the
// fewest messages, then the least scratch. An error when even one element of one block per
// message does not fit (a cap below (ceil(log2 N) + 1) elements).
Result<PatShape> PlanPat(const CollArgs& args, uint64_t cap_bytes);

// Rank `rank`'s PAT schedule for `args` under `cap_bytes` of scratch (PatAlgorithm uses
// kPatScratchBytes; tests pass small caps to run the pieces and the narrow aggregation).
Result<RankSchedule> BuildPatSchedule(const CollArgs& args, int rank, uint64_t cap_bytes);

// Hierarchical PAT ("hpat", pat.cc): PAT across the nodes of args.layout among the ranks of one
// local position, and the intra-node ring of super-blocks, under `cap_bytes` of scratch.
Result<RankSchedule> BuildHierPatSchedule(const CollArgs& args, int rank, uint64_t cap_bytes);

// The closed alpha-beta form of that schedule (what PatAlgorithm::estimate_seconds returns for
// kPatScratchBytes): every step and tail round one transfer, local copies free.
struct LinkModel;
double PatEstimateSeconds(const CollArgs& args, const LinkModel& model, uint64_t cap_bytes);

}  // namespace braid
