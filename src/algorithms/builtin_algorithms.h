// The built-in algorithm instances, each defined in the file named after it; registry.cc lists
// them for AllAlgorithms().
#pragma once

#include <vector>

#include "algorithms/algorithm.h"

namespace braid {

const Algorithm& RingAlgorithm();               // ring.cc: "ring"
const Algorithm& RecursiveDoublingAlgorithm();  // recursive_doubling.cc: "rd"
const Algorithm& BinomialTreeAlgorithm();       // binomial_tree.cc: "tree"
const Algorithm& BruckAlgorithm();              // bruck.cc: "bruck"
const Algorithm& PairwiseAlgorithm();           // pairwise.cc: "pairwise"
const Algorithm& DisseminationAlgorithm();      // dissemination.cc: "dissemination"
const Algorithm& OrderedReductionAlgorithm();   // ordered.cc: "ordered" (deterministic mode)
// test_codec_allreduce.cc: "qtest", by name only (TestingAlgorithms()).
const Algorithm& TestCodecAllReduceAlgorithm();

// Algorithms FindAlgorithm knows but the tuner never ranks: proof vehicles for the IR.
const std::vector<const Algorithm*>& TestingAlgorithms();

}  // namespace braid
