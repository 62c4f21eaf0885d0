#include "algorithms/schedule_builder.h"

#include <algorithm>
#include <string>
#include <utility>

namespace braid {

ElemRange EvenPart(uint64_t total, uint64_t parts, uint64_t i) {
  const uint64_t base = total / parts;
  const uint64_t rem = total % parts;
  ElemRange r;
  r.off = i * base + std::min(i, rem);
  r.len = base + (i < rem ? 1 : 0);
  return r;
}

uint64_t ChunkElems(const CollArgs& args) {
  const uint64_t size = DataTypeSize(args.dtype);
  const uint64_t elems = size ? args.chunk_bytes / size : args.chunk_bytes;
  return std::max<uint64_t>(elems, 1);
}

int ChannelsFor(const CollArgs& args, uint64_t elems, uint64_t bytes) {
  const uint64_t chunk = std::max<uint64_t>(args.chunk_bytes, 1);
  uint64_t n = (bytes + chunk - 1) / chunk;
  n = std::min<uint64_t>(n, static_cast<uint64_t>(std::max(args.nchannels, 1)));
  n = std::min<uint64_t>(n, elems);
  return static_cast<int>(std::max<uint64_t>(n, 1));
}

Status CheckBuildArgs(const Algorithm& algo, const CollArgs& args, int rank) {
  const std::string who = std::string(algo.name()) + " " + CollKindName(args.kind) + ": ";
  if (args.nranks < 1) return InvalidArgument(who + "nranks must be >= 1");
  if (rank < 0 || rank >= args.nranks)
    return InvalidArgument(who + "rank " + std::to_string(rank) + " outside [0, " +
                           std::to_string(args.nranks) + ")");
  if (args.nchannels < 1) return InvalidArgument(who + "nchannels must be >= 1");
  if ((args.kind == CollKind::kBroadcast || args.kind == CollKind::kReduce) &&
      (args.root < 0 || args.root >= args.nranks))
    return InvalidArgument(who + "root " + std::to_string(args.root) + " outside [0, " +
                           std::to_string(args.nranks) + ")");
  if (!IsValidDataType(static_cast<int>(args.dtype)))
    return InvalidArgument(who + "invalid datatype " +
                           std::to_string(static_cast<int>(args.dtype)));
  if (!algo.supports(args))
    return InvalidArgument(who + "not supported by this algorithm" +
                           (args.in_place ? " (in place)" : ""));
  return Status::Ok();
}

void AppendSends(Step& step, int peer, uint16_t buf, uint64_t off, uint64_t len, uint64_t chunk) {
  const uint64_t n = SliceCount(len, chunk);
  for (uint64_t i = 0; i < n; ++i) {
    const ElemRange p = EvenPart(len, n, i);
    step.ops.push_back(StepOp{StepOpKind::kSend, peer, MakeSlice(buf, off + p.off, p.len), {}});
  }
}

void AppendRecvs(Step& step, int peer, uint16_t buf, uint64_t off, uint64_t len, uint64_t chunk) {
  const uint64_t n = SliceCount(len, chunk);
  for (uint64_t i = 0; i < n; ++i) {
    const ElemRange p = EvenPart(len, n, i);
    step.ops.push_back(StepOp{StepOpKind::kRecv, peer, {}, MakeSlice(buf, off + p.off, p.len)});
  }
}

void AppendRecvReduces(Step& step, int peer, uint16_t src_buf, uint64_t src_off, uint16_t dst_buf,
                       uint64_t dst_off, uint64_t len, uint64_t chunk) {
  const uint64_t n = SliceCount(len, chunk);
  for (uint64_t i = 0; i < n; ++i) {
    const ElemRange p = EvenPart(len, n, i);
    step.ops.push_back(StepOp{StepOpKind::kRecvReduce, peer,
                              MakeSlice(src_buf, src_off + p.off, p.len),
                              MakeSlice(dst_buf, dst_off + p.off, p.len)});
  }
}

void AppendCopy(Step& step, uint16_t src_buf, uint64_t src_off, uint16_t dst_buf, uint64_t dst_off,
                uint64_t len) {
  if (len == 0) return;
  step.ops.push_back(StepOp{StepOpKind::kCopy, -1, MakeSlice(src_buf, src_off, len),
                            MakeSlice(dst_buf, dst_off, len)});
}

void AddStep(Channel& channel, Step&& step) {
  if (!step.ops.empty()) channel.steps.push_back(std::move(step));
}

RankSchedule LocalCopySchedule(uint64_t count, bool in_place) {
  RankSchedule s;
  if (in_place || count == 0) return s;
  s.channels.resize(1);
  Step st;
  AppendCopy(st, kSendBuf, 0, kRecvBuf, 0, count);
  AddStep(s.channels[0], std::move(st));
  return s;
}

}  // namespace braid
