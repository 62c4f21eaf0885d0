// Device-kernel schedules: what the NCCL shim's intra-node device path does (one peer-reduce
// kernel per rank over its peers' device buffers, mapped by CUDA IPC: nccl/peer_reduce_plan.h),
// written in the IR so that the verifier proves it (docs/schedule-ir.md, "Device kernels").
//
// The shim never runs these schedules: its agent and kernels do the same things in the same
// order, and this is their proof vehicle, as device_staging.h's schedules are for the staged path.
// One rank's schedule, on one channel:
//   expose  every buffer of its that a peer's kernel names (a kernel reads and writes them through
//           its IPC mapping);
//   agree   signal post 0 (the call agreement: its buffers are exposed), wait for every peer's;
//   kernel  each source in order, folded in rank order into scratch (the kernel's registers),
//           divided for AVG, then written to every destination (a copy here, a put into a peer's
//           exposed buffer); pairwise kernels copy each source to its destination;
//   finish  signal post 1 (its kernel ended), wait for every peer's: only then may its caller's
//           stream go on (`done`), since peers write into its buffers until their kernels end.
#pragma once

#include <vector>

#include "algorithms/schedule.h"
#include "core/base/status.h"

namespace braid {

// One kernel's work (device::PeerReduce) in slices: a slice of rank `rank`'s send or receive
// buffer (Slice::rank kLocal for the kernel's own rank).
struct KernelSlices {
  std::vector<Slice> src;  // reduced in this order (pairwise: src[k] to dst[k])
  std::vector<Slice> dst;
  bool pairwise = false;
  bool divide = false;  // AVG: the reduction divided by the rank count before it is written
};

// Rank `rank`'s schedule for `a` (a.memory a device type), where kernels[r] is rank r's kernels
// with slices as rank r names them (the exposures follow from every rank's). Checked as the
// engine's schedules are (structure and one-sided shape).
Result<RankSchedule> DeviceKernelSchedule(const CollArgs& a, int rank,
                                          const std::vector<std::vector<KernelSlices>>& kernels);

}  // namespace braid
