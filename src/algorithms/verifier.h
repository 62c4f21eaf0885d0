// The verifier: runs every rank's schedule symbolically and proves the collective's result.
//
// Each element holds a symbol: which input elements (rank, index) have been combined into it.
// Checks: every receive matches a send of equal count on the same FIFO stream (else: mismatch
// or deadlock, reported with rank/channel/step), no step reads memory nothing wrote (scratch,
// or recv buffer before it was written), no contribution counted twice, slices inside their
// buffers, and at the end every rank's output holds exactly the contributions the collective
// defines (all-reduce: every rank's element i; all-gather: block r = rank r's input; ...).
#pragma once

#include <string>

#include "algorithms/algorithm.h"
#include "core/status.h"

namespace braid {

// OK, or an InternalError whose message explains the first violation found.
Status VerifySchedule(const Algorithm& algo, const CollArgs& args);

}  // namespace braid
