// The verifier: runs every rank's lowered schedule (lowering.h) symbolically and proves the
// collective's result.
//
// Each element holds a symbol: which input elements (rank, index) have been combined into it,
// whether each contribution was pre-multiplied and the sum divided (AVG). Encoded bytes hold a
// reference into the encoding they belong to. Checks: every receive matches a send of equal count
// and type on the same FIFO stream (else: mismatch or deadlock, reported with rank/channel/step),
// no step reads memory nothing wrote (scratch, or recv buffer before it was written), no
// contribution counted twice, slices inside their buffers, two channels touch the same memory
// only when dependency edges order them, no dependency cycle, a decoder reads exactly one whole
// encoding of its codec and type, and at the end every rank's output holds exactly the
// contributions the collective defines (all-reduce: every rank's element i, each scaled once for
// a pre-multiplied sum, divided once for AVG; all-gather: block r = rank r's input; ...). Quantized
// transfers are proven for their contributions, not their values: the codecs may be lossy. For a
// lossy (block) codec the verifier also proves that decoders use the encoding's own codec and
// block size, and that an all-reduce's ranks pass the same data through the same quantizations
// (same codec, block size and block boundaries) and combine them in the same order, so that their
// results are bitwise identical; it cannot bound the quantization error (tests do, in numbers).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/lowering.h"
#include "core/base/status.h"

namespace braid {

// OK, or an InternalError whose message explains the first violation found. Builds every rank's
// schedule with BuildSchedule.
Status VerifySchedule(const Algorithm& algo, const CollArgs& args);

// The same for lowered schedules from elsewhere (tests that mutate BuildSchedule's output).
Status VerifyLoweredSchedules(const CollArgs& args, const std::string& name,
                              const ScheduleSource& source);

// A point-to-point group: calls[r] is rank r's calls in order. The k-th send from p to q must
// deliver its bytes to q's k-th receive from p, whatever the schedule does. `source` defaults to
// BuildPointToPointSchedule.
Status VerifyPointToPoint(const std::vector<std::vector<P2PSpec>>& calls,
                          const ScheduleSource& source = nullptr);

}  // namespace braid
