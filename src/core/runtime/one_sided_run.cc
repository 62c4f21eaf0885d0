#include "core/runtime/one_sided_run.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/runtime/comm.h"
#include "device/cpu/reduce_kernels.h"
#include "device/cpu/streaming_copy.h"
#include "transport/cross_memory.h"

namespace braid {
namespace {

// Marks a signature as a call's (a garbage or stale board word never matches): the top byte of
// word 0. Word 0 holds, from bit 0: kind (8 bits), type (8), op (8), AVG (1), pre-multiplied (1),
// the form (3), the codec (3) and its block size (21 bits: braid.h's blocks are at most 2^20).
constexpr uint64_t kSignatureMagic = 0x6f;
// Elements a reduce reads from a peer's exposed buffer at a time: two pieces of this size (the
// one read, the next one) stay in a core's L2.
constexpr uint64_t kPullPieceBytes = 128 << 10;
// Slots a rank can expose (the record its first post carries: one address each).
constexpr uint16_t kExposable = 4;
static_assert(kExposable * sizeof(uint64_t) <= 32, "the exposure record fits a board entry");

BoardPlace PlaceOf(WindowPlace p) {
  return static_cast<BoardPlace>(static_cast<uint8_t>(p));
}

const char* FormName(uint8_t form) {
  switch (form) {
    case 1:
      return " (two-shot)";
    case 2:
      return " (in rounds)";
    case 3:
      return " (by reference)";
    case 4:
      return " (on the engine)";
    default:
      return "";
  }
}

}  // namespace

// ---------------------------------------------------------------------------- BoardClock

uint32_t BoardClock::take(uint32_t posts, bool known) {
  const uint32_t epoch = next_;
  if (count_ == kCalls) {
    // More calls in flight than the ring holds: the oldest must be done (the engine's window is
    // far smaller); forget it.
    head_ = (head_ + 1) % kCalls;
    --count_;
  }
  Call& c = calls_[(head_ + count_++) % kCalls];
  c.epoch = epoch;
  c.through = epoch - 1;
  c.done = false;
  if (known) {
    c.last = epoch + posts - 1;
    next_ = epoch + posts;
  } else {
    c.last = epoch;  // at least its first post
    open_ = true;
  }
  return epoch;
}

void BoardClock::settle(uint32_t epoch, uint32_t posts) {
  for (size_t k = 0; k < count_; ++k) {
    Call& c = calls_[(head_ + k) % kCalls];
    if (c.epoch != epoch) continue;
    c.last = epoch + posts - 1;
    if (open_ && k + 1 == count_) {
      next_ = epoch + posts;
      open_ = false;
    }
    return;
  }
}

uint32_t BoardClock::consumed(uint32_t epoch, uint32_t through, bool done) {
  for (size_t k = 0; k < count_; ++k) {
    Call& c = calls_[(head_ + k) % kCalls];
    if (c.epoch != epoch) continue;
    c.through = std::max(c.through, through);
    c.done = c.done || done;
    break;
  }
  // Every post up to the first call still reading, and what that call has read.
  uint32_t upto = published_;
  while (count_ > 0) {
    Call& front = calls_[head_];
    if (!front.done) {
      upto = std::max(upto, front.through);
      break;
    }
    upto = std::max(upto, front.last);
    head_ = (head_ + 1) % kCalls;
    --count_;
  }
  if (upto == published_) return 0;
  published_ = upto;
  return upto;
}

// ---------------------------------------------------------------------------- signatures

BoardSignature BoardSignatureOf(const OpDesc& d, int nranks, uint8_t form) {
  BoardSignature s;
  s.words[0] = kSignatureMagic << 56 | static_cast<uint64_t>(d.kind) |
               static_cast<uint64_t>(d.dtype) << 8 | static_cast<uint64_t>(d.base_op) << 16 |
               uint64_t{d.avg} << 24 | uint64_t{d.premul} << 25 |
               static_cast<uint64_t>(form & 7) << 26 |
               static_cast<uint64_t>(static_cast<uint8_t>(d.codec.id) & 7) << 29 |
               static_cast<uint64_t>(d.codec.block & 0x1fffff) << 32;
  s.words[1] = d.count;
  s.words[2] = static_cast<uint64_t>(static_cast<uint32_t>(d.root)) |
               static_cast<uint64_t>(static_cast<uint32_t>(nranks)) << 32;
  return s;
}

std::string DescribeBoardSignature(const BoardSignature& s) {
  const uint64_t w = s.words[0];
  const auto kind = static_cast<unsigned>(w & 0xff), dtype = static_cast<unsigned>(w >> 8 & 0xff),
             op = static_cast<unsigned>(w >> 16 & 0xff);
  if (w >> 56 != kSignatureMagic || kind >= static_cast<unsigned>(kNumCollKinds) ||
      !IsValidDataType(static_cast<int>(dtype)) || op >= static_cast<unsigned>(braidNumOps)) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(w));
    return std::string("a call this rank cannot read (signature word 0x") + buf + ")";
  }
  OpDesc d;
  d.kind = static_cast<CollKind>(kind);
  d.dtype = static_cast<DataType>(dtype);
  d.base_op = static_cast<ReduceOp>(op);
  d.avg = (w >> 24 & 1) != 0;
  d.premul = (w >> 25 & 1) != 0;
  d.codec = Codec(static_cast<CodecId>(w >> 29 & 7), static_cast<uint32_t>(w >> 32 & 0x1fffff));
  d.count = s.words[1];
  d.root = static_cast<int32_t>(static_cast<uint32_t>(s.words[2]));
  return DescribeCall(d) + FormName(static_cast<uint8_t>(w >> 26 & 7));
}

// ---------------------------------------------------------------------------- OneSidedRun

void OneSidedRun::start(braidComm& comm, const RankSchedule& s, const OpDesc& d,
                        const BoardSignature& sig, std::span<std::byte* const> slots,
                        std::vector<std::byte>* scratch) {
  comm_ = &comm;
  board_ = comm.board();
  sched_ = &s;
  steps_ = &s.channels[0].steps;
  d_ = &d;
  // A call of one post takes its number whatever its agreement finds; one of more says how many
  // it took once its agreement is over (settle).
  epoch_ = comm.boardClock().take(s.posts, s.posts == 1);
  settled_ = s.posts == 1;
  sig_ = sig;
  slots_.assign(slots.begin(), slots.end());
  slots_.resize(s.buffers.size(), nullptr);
  elsize_.resize(s.buffers.size());
  for (size_t i = 0; i < s.buffers.size(); ++i) {
    const BufferDesc& b = s.buffers[i];
    elsize_[i] = static_cast<uint32_t>(DataTypeSize(b.dtype));
    // This rank's windows: its side of the board at the call's posts.
    if (b.role == BufferRole::kWindow)
      slots_[i] = board_->outbox(epoch_ + b.post, PlaceOf(b.place));
  }
  scratch_ = scratch;
  step_ = 0;
  met_ = 0;
  mismatch_ = false;
  agreed_ = comm.nranks() == 1;
  first_waits_ = 0;
  seen_first_.assign(static_cast<size_t>(comm.nranks()), 0);
  if (s.exposure) exposed_.assign(static_cast<size_t>(comm.nranks()) * kExposable, 0);
  blocked_ = {};
  unpublished_ = false;
}

void OneSidedRun::finish() {
  if (!settled_) {
    comm_->boardClock().settle(epoch_, posts());
    settled_ = true;
  }
  if (const uint32_t upto = comm_->boardClock().consumed(epoch_, epoch_ + posts() - 1, true))
    board_->consume(upto);
}

std::byte* OneSidedRun::window(uint16_t buf, int rank) const {
  const BufferDesc& b = sched_->buffers[buf];
  const uint32_t seq = epoch_ + b.post;
  if (rank == kLocal || rank == comm_->rank()) return board_->outbox(seq, PlaceOf(b.place));
  return board_->peerWindow(rank, seq, PlaceOf(b.place));
}

const std::byte* OneSidedRun::readable(const Slice& sl) const {
  const BufferDesc& b = sched_->buffers[sl.buffer];
  if (b.role == BufferRole::kWindow)
    return window(sl.buffer, sl.rank) + sl.offset * elsize_[sl.buffer];
  if (!sl.remote()) return local(sl);
  return nullptr;
}

Status OneSidedRun::pull(const Slice& sl, uint64_t from, uint64_t n, std::byte* dst) {
  const size_t es = elsize_[sl.buffer];
  const auto peer = static_cast<size_t>(sl.rank);
  const uint64_t base =
      sl.buffer < kExposable && !exposed_.empty() ? exposed_[peer * kExposable + sl.buffer] : 0;
  if (base == 0)
    return InternalError("rank " + std::to_string(sl.rank) + " has not exposed buffer " +
                         std::to_string(sl.buffer) + " to this call");
  const uint64_t bytes = n * es;
  const int pid = comm_->rankInfos()[peer].pid;
  const int err = ReadPeerMemory(pid, base + (sl.offset + from) * es, dst, bytes);
  if (err == 0) return Status::Ok();
  if (err == ESRCH || board_->dead(sl.rank)) return board_->deathError(sl.rank);
  return SystemError(
      "reading " + std::to_string(bytes) + " bytes of rank " + std::to_string(sl.rank) +
      "'s buffer in place (cross-memory attach) failed: " + std::strerror(err) +
      (err == EFAULT ? " (a buffer smaller than the call's count, on that rank or this one?)"
                     : ""));
}

Status OneSidedRun::reduce(const StepOp& op, bool combine) {
  const DataType dt = sched_->buffers[op.dst.buffer].dtype;
  const ReduceOp rop = d_->base_op;
  std::byte* dst = local(op.dst);
  const uint64_t count = op.dst.count;
  const std::byte* a = combine ? readable(op.src) : dst;
  const std::byte* b = combine ? readable(op.src2) : readable(op.src);
  if (a && b) {  // loads from mapped memory: one pass
    ReduceKernel(dt, rop, a, b, dst, count);
    return Status::Ok();
  }
  // A peer's exposed buffer: read in pieces into scratch, fold each while it is in cache.
  const size_t es = DataTypeSize(dt);
  const uint64_t per = std::max<uint64_t>(1, kPullPieceBytes / es);
  if (scratch_->size() < 2 * per * es) scratch_->resize(2 * per * es);
  std::byte* pa = scratch_->data();
  std::byte* pb = pa + per * es;
  for (uint64_t done = 0; done < count; done += per) {
    const uint64_t n = std::min(per, count - done);
    const std::byte* x;
    const std::byte* y;
    if (combine) {
      if (a) {
        x = a + done * es;
      } else {
        BRAID_RETURN_IF_ERROR(pull(op.src, done, n, pa));
        x = pa;
      }
      if (b) {
        y = b + done * es;
      } else {
        BRAID_RETURN_IF_ERROR(pull(op.src2, done, n, pb));
        y = pb;
      }
    } else {
      x = dst + done * es;
      BRAID_RETURN_IF_ERROR(pull(op.src, done, n, pb));
      y = pb;
    }
    ReduceKernel(dt, rop, x, y, dst + done * es, n);
  }
  return Status::Ok();
}

bool OneSidedRun::waitMet(const StepOp& op) {
  const int64_t target = static_cast<int64_t>(epoch_) + op.value;
  if (target <= 0) return true;  // a post before the board's first: nothing to wait for
  const auto seq = static_cast<uint32_t>(target);
  if (op.counter == Counter::kConsumed) return board_->consumed(op.peer, seq);
  return board_->posted(op.peer, seq);
}

bool OneSidedRun::blockedReady() const {
  if (blocked_.peer < 0) return true;
  return blocked_.counter == Counter::kConsumed ? board_->consumed(blocked_.peer, blocked_.value)
                                                : board_->posted(blocked_.peer, blocked_.value);
}

void OneSidedRun::publish() {
  if (!unpublished_) return;
  board_->publish();
  unpublished_ = false;
}

void OneSidedRun::count(const StepOp& op) {
  const int me = comm_->rank();
  const auto remote = [&](const Slice& sl) { return sl.rank != kLocal && sl.rank != me; };
  if (op.kind == StepOpKind::kPut) {
    if (remote(op.dst)) board_->countWritten(op.dst.rank, op.dst.count * elsize_[op.dst.buffer]);
    return;
  }
  if (!ReadsSrcKind(op.kind)) return;
  if (remote(op.src)) board_->countRead(op.src.rank, op.src.count * elsize_[op.src.buffer]);
  if (op.kind == StepOpKind::kCombine && remote(op.src2))
    board_->countRead(op.src2.rank, op.src2.count * elsize_[op.src2.buffer]);
}

Status OneSidedRun::runOp(const StepOp& op) {
  switch (op.kind) {
    case StepOpKind::kCopy: {
      std::byte* dst = local(op.dst);
      const std::byte* src = local(op.src);
      const uint64_t bytes = op.src.count * elsize_[op.src.buffer];
      if (dst != src) std::memmove(dst, src, bytes);
      return Status::Ok();
    }
    case StepOpKind::kScale:
      // Into a window (the board's form of a pre-multiplied sum) or scratch.
      ScaleKernel(sched_->buffers[op.dst.buffer].dtype, local(op.src), local(op.dst), op.src.count,
                  d_->scalar);
      return Status::Ok();
    case StepOpKind::kDivide:
      DivideKernel(sched_->buffers[op.dst.buffer].dtype, local(op.dst), op.dst.count,
                   static_cast<uint64_t>(comm_->nranks()));
      return Status::Ok();
    case StepOpKind::kGet: {
      std::byte* dst = local(op.dst);
      const uint64_t bytes = op.src.count * elsize_[op.src.buffer];
      if (const std::byte* src = readable(op.src)) {
        if (bytes >= cpu::kStreamingCopyMinBytes)
          cpu::StreamingCopy(dst, src, bytes);
        else
          std::memcpy(dst, src, bytes);
        return Status::Ok();
      }
      return pull(op.src, 0, op.src.count, dst);
    }
    case StepOpKind::kPut: {
      std::byte* dst = window(op.dst.buffer, op.dst.rank) + op.dst.offset * elsize_[op.dst.buffer];
      std::memcpy(dst, local(op.src), op.src.count * elsize_[op.src.buffer]);
      return Status::Ok();
    }
    case StepOpKind::kCombine:
      return reduce(op, true);
    case StepOpKind::kReduce:
      return reduce(op, false);
    case StepOpKind::kExpose: {
      // Into the record of the call's first post (its entry carries no data in a schedule that
      // exposes: the lowering checks it).
      uint64_t addr = reinterpret_cast<uint64_t>(slots_[op.src.buffer]);
      // The send buffer as the caller passed it (an all-gather in place: its block of the
      // receive buffer, where a peer finds its input).
      if (op.src.buffer == kSendBuf) addr = reinterpret_cast<uint64_t>(d_->sendbuf);
      std::memcpy(board_->outbox(epoch_, BoardPlace::kEntry) + op.src.buffer * sizeof(uint64_t),
                  &addr, sizeof(addr));
      return Status::Ok();
    }
    case StepOpKind::kSignal: {
      const auto seq = static_cast<uint32_t>(static_cast<int64_t>(epoch_) + op.value);
      if (op.counter == Counter::kPosted) {
        board_->post(seq, sig_);
        unpublished_ = true;
      } else if (const uint32_t upto = comm_->boardClock().consumed(epoch_, seq, false)) {
        board_->consume(upto);
      }
      return Status::Ok();
    }
    default:
      return InternalError(std::string("a one-sided run met a ") + StepOpKindName(op.kind) +
                           " step");
  }
}

Status OneSidedRun::advance(bool* moved) {
  const std::vector<Step>& steps = *steps_;
  while (step_ < steps.size()) {
    const Step& st = steps[step_];
    const size_t nops = st.ops.size();
    bool all = true;
    // Waits first: a step runs its data ops only once every wait of it is met (the builders put
    // waits in steps of their own, so nothing is lost by ordering them so).
    for (size_t i = 0; i < nops; ++i) {
      const StepOp& op = st.ops[i];
      if (op.kind != StepOpKind::kWait || (i < 64 && (met_ >> i & 1))) continue;
      if (!waitMet(op)) {
        all = false;
        blocked_ = {op.peer, op.counter,
                    static_cast<uint32_t>(static_cast<int64_t>(epoch_) + op.value)};
        continue;
      }
      if (op.counter == Counter::kPosted) {
        const auto seq = static_cast<uint32_t>(static_cast<int64_t>(epoch_) + op.value);
        // The call agreement: every post of the call carries its signature.
        const BoardSignature theirs = board_->signature(op.peer, seq);
        if (!(theirs == sig_)) {
          mismatch_ = true;
          // Every rank finds a difference at this call (if a differs from b, every rank differs
          // from one of them) and every rank posted it: the board stays in step (the call took
          // one post on every rank), and the call has read all it will.
          step_ = steps_->size();
          finish();
          publish();
          return InvalidUsage("call mismatch: rank " + std::to_string(op.peer) + " called " +
                              DescribeBoardSignature(theirs) +
                              " at this point; every rank must make the same calls in the same "
                              "order (nothing was transferred; the communicator is still usable)");
        }
        if (op.value == 0 && !seen_first_[static_cast<size_t>(op.peer)]) {
          seen_first_[static_cast<size_t>(op.peer)] = 1;
          if (sched_->exposure) {
            // Its exposure record, kept for the call (its entry is consumed before the reads).
            std::memcpy(&exposed_[static_cast<size_t>(op.peer) * kExposable],
                        board_->inbox(op.peer, epoch_, BoardPlace::kEntry),
                        kExposable * sizeof(uint64_t));
          }
          if (++first_waits_ == comm_->nranks() - 1) {
            agreed_ = true;
            if (!settled_) {
              comm_->boardClock().settle(epoch_, sched_->posts);
              settled_ = true;
            }
          }
        }
      }
      if (i < 64) met_ |= uint64_t{1} << i;
    }
    if (!all) {
      publish();
      return Status::Ok();
    }
    for (size_t i = 0; i < nops; ++i) {
      const StepOp& op = st.ops[i];
      if (op.kind == StepOpKind::kWait) continue;
      BRAID_RETURN_IF_ERROR(runOp(op));
      count(op);
    }
    *moved = true;
    met_ = 0;
    blocked_ = {};
    ++step_;
  }
  finish();
  publish();
  return Status::Ok();
}

std::string OneSidedRun::describe() const {
  std::string s = "board step " + std::to_string(step_ + 1) + "/" + std::to_string(steps_->size());
  if (blocked_.peer >= 0)
    s += ", waiting for rank " + std::to_string(blocked_.peer) +
         (blocked_.counter == Counter::kPosted ? " to post " : " to consume post ") +
         std::to_string(blocked_.value);
  return s;
}

}  // namespace braid
