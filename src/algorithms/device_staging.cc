#include "algorithms/device_staging.h"

#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/lowering.h"

namespace braid {

namespace {

bool ElementWise(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduce || k == CollKind::kBroadcast;
}

// Whether `s` reads its send buffer, writes its receive buffer.
bool ReadsBuffer(const RankSchedule& s, uint16_t b) {
  for (const auto& ch : s.channels)
    for (const auto& st : ch.steps)
      for (const auto& op : st.ops)
        if ((ReadsSrcKind(op.kind) && op.src.buffer == b) ||
            (ReadsSrc2Kind(op.kind) && op.src2.buffer == b) ||
            (ReadsDstKind(op.kind) && op.dst.buffer == b))
          return true;
  return false;
}
bool WritesBuffer(const RankSchedule& s, uint16_t b) {
  for (const auto& ch : s.channels)
    for (const auto& st : ch.steps)
      for (const auto& op : st.ops)
        if (WritesDstKind(op.kind) && op.dst.buffer == b) return true;
  return false;
}

}  // namespace

bool IsStagingCopy(const RankSchedule& s, const StepOp& op) {
  if (op.kind != StepOpKind::kCopy || op.src.buffer >= s.buffers.size() ||
      op.dst.buffer >= s.buffers.size())
    return false;
  // Exactly one side on the host: device to host or host to device.
  return (s.buffers[op.src.buffer].memory == MemoryType::kHost) !=
         (s.buffers[op.dst.buffer].memory == MemoryType::kHost);
}

Result<RankSchedule> BuildStagedSchedule(const Algorithm& algo, const CollArgs& args, int rank) {
  const std::string what = std::string(algo.name()) + " on " + MemoryTypeName(args.memory) +
                           " memory, rank " + std::to_string(rank) + ": ";
  if (args.in_place && args.kind == CollKind::kAllToAll)
    return InvalidArgument(what + "an in-place all-to-all is not staged");
  CollArgs host = args;
  host.memory = MemoryType::kHost;
  host.in_place = false;  // the staging buffers are two
  const uint64_t send_n = SendCount(args), recv_n = RecvCount(args);
  // Pieces of `per` elements (element-wise collectives only: a piece of the others would be
  // strided in their buffers).
  uint64_t per = args.count;
  if (ElementWise(args.kind) && args.staging_piece_bytes > 0 && args.count > 0)
    per = std::max<uint64_t>(1, args.staging_piece_bytes / DataTypeSize(args.dtype));
  const uint64_t pieces =
      ElementWise(args.kind) && per < args.count ? (args.count + per - 1) / per : 1;

  RankSchedule out;
  out.buffers.resize(kFirstUserBuf);
  out.buffers[kSendBuf] = {BufferRole::kUserSend, args.dtype, send_n, args.memory};
  out.buffers[kRecvBuf] = {BufferRole::kUserRecv, args.dtype, recv_n, args.memory};
  out.buffers[kScratchBuf] = {BufferRole::kScratch, args.dtype, 0, MemoryType::kHost};
  const uint16_t stage_send = AddBuffer(out, args.dtype, send_n);
  const uint16_t stage_recv = AddBuffer(out, args.dtype, recv_n);
  // The input in the user's buffers: in place, an all-gather's is this rank's block of the
  // receive buffer (the only alias of it that exists); every other's is the send buffer.
  const Slice input = args.in_place && args.kind == CollKind::kAllGather
                          ? Slice{kRecvBuf, static_cast<uint64_t>(rank) * args.count, args.count}
                          : Slice{kSendBuf, 0, send_n};

  std::vector<RankSchedule> parts;
  std::vector<bool> has_result;  // the piece writes its receive buffer (before parts are moved)
  for (uint64_t k = 0; k < pieces; ++k) {
    CollArgs pa = host;
    if (pieces > 1) pa.count = std::min(per, args.count - k * per);
    auto built = BuildSchedule(algo, pa, rank);
    if (!built.ok()) return Status(built.status()).prepend(what);
    if (IsOneSidedSchedule(*built) || built->exposure || built->posts > 0)
      return InvalidArgument(what + "a one-sided (board) schedule is not staged");
    has_result.push_back(WritesBuffer(*built, kRecvBuf));
    parts.push_back(std::move(*built));
  }

  // Channel 0, the stream: every piece's copy in first (as the agent queues them)...
  out.channels.resize(1);
  std::vector<int64_t> copy_in(pieces, -1);
  for (uint64_t k = 0; k < pieces; ++k) {
    if (!ReadsBuffer(parts[k], kSendBuf)) continue;  // a broadcast's non-root reads nothing
    const uint64_t off = pieces > 1 ? k * per : 0;
    const uint64_t n = pieces > 1 ? parts[k].buffers[kSendBuf].count : send_n;
    if (n == 0) continue;
    auto& stream = out.channels[0].steps;
    copy_in[k] = static_cast<int64_t>(stream.size());
    stream.push_back(Step(
        {{StepOpKind::kCopy, -1, {input.buffer, input.offset + off, n}, {stage_send, off, n}}}));
  }
  // ...then each piece's host schedule on channels of its own, after its copy in and after the
  // previous piece (the agent runs them one after another).
  std::vector<StepRef> previous_ends;
  std::vector<std::vector<StepRef>> ends(pieces);
  for (uint64_t k = 0; k < pieces; ++k) {
    RankSchedule& p = parts[k];
    const uint64_t off = pieces > 1 ? k * per : 0;
    // Its buffers: the user's become the staging buffers (at the piece's offset), its scratch
    // buffers are appended.
    std::vector<uint16_t> to(p.buffers.size());
    to[kSendBuf] = stage_send;
    to[kRecvBuf] = stage_recv;
    for (size_t b = kScratchBuf; b < p.buffers.size(); ++b) {
      if (p.buffers[b].role == BufferRole::kWindow)
        return InvalidArgument(what + "a schedule with board windows is not staged");
      out.buffers.push_back(p.buffers[b]);
      to[b] = static_cast<uint16_t>(out.buffers.size() - 1);
    }
    auto remap = [&](Slice& sl) {
      if (sl.buffer == kSendBuf || sl.buffer == kRecvBuf) sl.offset += off;
      sl.buffer = to[sl.buffer];
    };
    // Piece k's channel c continues channel 1 + c after the earlier pieces' steps (the engine's
    // channels, reused piece after piece: a channel's steps are ordered already).
    if (out.channels.size() < 1 + p.channels.size()) out.channels.resize(1 + p.channels.size());
    std::vector<uint32_t> at(p.channels.size());
    for (size_t c = 0; c < p.channels.size(); ++c)
      at[c] = static_cast<uint32_t>(out.channels[1 + c].steps.size());
    for (size_t c = 0; c < p.channels.size(); ++c) {
      Channel& ch = p.channels[c];
      const auto mine = static_cast<uint16_t>(1 + c);
      for (Step& st : ch.steps) {
        for (StepOp& op : st.ops) {
          if (ReadsSrcKind(op.kind)) remap(op.src);
          if (ReadsSrc2Kind(op.kind)) remap(op.src2);
          if (WritesDstKind(op.kind) || ReadsDstKind(op.kind)) remap(op.dst);
        }
        for (StepRef& d : st.deps) {
          d.step += at[d.channel];
          d.channel = static_cast<uint16_t>(1 + d.channel);
        }
      }
      if (ch.steps.empty()) continue;
      // Its first step after its copy in and after the previous piece on the other channels.
      auto& first = ch.steps.front().deps;
      if (copy_in[k] >= 0) first.push_back({0, static_cast<uint32_t>(copy_in[k])});
      for (const StepRef& e : previous_ends)
        if (e.channel != mine) first.push_back(e);
      auto& steps = out.channels[mine].steps;
      for (Step& st : ch.steps) steps.push_back(std::move(st));
      ends[k].push_back({mine, static_cast<uint32_t>(steps.size() - 1)});
    }
    if (!ends[k].empty()) previous_ends = ends[k];
  }
  // ...and on the stream, each piece's result back once that piece is done.
  for (uint64_t k = 0; k < pieces; ++k) {
    if (!has_result[k]) continue;  // a reduce's non-root has no result
    const uint64_t off = pieces > 1 ? k * per : 0;
    const uint64_t n = pieces > 1 ? parts[k].buffers[kRecvBuf].count : recv_n;
    if (n == 0) continue;
    out.channels[0].steps.push_back(
        Step({{StepOpKind::kCopy, -1, {stage_recv, off, n}, {kRecvBuf, off, n}}}, ends[k]));
  }
  BRAID_RETURN_IF_ERROR(CheckScheduleStructure(out, rank, args.nranks, what));
  return out;
}

}  // namespace braid
