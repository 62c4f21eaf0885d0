// Collectives on device buffers as schedules (issue 39): what the NCCL shim's stream agent runs
// where device memory is not the host's (core/runtime/stream_agent.h), written in the IR so that
// the verifier proves it and the simulator prices it.
//
// The schedule of a call whose user buffers are device memory (CollArgs::memory != kHost):
//   - channel 0 is the call's stream: the copies of the input into a pinned host staging buffer
//     (device to host), then the copies of the result back (host to device);
//   - the host schedule of the same algorithm on the staging buffers, out of place, on channels
//     of its own, each first step after the copy it reads;
//   - element-wise collectives (all-reduce, reduce, broadcast) with CollArgs::staging_piece_bytes
//     run in pieces, as the agent does (BRAID_STAGING_CHUNK_BYTES): piece k's host schedule after
//     piece k's copy in and after piece k - 1, piece k's copy out after piece k, so that copies
//     overlap the pieces around them. Other collectives run whole.
// Only the staging copies touch device memory; CheckScheduleStructure (lowering.h) refuses any
// other op on it. The simulator prices a copy between memory types on LinkModel::staging.
//
// Not staged: one-sided (board) schedules (their posts belong to one call on the host's board)
// and in-place all-to-all (the NCCL shim sends it from a copy: of the staged buffer, or in device
// scratch on the device path).
#pragma once

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

Result<RankSchedule> BuildStagedSchedule(const Algorithm& algo, const CollArgs& args, int rank);

// A kCopy between host memory and device memory (either way): a staging copy.
bool IsStagingCopy(const RankSchedule& s, const StepOp& op);

}  // namespace braid
