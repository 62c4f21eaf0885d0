// The built-in algorithm instances, each defined in the file named after it; registry.cc lists
// them for AllAlgorithms().
#pragma once

#include <vector>

#include "algorithms/algorithm.h"

namespace braid {

const Algorithm& RingAlgorithm();               // ring.cc: "ring"
const Algorithm& RecursiveDoublingAlgorithm();  // recursive_doubling.cc: "rd"
const Algorithm& RabenseifnerAlgorithm();       // rabenseifner.cc: "rabenseifner"
const Algorithm& BinomialTreeAlgorithm();       // binomial_tree.cc: "tree"
const Algorithm& BruckAlgorithm();              // bruck.cc: "bruck"
const Algorithm& PatAlgorithm();                // pat.cc: "pat" (all-gather, reduce-scatter)
const Algorithm& PairwiseAlgorithm();           // pairwise.cc: "pairwise"
const Algorithm& DisseminationAlgorithm();      // dissemination.cc: "dissemination"
const Algorithm& OrderedReductionAlgorithm();   // ordered.cc: "ordered" (deterministic mode)
// The largest all-gather or reduce-scatter (bytes gathered or scattered, N x count) "rd" serves,
// on a power of two of ranks: latency-bound sizes (recursive_doubling.cc).
inline constexpr uint64_t kButterflyMaxBytes = 64 * 1024;
// ... and the largest all-gather it serves on one node, where its log2(N) rounds beat the ring's
// N - 1 steps for the same bytes up to this size (measured, docs/performance.md).
inline constexpr uint64_t kButterflyAllGatherMaxBytes = 2 * 1024 * 1024;
// Hierarchical algorithms (spec/algorithms.md section 2), groups from CollArgs::layout.
const Algorithm& HierRingAlgorithm();    // hier_ring.cc: "hring"
const Algorithm& HoRingAlgorithm();      // ho_ring.cc: "ho_ring"
const Algorithm& HierRing3Algorithm();   // hier_ring.cc: "hring3" (3 levels: device groups)
const Algorithm& HoRing3Algorithm();     // ho_ring.cc: "ho_ring3" (3 levels: device groups)
const Algorithm& Torus2dAlgorithm();     // torus2d.cc: "torus2d"
const Algorithm& Torus2d3Algorithm();    // torus2d.cc: "torus2d3" (3 levels: device groups)
const Algorithm& HierLeaderAlgorithm();  // hier_leader.cc: "hier_leader"
const Algorithm& HierTreeAlgorithm();    // hier_tree.cc: "hier_tree" (broadcast, reduce)
const Algorithm& HierPatAlgorithm();     // pat.cc: "hpat" (PAT across nodes; by name only)
const Algorithm& RailRingAlgorithm();    // rail_ring.cc: "rail_ring" (a ring's order per channel)
// ring.cc's schedule for `rank` with only channel `channel`'s steps (the others empty): what
// rail_ring renames, one channel per order, without building every channel for each.
Result<RankSchedule> BuildRingChannel(const CollArgs& a, int rank, int channel);
// Quantized collectives (spec/algorithms.md section 3): they serve only requests that name a
// block codec (CollArgs::codec), which the engine routes to them (QuantizedAlgorithmFor).
const Algorithm& QuantizedAllGatherAlgorithm();      // quantized.cc: "qwz"
const Algorithm& QuantizedReduceScatterAlgorithm();  // quantized.cc: "qgz"
// test_codec_allreduce.cc: "qtest", by name only (TestingAlgorithms()).
const Algorithm& TestCodecAllReduceAlgorithm();
// board_put_allgather.cc: "putgather", an all-gather by puts into the peers' windows, by name
// only: the proof vehicle of the IR's put (the board's own forms only get).
const Algorithm& BoardPutAllGatherAlgorithm();

// The hierarchical algorithms: FindAlgorithm knows them (BRAID_ALGO), and the tuner ranks them
// beside AllAlgorithms() for communicators that span several nodes in groups of equal size.
// They stay out of AllAlgorithms() so that one-node communicators (and the tests that force
// every flat algorithm) see the flat set only.
const std::vector<const Algorithm*>& HierarchicalAlgorithms();

// The algorithm that serves a quantized request of kind `kind` (qwz, qgz), or nullptr.
const Algorithm* QuantizedAlgorithmFor(CollKind kind);

// Algorithms FindAlgorithm knows but the tuner never ranks: proof vehicles for the IR.
const std::vector<const Algorithm*>& TestingAlgorithms();

}  // namespace braid
