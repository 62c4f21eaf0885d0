// From an algorithm's data movement to the schedule every consumer reads (schedule.h).
//
// BuildSchedule calls the algorithm and completes its schedule the same way for every algorithm:
//   - the buffer table: the user's send and receive buffers (sized by the collective, of its
//     type and memory type), kScratchBuf of scratch_count elements, and any scratch the builder
//     added with AddBuffer;
//   - a pre-multiplied sum: a kScale step first on channel 0 (the call's input times its scalar,
//     into a scratch buffer the rest of the schedule reads instead of the send buffer), which
//     every other channel's first step depends on. The algorithm is built out of place (the
//     user's input is read only by that step, which precedes every write), so an in-place call
//     works too;
//   - AVG: a kDivide step last on channel 0 on the ranks that hold a result, after the last step
//     of every other channel;
// then checks the structure (buffers, slices, dependency edges) so that a malformed schedule is
// an error here, not memory corruption in the engine.
//
// Point-to-point groups are schedules too (BuildPointToPointSchedule), so the verifier and the
// simulator see what the engine runs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

Result<RankSchedule> BuildSchedule(const Algorithm& algo, const CollArgs& args, int rank);

// Every rank's lowered schedule from elsewhere than BuildSchedule (tests that mutate its output,
// the device kernels' schedules): for the verifier and the simulator.
using ScheduleSource = std::function<Result<RankSchedule>(int rank)>;

// Appends a scratch buffer of `count` elements of `dtype` to `s`'s table (making room for the
// first kFirstUserBuf slots first) and returns its slot.
uint16_t AddBuffer(RankSchedule& s, DataType dtype, uint64_t count);

// Elements of the user's send and receive buffers of a collective (C API conventions).
uint64_t SendCount(const CollArgs& args);
uint64_t RecvCount(const CollArgs& args);

// One call of a point-to-point group, as the schedule needs it.
struct P2PSpec {
  int peer = 0;
  bool is_send = false;
  uint64_t bytes = 0;
};

// One step on channel 0 holding every call in order (the engine posts them together, so any
// pattern of matching sends and receives completes: NCCL's fused group semantics); sends to self
// become copies into the matching receive (the k-th send to self feeds the k-th receive from
// self). Buffer slot i is call i (kUint8, its bytes). Errors: a peer outside [0, nranks), or
// unpaired or unequal sends and receives to self.
Result<RankSchedule> BuildPointToPointSchedule(const std::vector<P2PSpec>& calls, int rank,
                                               int nranks, MemoryType memory = MemoryType::kHost);

// The structural checks BuildSchedule applies, for schedules built by other means (tests): every
// slice inside its buffer, transfers with other ranks only, every dependency edge naming an
// existing step of another channel, no dependency cycle, codecs on the quantize kinds only. `what`
// prefixes messages.
Status CheckScheduleStructure(const RankSchedule& s, int rank, int nranks, const std::string& what);
// What the engine's one-sided executor relies on (one channel, the agreement before any user
// buffer is written, exposures before the first post), for one-sided schedules built by other
// means (device_kernel_schedule.h); sets `s`'s exposure and last-post fields.
Status CheckOneSidedSchedule(RankSchedule& s, int rank, int nranks, const std::string& what);

}  // namespace braid
