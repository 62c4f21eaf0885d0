#include "algorithms/device_kernel_schedule.h"

#include <algorithm>
#include <string>

#include "algorithms/board_builder.h"
#include "algorithms/lowering.h"

namespace braid {

namespace {

// Rank `owner`'s slice as named by rank `by` (kernels[by]'s slices are by's view).
int OwnerOf(const Slice& s, int by) {
  return s.remote() ? s.rank : by;
}

}  // namespace

Result<RankSchedule> DeviceKernelSchedule(const CollArgs& a, int rank,
                                          const std::vector<std::vector<KernelSlices>>& kernels) {
  const int n = a.nranks;
  if (a.memory == MemoryType::kHost)
    return InvalidArgument("device-kernel schedules are of device memory");
  if (static_cast<int>(kernels.size()) != n || rank < 0 || rank >= n)
    return InvalidArgument("device-kernel schedules need every rank's kernels");
  // The buffers of this rank that some peer's kernel names.
  bool exposed[kFirstUserBuf] = {};
  for (int r = 0; r < n; ++r)
    for (const KernelSlices& k : kernels[static_cast<size_t>(r)])
      for (const auto* list : {&k.src, &k.dst})
        for (const Slice& s : *list)
          if (r != rank && OwnerOf(s, r) == rank && s.buffer < kFirstUserBuf)
            exposed[s.buffer] = true;
  uint64_t scratch = 0;
  for (const KernelSlices& k : kernels[static_cast<size_t>(rank)])
    for (const Slice& s : k.src) scratch = std::max(scratch, s.count);

  board::Builder b(a, rank);
  for (uint16_t buf = 0; buf < kFirstUserBuf; ++buf)
    if (exposed[buf]) b.expose(buf);
  b.signal(Counter::kPosted, 0);
  b.waitAll(Counter::kPosted, 0);
  const auto put_or_copy = [](const Slice& src, const Slice& dst) {
    return board::Builder::op(dst.remote() ? StepOpKind::kPut : StepOpKind::kCopy, src, dst);
  };
  for (const KernelSlices& k : kernels[static_cast<size_t>(rank)]) {
    if (k.src.empty() || k.src.size() != (k.pairwise ? k.dst.size() : k.src.size()) ||
        k.dst.empty())
      return InvalidArgument("rank " + std::to_string(rank) +
                             ": a kernel without sources or destinations, or a pairwise one "
                             "whose counts differ");
    if (k.pairwise) {
      // Each pair at once (one kernel), through scratch where both ends are a peer's.
      std::vector<StepOp> ops;
      for (size_t i = 0; i < k.src.size(); ++i) {
        const Slice& s = k.src[i];
        const Slice& d = k.dst[i];
        if (s.count == 0) continue;
        if (!s.remote())
          ops.push_back(put_or_copy(s, d));
        else if (!d.remote())
          ops.push_back(board::Builder::op(StepOpKind::kGet, s, d));
        else
          return InvalidArgument("rank " + std::to_string(rank) +
                                 ": a pairwise kernel copies from one peer to another");
      }
      if (!ops.empty()) b.step(std::move(ops));
      continue;
    }
    const uint64_t count = k.src[0].count;
    if (count == 0) continue;
    const Slice acc(kScratchBuf, 0, count);
    b.fold(k.src, acc);
    if (k.divide) b.step({board::Builder::op(StepOpKind::kDivide, Slice{}, acc)});
    std::vector<StepOp> ops;
    for (const Slice& d : k.dst) ops.push_back(put_or_copy(acc, d));
    b.step(std::move(ops));
  }
  b.signal(Counter::kPosted, 1);
  b.waitAll(Counter::kPosted, 1);

  RankSchedule s = b.take();
  s.device_kernels = true;
  s.scratch_count = scratch;
  s.buffers[kSendBuf] = {BufferRole::kUserSend, a.dtype, SendCount(a), a.memory};
  s.buffers[kRecvBuf] = {BufferRole::kUserRecv, a.dtype, RecvCount(a), a.memory};
  s.buffers[kScratchBuf] = {BufferRole::kScratch, a.dtype, scratch, a.memory};
  s.posts = 2;
  const std::string what = "device kernels ";
  BRAID_RETURN_IF_ERROR(CheckScheduleStructure(s, rank, n, what));
  BRAID_RETURN_IF_ERROR(CheckOneSidedSchedule(s, rank, n, what));
  return s;
}

}  // namespace braid
