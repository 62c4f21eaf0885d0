#include "algorithms/lowering.h"

#include <algorithm>
#include <string>

#include "algorithms/codec.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

bool IsTransferKind(StepOpKind k) {
  return k == StepOpKind::kSend || k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
bool IsQuantizeKind(StepOpKind k) {
  return k == StepOpKind::kQuantize || k == StepOpKind::kDequantize ||
         k == StepOpKind::kDequantizeReduce;
}
bool ReadsSrc(StepOpKind k) {
  return k != StepOpKind::kRecv && k != StepOpKind::kDivide;
}
bool WritesDst(StepOpKind k) {
  return k != StepOpKind::kSend;
}

// Every slice of `s` that names `from` names `to` instead.
void RenameBuffer(RankSchedule& s, uint16_t from, uint16_t to) {
  for (auto& ch : s.channels)
    for (auto& st : ch.steps)
      for (auto& op : st.ops) {
        if (ReadsSrc(op.kind) && op.src.buffer == from) op.src.buffer = to;
        if (WritesDst(op.kind) && op.dst.buffer == from) op.dst.buffer = to;
      }
}

bool HoldsResult(const CollArgs& a, int rank) {
  switch (a.kind) {
    case CollKind::kAllReduce:
    case CollKind::kReduceScatter:
      return true;
    case CollKind::kReduce:
      return rank == a.root;
    default:
      return false;
  }
}

}  // namespace

uint64_t SendCount(const CollArgs& a) {
  switch (a.kind) {
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return a.count * static_cast<uint64_t>(a.nranks);
    case CollKind::kBarrier:
    case CollKind::kSendRecv:
      return 0;
    default:
      return a.count;
  }
}

uint64_t RecvCount(const CollArgs& a) {
  switch (a.kind) {
    case CollKind::kAllGather:
    case CollKind::kAllToAll:
      return a.count * static_cast<uint64_t>(a.nranks);
    case CollKind::kBarrier:
    case CollKind::kSendRecv:
      return 0;
    default:
      return a.count;
  }
}

uint16_t AddBuffer(RankSchedule& s, DataType dtype, uint64_t count) {
  if (s.buffers.size() < kFirstUserBuf) s.buffers.resize(kFirstUserBuf);
  s.buffers.push_back(BufferDesc{BufferRole::kScratch, dtype, count, MemoryType::kHost});
  return static_cast<uint16_t>(s.buffers.size() - 1);
}

Result<RankSchedule> BuildSchedule(const Algorithm& algo, const CollArgs& args, int rank) {
  const bool reduction = args.kind == CollKind::kAllReduce ||
                         args.kind == CollKind::kReduceScatter || args.kind == CollKind::kReduce;
  if ((args.premul || args.avg) && (!reduction || args.op != ReduceOp::kSum))
    return InvalidArgument("pre-multiplied sums and AVG are sums of a reduction collective");
  CollArgs build_args = args;
  if (args.premul) build_args.in_place = false;  // the scaled copy is the input
  auto built = algo.build(build_args, rank);
  if (!built.ok()) return built.status();
  RankSchedule s = std::move(*built);

  if (s.buffers.size() < kFirstUserBuf) s.buffers.resize(kFirstUserBuf);
  s.buffers[kSendBuf] = {BufferRole::kUserSend, args.dtype, SendCount(args), args.memory};
  s.buffers[kRecvBuf] = {BufferRole::kUserRecv, args.dtype, RecvCount(args), args.memory};
  s.buffers[kScratchBuf] = {BufferRole::kScratch, args.dtype, s.scratch_count, MemoryType::kHost};

  if (args.premul) {
    const uint64_t n = SendCount(args);
    const uint16_t scaled = AddBuffer(s, args.dtype, n);
    RenameBuffer(s, kSendBuf, scaled);
    if (s.channels.empty()) s.channels.resize(1);
    // Channel 0's steps move down by one: edges into channel 0 follow them.
    for (auto& ch : s.channels)
      for (auto& st : ch.steps)
        for (auto& d : st.deps)
          if (d.channel == 0) ++d.step;
    Step scale;
    if (n) scale.ops.push_back({StepOpKind::kScale, -1, {kSendBuf, 0, n}, {scaled, 0, n}});
    s.channels[0].steps.insert(s.channels[0].steps.begin(), std::move(scale));
    for (size_t c = 1; c < s.channels.size(); ++c)
      if (!s.channels[c].steps.empty()) s.channels[c].steps[0].deps.push_back({0, 0});
  }

  if (args.avg && HoldsResult(args, rank) && RecvCount(args) > 0) {
    if (s.channels.empty()) s.channels.resize(1);
    Step divide;
    divide.ops.push_back({StepOpKind::kDivide, -1, {}, {kRecvBuf, 0, RecvCount(args)}});
    for (size_t c = 1; c < s.channels.size(); ++c)
      if (!s.channels[c].steps.empty())
        divide.deps.push_back(
            {static_cast<uint16_t>(c), static_cast<uint32_t>(s.channels[c].steps.size() - 1)});
    s.channels[0].steps.push_back(std::move(divide));
  }

  BRAID_RETURN_IF_ERROR(
      CheckScheduleStructure(s, rank, args.nranks, std::string(algo.name()) + " "));
  return s;
}

Result<RankSchedule> BuildPointToPointSchedule(const std::vector<P2PSpec>& calls, int rank,
                                               int nranks, MemoryType memory) {
  RankSchedule s;
  s.channels.resize(1);
  Step step;
  std::vector<size_t> self_sends, self_recvs;
  for (size_t i = 0; i < calls.size(); ++i) {
    const P2PSpec& c = calls[i];
    if (c.peer < 0 || c.peer >= nranks)
      return InvalidArgument("point-to-point call " + std::to_string(i) + " names peer " +
                             std::to_string(c.peer) + " outside [0, " + std::to_string(nranks) +
                             ")");
    s.buffers.push_back({BufferRole::kUserP2P, DataType::kUint8, c.bytes, memory});
    const Slice sl{static_cast<uint16_t>(i), 0, c.bytes};
    if (c.peer == rank) {
      (c.is_send ? self_sends : self_recvs).push_back(i);
      continue;
    }
    StepOp op{c.is_send ? StepOpKind::kSend : StepOpKind::kRecv, c.peer, {}, {}};
    (c.is_send ? op.src : op.dst) = sl;
    step.ops.push_back(op);
  }
  if (self_sends.size() != self_recvs.size())
    return InvalidUsage(std::to_string(self_sends.size()) + " sends to self but " +
                        std::to_string(self_recvs.size()) + " receives from self");
  for (size_t k = 0; k < self_sends.size(); ++k) {
    const uint64_t sb = calls[self_sends[k]].bytes, rb = calls[self_recvs[k]].bytes;
    if (sb != rb)
      return InvalidUsage("send to self #" + std::to_string(k) + " has " + std::to_string(sb) +
                          " bytes, the matching receive from self " + std::to_string(rb));
    step.ops.push_back({StepOpKind::kCopy,
                        -1,
                        {static_cast<uint16_t>(self_sends[k]), 0, sb},
                        {static_cast<uint16_t>(self_recvs[k]), 0, sb}});
  }
  AddStep(s.channels[0], std::move(step));
  if (s.channels[0].steps.empty()) s.channels.clear();
  if (s.buffers.size() > UINT16_MAX)
    return InvalidArgument("a point-to-point group of more than 65535 calls");
  BRAID_RETURN_IF_ERROR(CheckScheduleStructure(s, rank, nranks, "p2p "));
  return s;
}

Status CheckScheduleStructure(const RankSchedule& s, int rank, int nranks,
                              const std::string& what) {
  const size_t nch = s.channels.size();
  auto at = [&](size_t c, size_t k) {
    return what + "rank " + std::to_string(rank) + " channel " + std::to_string(c) + " step " +
           std::to_string(k);
  };
  auto name = [&](uint16_t b) {
    if (b >= s.buffers.size()) return "buffer " + std::to_string(b);
    switch (s.buffers[b].role) {
      case BufferRole::kUserSend:
        return std::string("sendbuf");
      case BufferRole::kUserRecv:
        return std::string("recvbuf");
      case BufferRole::kScratch:
        return b == kScratchBuf ? std::string("scratch") : "scratch buffer " + std::to_string(b);
      case BufferRole::kUserP2P:
        return "buffer of call " + std::to_string(b);
    }
    return std::string("?");
  };
  auto bounds = [&](const Slice& sl) {
    if (sl.buffer >= s.buffers.size())
      return "refers to buffer slot " + std::to_string(sl.buffer) + ", which the table lacks";
    return "slice [" + std::to_string(sl.offset) + ", " + std::to_string(sl.offset + sl.count) +
           ") of " + name(sl.buffer) + " is out of bounds (size " +
           std::to_string(s.buffers[sl.buffer].count) + ")";
  };
  auto slice_ok = [&](const Slice& sl) {
    if (sl.buffer >= s.buffers.size()) return false;
    const uint64_t n = s.buffers[sl.buffer].count;
    return sl.offset <= n && sl.count <= n - sl.offset;
  };
  auto dtype = [&](const Slice& sl) { return s.buffers[sl.buffer].dtype; };
  for (size_t c = 0; c < nch; ++c) {
    const auto& steps = s.channels[c].steps;
    for (size_t k = 0; k < steps.size(); ++k) {
      for (const StepRef& d : steps[k].deps)
        if (d.channel >= nch || d.channel == c || d.step >= s.channels[d.channel].steps.size())
          return InternalError(at(c, k) + ": dependency on channel " + std::to_string(d.channel) +
                               " step " + std::to_string(d.step) +
                               (d.channel == c ? ", its own channel (steps of a channel are "
                                                 "ordered already)"
                                               : ", which does not exist"));
      for (size_t i = 0; i < steps[k].ops.size(); ++i) {
        const StepOp& op = steps[k].ops[i];
        // Built only for an error: this check runs on every schedule the engine builds, and
        // formatting a location per op was a fifth of a 1024-rank simulation's time.
        auto where = [&] {
          return at(c, k) + " op " + std::to_string(i) + " (" + StepOpKindName(op.kind) + "): ";
        };
        if (static_cast<int>(op.kind) >= kNumStepOpKinds)
          return InternalError(where() + "unknown kind");
        if (IsTransferKind(op.kind) && (op.peer < 0 || op.peer >= nranks || op.peer == rank))
          return InternalError(where() + "peer " + std::to_string(op.peer) +
                               " is not another rank");
        const bool reads = ReadsSrc(op.kind), writes = WritesDst(op.kind);
        if (reads && !slice_ok(op.src)) return InternalError(where() + bounds(op.src));
        if (writes && !slice_ok(op.dst)) return InternalError(where() + bounds(op.dst));
        if (IsQuantizeKind(op.kind) != (op.codec != CodecId::kNone))
          return InternalError(where() + "codec " + CodecName(op.codec) +
                               (op.codec == CodecId::kNone ? " on a quantize kind"
                                                           : " on a kind that does not encode"));
        switch (op.kind) {
          case StepOpKind::kQuantize:
            if (dtype(op.dst) != DataType::kUint8 || !CodecSupports(op.codec, dtype(op.src)) ||
                op.dst.count != EncodedBytes(op.codec, dtype(op.src), op.src.count))
              return InternalError(
                  where() + "encodes " + std::to_string(op.src.count) + " " +
                  DataTypeName(dtype(op.src)) + " into " + std::to_string(op.dst.count) +
                  " elements of " + DataTypeName(dtype(op.dst)) + " (needs " +
                  std::to_string(EncodedBytes(op.codec, dtype(op.src), op.src.count)) +
                  " bytes of uint8)");
            break;
          case StepOpKind::kDequantize:
          case StepOpKind::kDequantizeReduce:
            if (dtype(op.src) != DataType::kUint8 || !CodecSupports(op.codec, dtype(op.dst)) ||
                op.src.count != EncodedBytes(op.codec, dtype(op.dst), op.dst.count))
              return InternalError(
                  where() + "decodes " + std::to_string(op.src.count) + " bytes into " +
                  std::to_string(op.dst.count) + " " + DataTypeName(dtype(op.dst)) + " (needs " +
                  std::to_string(EncodedBytes(op.codec, dtype(op.dst), op.dst.count)) +
                  " bytes of uint8)");
            break;
          case StepOpKind::kRecvReduce:
          case StepOpKind::kCopy:
          case StepOpKind::kReduce:
          case StepOpKind::kScale:
            if (op.src.count != op.dst.count || dtype(op.src) != dtype(op.dst))
              return InternalError(where() + "src and dst differ in count or type");
            break;
          default:
            break;
        }
      }
    }
  }
  // No cycle: every channel advances through the steps whose edges are satisfied; steps left
  // over wait on each other.
  std::vector<size_t> done(nch, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t c = 0; c < nch; ++c) {
      const auto& steps = s.channels[c].steps;
      while (done[c] < steps.size() &&
             std::all_of(steps[done[c]].deps.begin(), steps[done[c]].deps.end(),
                         [&](const StepRef& d) { return done[d.channel] > d.step; })) {
        ++done[c];
        progress = true;
      }
    }
  }
  for (size_t c = 0; c < nch; ++c)
    if (done[c] < s.channels[c].steps.size())
      return InternalError(at(c, done[c]) +
                           ": dependency cycle: this step waits, through its edges, on itself");
  return Status::Ok();
}

}  // namespace braid
