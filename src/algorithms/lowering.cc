#include "algorithms/lowering.h"

#include <algorithm>
#include <string>

#include "algorithms/codec.h"
#include "algorithms/device_staging.h"
#include "algorithms/schedule_builder.h"

namespace braid {
namespace {

// Every slice of `s` that names `from` names `to` instead (a peer's too: every rank's table has
// the same layout).
void RenameBuffer(RankSchedule& s, uint16_t from, uint16_t to) {
  for (auto& ch : s.channels)
    for (auto& st : ch.steps)
      for (auto& op : st.ops) {
        if (ReadsSrcKind(op.kind) && op.src.buffer == from) op.src.buffer = to;
        if (ReadsSrc2Kind(op.kind) && op.src2.buffer == from) op.src2.buffer = to;
        if (WritesDstKind(op.kind) && op.dst.buffer == from) op.dst.buffer = to;
      }
}

// Whether every read of the send buffer in `s` is a local copy of this rank's: then a
// pre-multiplied sum scales in those copies (the board posts the scaled input straight into its
// window) instead of a scaled scratch copy of the whole input first.
bool SendBufferOnlyCopied(const RankSchedule& s) {
  for (const auto& ch : s.channels)
    for (const auto& st : ch.steps)
      for (const auto& op : st.ops) {
        const bool reads = (ReadsSrcKind(op.kind) && op.src.buffer == kSendBuf) ||
                           (ReadsSrc2Kind(op.kind) && op.src2.buffer == kSendBuf);
        if (reads && (op.kind != StepOpKind::kCopy || op.src.remote())) return false;
      }
  return true;
}

// 1 + the largest post a schedule signals (0: it posts nothing).
uint32_t PostsOf(const RankSchedule& s) {
  int64_t last = -1;
  for (const auto& ch : s.channels)
    for (const auto& st : ch.steps)
      for (const auto& op : st.ops)
        if (op.kind == StepOpKind::kSignal && op.counter == Counter::kPosted)
          last = std::max<int64_t>(last, op.value);
  return static_cast<uint32_t>(last + 1);
}

// A window larger than its place on the board can hold.
Status CheckWindows(const RankSchedule& s, const CollArgs& args, const std::string& what) {
  for (size_t i = 0; i < s.buffers.size(); ++i) {
    const BufferDesc& b = s.buffers[i];
    if (b.role != BufferRole::kWindow) continue;
    const uint64_t room = b.place == WindowPlace::kEntry  ? args.board.entry_bytes
                          : b.place == WindowPlace::kSlot ? args.board.slot_bytes
                                                          : args.board.capacity;
    const uint64_t bytes = b.count * DataTypeSize(b.dtype);
    if (bytes > room)
      return InternalError(what + "window " + std::to_string(i) + " of " + std::to_string(bytes) +
                           " bytes does not fit its place on the board (" + std::to_string(room) +
                           " bytes)");
  }
  return Status::Ok();
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

// What a slice on a peer may name, and which ops may name one (IR v3): gets read a peer's slice,
// puts write a peer's window, kCombine and kReduce may read a peer's; nothing else touches a
// peer's memory. A peer's slice is of a window or of a buffer the peer exposes (its user
// buffers, or scratch: a pre-multiplied sum's scaled input); an exposed buffer is one of the
// first four slots (the exposure record a post carries holds four addresses).
Status CheckRemoteSlices(const RankSchedule& s, const StepOp& op, int rank, int nranks) {
  const auto check = [&](const Slice& sl, bool write) -> Status {
    if (!sl.remote()) return Status::Ok();
    if (sl.rank < 0 || sl.rank >= nranks || sl.rank == rank)
      return InvalidArgument("names rank " + std::to_string(sl.rank) +
                             "'s memory, which is not another rank");
    const BufferRole role = s.buffers[sl.buffer].role;
    if (role == BufferRole::kUserP2P || (role != BufferRole::kWindow && sl.buffer > kFirstUserBuf))
      return InvalidArgument("names buffer " + std::to_string(sl.buffer) + " of rank " +
                             std::to_string(sl.rank) +
                             ", which is neither a window nor a buffer a rank can expose");
    if (write && role != BufferRole::kWindow && !s.device_kernels)
      return InvalidArgument("writes into rank " + std::to_string(sl.rank) +
                             "'s buffer, which is not a window");
    return Status::Ok();
  };
  const bool src_may = op.kind == StepOpKind::kGet || op.kind == StepOpKind::kCombine ||
                       op.kind == StepOpKind::kReduce;
  if (op.kind == StepOpKind::kGet && !op.src.remote())
    return InvalidArgument("gets from this rank's own memory (a copy)");
  if (op.kind == StepOpKind::kPut && !op.dst.remote())
    return InvalidArgument("puts into this rank's own memory (a copy)");
  if (op.kind == StepOpKind::kExpose && op.src.buffer > kFirstUserBuf)
    return InvalidArgument("exposes buffer " + std::to_string(op.src.buffer) +
                           ": only the first four slots can be exposed");
  if (ReadsSrcKind(op.kind) && op.src.remote() && !src_may)
    return InvalidArgument("reads another rank's memory, which only get, combine and reduce may");
  if (WritesDstKind(op.kind) && op.dst.remote() && op.kind != StepOpKind::kPut)
    return InvalidArgument("writes another rank's memory, which only put may");
  if (ReadsSrcKind(op.kind)) BRAID_RETURN_IF_ERROR(check(op.src, false));
  if (ReadsSrc2Kind(op.kind)) BRAID_RETURN_IF_ERROR(check(op.src2, false));
  if (WritesDstKind(op.kind)) BRAID_RETURN_IF_ERROR(check(op.dst, true));
  return Status::Ok();
}

// What the engine's one-sided executor (core/runtime/one_sided_run.h) relies on, beyond what the
// verifier proves: one channel; the call agreement before any user buffer is written (every
// peer's first post awaited, so that a mismatched call leaves the user's memory as it was); an
// exposure only before the first post (its record travels in that post's entry, which must then
// hold no window).
Status CheckOneSidedShape(RankSchedule& s, int rank, int nranks, const std::string& what) {
  bool one_sided = false;
  for (const BufferDesc& b : s.buffers) one_sided = one_sided || b.role == BufferRole::kWindow;
  for (const Channel& ch : s.channels)
    for (const Step& st : ch.steps)
      for (const StepOp& op : st.ops) one_sided = one_sided || IsOneSidedKind(op.kind);
  if (!one_sided) return Status::Ok();
  const auto bad = [&](const std::string& m) {
    return InternalError(what + "rank " + std::to_string(rank) + "'s one-sided schedule: " + m);
  };
  if (s.channels.size() != 1) return bad("one-sided steps run on one channel");
  if (s.posts == 0) return bad("it never posts");
  std::vector<uint8_t> seen(static_cast<size_t>(nranks), 0);
  int waited = 0;
  bool posted = false;
  for (size_t k = 0; k < s.channels[0].steps.size(); ++k) {
    const Step& st = s.channels[0].steps[k];
    for (const StepOp& op : st.ops) {
      if ((op.kind == StepOpKind::kSignal && op.counter == Counter::kPosted) ||
          op.kind == StepOpKind::kPut)
        s.last_post_step = static_cast<uint32_t>(k);
      if (IsTransferKind(op.kind)) return bad("it mixes streams with one-sided steps");
      const bool user_write = WritesDstKind(op.kind) && !op.dst.remote() &&
                              (s.buffers[op.dst.buffer].role == BufferRole::kUserRecv ||
                               s.buffers[op.dst.buffer].role == BufferRole::kUserSend);
      if (user_write && waited < nranks - 1)
        return bad(
            "it writes a user buffer before it has seen every peer's first post (the "
            "call agreement)");
      if (op.kind == StepOpKind::kExpose) {
        if (posted) return bad("it exposes a buffer after its first post");
        s.exposure = true;
      }
      for (const Slice* sl : {&op.src, &op.src2})
        if (sl->remote() && s.buffers[sl->buffer].role != BufferRole::kWindow) s.exposure = true;
      if (op.kind == StepOpKind::kSignal && op.counter == Counter::kPosted) posted = true;
    }
    for (const StepOp& op : st.ops)
      if (op.kind == StepOpKind::kWait && op.counter == Counter::kPosted && op.value == 0 &&
          !seen[static_cast<size_t>(op.peer)]) {
        seen[static_cast<size_t>(op.peer)] = 1;
        ++waited;
      }
  }
  if (s.exposure)
    for (const BufferDesc& b : s.buffers)
      if (b.role == BufferRole::kWindow && b.place == WindowPlace::kEntry && b.post == 0)
        return bad("it exposes a buffer and posts data in its first post's entry");
  return Status::Ok();
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
  // Device buffers: the staged form, whose host part comes back here.
  if (args.memory != MemoryType::kHost) return BuildStagedSchedule(algo, args, rank);
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

  if (args.premul && SendBufferOnlyCopied(s)) {
    for (auto& ch : s.channels)
      for (auto& st : ch.steps)
        for (auto& op : st.ops)
          if (op.kind == StepOpKind::kCopy && op.src.buffer == kSendBuf)
            op.kind = StepOpKind::kScale;
  } else if (args.premul) {
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

  // The device kernels' rules are for their proof alone (device_kernel_schedule.h): a schedule
  // the engine may run never has them.
  if (s.device_kernels)
    return InternalError(std::string(algo.name()) +
                         " built a schedule marked as device kernels, which the engine cannot run");
  s.posts = PostsOf(s);
  BRAID_RETURN_IF_ERROR(
      CheckScheduleStructure(s, rank, args.nranks, std::string(algo.name()) + " "));
  BRAID_RETURN_IF_ERROR(CheckWindows(s, args, std::string(algo.name()) + " "));
  BRAID_RETURN_IF_ERROR(CheckOneSidedShape(s, rank, args.nranks, std::string(algo.name()) + " "));
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

Status CheckOneSidedSchedule(RankSchedule& s, int rank, int nranks, const std::string& what) {
  return CheckOneSidedShape(s, rank, nranks, what);
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
      case BufferRole::kWindow:
        return "window " + std::to_string(b);
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
        // A rank may wait for its own kConsumed counter (board_builder.h waitFree: its earlier
        // calls' reads of its own windows), never for its own post or a transfer with itself.
        const bool own_counter = op.kind == StepOpKind::kWait && op.counter == Counter::kConsumed;
        if ((IsTransferKind(op.kind) || op.kind == StepOpKind::kWait) &&
            (op.peer < 0 || op.peer >= nranks || (op.peer == rank && !own_counter)))
          return InternalError(where() + "peer " + std::to_string(op.peer) +
                               " is not another rank");
        const bool reads = ReadsSrcKind(op.kind), writes = WritesDstKind(op.kind);
        if (reads && !slice_ok(op.src)) return InternalError(where() + bounds(op.src));
        if (ReadsSrc2Kind(op.kind) && !slice_ok(op.src2))
          return InternalError(where() + bounds(op.src2));
        if (writes && !slice_ok(op.dst)) return InternalError(where() + bounds(op.dst));
        // Device memory is touched by the staging copies alone (device_staging.h): no transport
        // and no host kernel may dereference it. A device kernel's schedule is the exception
        // (device_kernel_schedule.h): the engine never runs one.
        auto device = [&](const Slice& sl) {
          return s.buffers[sl.buffer].memory != MemoryType::kHost;
        };
        const bool on_device = (reads && device(op.src)) ||
                               (ReadsSrc2Kind(op.kind) && device(op.src2)) ||
                               (writes && device(op.dst));
        if (on_device && !IsStagingCopy(s, op) && !s.device_kernels)
          return InternalError(where() +
                               "touches device memory, which only a staging copy (device to host "
                               "or host to device) may");
        if (Status st = CheckRemoteSlices(s, op, rank, nranks); !st.ok())
          return InternalError(where() + st.message());
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
          case StepOpKind::kGet:
          case StepOpKind::kPut:
            if (op.src.count != op.dst.count || dtype(op.src) != dtype(op.dst))
              return InternalError(where() + "src and dst differ in count or type");
            break;
          case StepOpKind::kCombine:
            if (op.src.count != op.dst.count || op.src2.count != op.dst.count ||
                dtype(op.src) != dtype(op.dst) || dtype(op.src2) != dtype(op.dst))
              return InternalError(where() + "its operands differ in count or type");
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
