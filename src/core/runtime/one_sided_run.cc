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

void OneSidedRun::compile(const RankSchedule& s, int me) {
  const size_t nbuf = s.buffers.size();
  nslots_ = static_cast<uint32_t>(nbuf);
  std::vector<uint32_t> es(nbuf);
  windows_.clear();
  tables_for_ = nullptr;
  for (size_t i = 0; i < nbuf; ++i) {
    const BufferDesc& b = s.buffers[i];
    es[i] = static_cast<uint32_t>(DataTypeSize(b.dtype));
    // This rank's windows take their buffer's slot: its side of the board at the call's posts.
    if (b.role == BufferRole::kWindow)
      windows_.push_back(
          {static_cast<uint32_t>(i), static_cast<uint16_t>(i), -1, PlaceOf(b.place), b.post});
  }
  uint32_t nbase = nslots_;
  const auto ref = [&](const Slice& sl) {
    const BufferDesc& b = s.buffers[sl.buffer];
    Ref r;
    r.offset = sl.offset * es[sl.buffer];
    r.base = sl.buffer;
    if (b.role == BufferRole::kWindow) {
      if (sl.rank == kLocal || sl.rank == me) return r;
      // A peer's window: one base per (window, peer), bound at start.
      for (const WindowBinding& w : windows_)
        if (w.buffer == sl.buffer && w.rank == sl.rank) {
          r.base = w.base;
          return r;
        }
      windows_.push_back({nbase, sl.buffer, sl.rank, PlaceOf(b.place), b.post});
      r.base = nbase++;
      return r;
    }
    if (sl.remote()) r.peer = sl.rank;  // a buffer the peer exposed
    return r;
  };
  const auto remote = [&](const Slice& sl) { return sl.rank != kLocal && sl.rank != me; };
  ops_.clear();
  steps_.clear();
  reduce_dtype_ = -1;
  const std::vector<Step>& steps = s.channels[0].steps;
  last_post_step_ = 0;
  for (size_t si = 0; si < steps.size(); ++si) {
    const Step& st = steps[si];
    StepRange range;
    range.begin = static_cast<uint32_t>(ops_.size());
    // Waits first: a step runs its data ops only once every wait of it is met (the builders put
    // waits in steps of their own, so nothing is lost by ordering them so).
    for (const StepOp& so : st.ops) {
      if (so.kind != StepOpKind::kWait) continue;
      Op op;
      op.kind = so.kind;
      op.counter = so.counter;
      op.peer = so.peer;
      op.value = so.value;
      op.first_post = so.counter == Counter::kPosted && so.value == 0;
      ops_.push_back(op);
    }
    range.data = static_cast<uint32_t>(ops_.size());
    for (const StepOp& so : st.ops) {
      if (so.kind == StepOpKind::kWait) continue;
      Op op;
      op.kind = so.kind;
      op.counter = so.counter;
      op.value = so.value;
      const bool has_src = so.kind != StepOpKind::kSignal && so.kind != StepOpKind::kDivide;
      const bool has_dst = WritesDstKind(so.kind);
      if (has_src) op.src = ref(so.src);
      if (has_dst) {
        op.dst = ref(so.dst);
        op.dtype = s.buffers[so.dst.buffer].dtype;
        op.count = so.dst.count;
      }
      if (so.kind == StepOpKind::kCombine || so.kind == StepOpKind::kReduce) {
        const int t = static_cast<int>(op.dtype);
        if (reduce_dtype_ == -1)
          reduce_dtype_ = t;
        else if (reduce_dtype_ != t)
          reduce_dtype_ = -2;
      }
      if (so.kind == StepOpKind::kCombine) op.src2 = ref(so.src2);
      if (has_src) op.bytes = so.src.count * es[so.src.buffer];
      if (so.kind == StepOpKind::kScale) op.count = so.src.count;
      // The board's traffic counters.
      if (so.kind == StepOpKind::kPut) {
        if (remote(so.dst)) {
          op.write_peer = so.dst.rank;
          op.read_bytes = so.dst.count * es[so.dst.buffer];
        }
      } else if (ReadsSrcKind(so.kind)) {
        if (remote(so.src)) {
          op.read_peer = so.src.rank;
          op.read_bytes = so.src.count * es[so.src.buffer];
        }
        if (so.kind == StepOpKind::kCombine && remote(so.src2)) {
          op.read_peer2 = so.src2.rank;
          op.read_bytes2 = so.src2.count * es[so.src2.buffer];
        }
      }
      op.traffic = op.read_peer >= 0 || op.read_peer2 >= 0 || op.write_peer >= 0;
      ops_.push_back(op);
    }
    range.end = static_cast<uint32_t>(ops_.size());
    // A step that waits for nothing runs as soon as the one before it has: its ops join that
    // step (a one-shot all-reduce is two steps, not six; each step is a pass of advance()).
    if (range.begin == range.data && !steps_.empty())
      steps_.back().end = range.end;
    else
      steps_.push_back(range);
    if (si == s.last_post_step) last_post_step_ = static_cast<uint32_t>(steps_.size() - 1);
  }
  reduce_fn_ = nullptr;
  reduce_fn_op_ = -1;
  base_.assign(nbase, nullptr);
  posts_ = s.posts;
  exposure_ = s.exposure;
}

void OneSidedRun::start(braidComm& comm, const std::shared_ptr<const RankSchedule>& s,
                        const OpDesc& d, const BoardSignature& sig,
                        std::span<std::byte* const> slots, std::vector<std::byte>* scratch) {
  if (compiled_ != s || compiled_rank_ != comm.rank()) {
    compile(*s, comm.rank());
    compiled_ = s;
    compiled_rank_ = comm.rank();
  }
  // The program is the plan's, and a plan serves every op of its shape: the reductions' kernel
  // is the call's.
  if (reduce_dtype_ >= 0 && reduce_fn_op_ != static_cast<int>(d.base_op)) {
    reduce_fn_ = ResolveReduceKernel(static_cast<DataType>(reduce_dtype_), d.base_op);
    reduce_fn_op_ = static_cast<int>(d.base_op);
  }
  const braidComm* last_comm = comm_;
  comm_ = &comm;
  board_ = comm.board();
  d_ = &d;
  // A call of one post takes its number whatever its agreement finds; one of more says how many
  // it took once its agreement is over (settle).
  const uint32_t last_epoch = epoch_;
  epoch_ = comm.boardClock().take(posts_, posts_ == 1);
  settled_ = posts_ == 1;
  sig_ = sig;
  const size_t n = std::min<size_t>(slots.size(), nslots_);
  std::copy_n(slots.begin(), n, base_.begin());
  std::fill(base_.begin() + static_cast<ptrdiff_t>(n), base_.begin() + nslots_, nullptr);
  if (tables_for_ != board_) {
    for (WindowBinding& w : windows_)
      for (uint32_t k = 0; k < LocalBoard::kEntries; ++k)
        w.at[k] = w.rank < 0 ? board_->outbox(k, w.place) : board_->peerWindow(w.rank, k, w.place);
    tables_for_ = board_;
  }
  for (const WindowBinding& w : windows_)
    base_[w.base] = w.at[(epoch_ + w.post) % LocalBoard::kEntries];
  scratch_ = scratch;
  step_ = 0;
  met_ = 0;
  mismatch_ = false;
  agreed_ = comm.nranks() == 1;
  first_waits_ = 0;
  // Seen-first marks are the epoch they were seen at: nothing to clear per call (unless the
  // numbers wrapped, or the run moved to another communicator).
  const auto nranks = static_cast<size_t>(comm.nranks());
  if (seen_first_.size() != nranks || epoch_ <= last_epoch || &comm != last_comm)
    seen_first_.assign(nranks, 0);
  if (exposure_) exposed_.assign(nranks * kExposable, 0);
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

Status OneSidedRun::pull(const Ref& r, uint64_t from, uint64_t bytes, std::byte* dst) {
  const auto peer = static_cast<size_t>(r.peer);
  const uint64_t base =
      r.base < kExposable && !exposed_.empty() ? exposed_[peer * kExposable + r.base] : 0;
  if (base == 0)
    return InternalError("rank " + std::to_string(r.peer) + " has not exposed buffer " +
                         std::to_string(r.base) + " to this call");
  const int pid = comm_->rankInfos()[peer].pid;
  const int err = ReadPeerMemory(pid, base + r.offset + from, dst, bytes);
  if (err == 0) return Status::Ok();
  if (err == ESRCH || board_->dead(r.peer)) return board_->deathError(r.peer);
  return SystemError(
      "reading " + std::to_string(bytes) + " bytes of rank " + std::to_string(r.peer) +
      "'s buffer in place (cross-memory attach) failed: " + std::strerror(err) +
      (err == EFAULT ? " (a buffer smaller than the call's count, on that rank or this one?)"
                     : ""));
}

Status OneSidedRun::reduce(const Op& op, bool combine) {
  const DataType dt = op.dtype;
  const ReduceOp rop = d_->base_op;
  std::byte* dst = at(op.dst);
  const uint64_t count = op.count;
  const std::byte* a = combine ? readable(op.src) : dst;
  const std::byte* b = combine ? readable(op.src2) : readable(op.src);
  if (a && b) {  // loads from mapped memory: one pass
    if (reduce_fn_ && count)
      reduce_fn_(a, b, dst, count);
    else
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
        BRAID_RETURN_IF_ERROR(pull(op.src, done * es, n * es, pa));
        x = pa;
      }
      if (b) {
        y = b + done * es;
      } else {
        BRAID_RETURN_IF_ERROR(pull(op.src2, done * es, n * es, pb));
        y = pb;
      }
    } else {
      x = dst + done * es;
      BRAID_RETURN_IF_ERROR(pull(op.src, done * es, n * es, pb));
      y = pb;
    }
    ReduceKernel(dt, rop, x, y, dst + done * es, n);
  }
  return Status::Ok();
}

bool OneSidedRun::waitMet(const Op& op) const {
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

void OneSidedRun::count(const Op& op) {
  if (op.read_peer >= 0) board_->countRead(op.read_peer, op.read_bytes);
  if (op.read_peer2 >= 0) board_->countRead(op.read_peer2, op.read_bytes2);
  if (op.write_peer >= 0) board_->countWritten(op.write_peer, op.read_bytes);
}

Status OneSidedRun::runOp(const Op& op) {
  switch (op.kind) {
    case StepOpKind::kCopy: {
      std::byte* dst = at(op.dst);
      const std::byte* src = at(op.src);
      if (dst != src) std::memmove(dst, src, op.bytes);
      return Status::Ok();
    }
    case StepOpKind::kScale:
      // Into a window (the board's form of a pre-multiplied sum) or scratch.
      ScaleKernel(op.dtype, at(op.src), at(op.dst), op.count, d_->scalar);
      return Status::Ok();
    case StepOpKind::kDivide:
      DivideKernel(op.dtype, at(op.dst), op.count, static_cast<uint64_t>(comm_->nranks()));
      return Status::Ok();
    case StepOpKind::kGet: {
      std::byte* dst = at(op.dst);
      if (const std::byte* src = readable(op.src)) {
        if (op.bytes >= cpu::kStreamingCopyMinBytes)
          cpu::StreamingCopy(dst, src, op.bytes);
        else
          std::memcpy(dst, src, op.bytes);
        return Status::Ok();
      }
      return pull(op.src, 0, op.bytes, dst);
    }
    case StepOpKind::kPut:
      std::memcpy(at(op.dst), at(op.src), op.bytes);
      return Status::Ok();
    case StepOpKind::kCombine: {
      // Both operands in mapped memory and the call's kernel resolved (the common case): one
      // pass, here; the rest (a peer's exposed buffer, read in pieces) in reduce().
      const std::byte* a = readable(op.src);
      const std::byte* b = readable(op.src2);
      if (a && b && reduce_fn_) {
        if (op.count) reduce_fn_(a, b, at(op.dst), op.count);
        return Status::Ok();
      }
      return reduce(op, true);
    }
    case StepOpKind::kReduce:
      if (const std::byte* b = readable(op.src); b && reduce_fn_) {
        std::byte* dst = at(op.dst);
        if (op.count) reduce_fn_(dst, b, dst, op.count);
        return Status::Ok();
      }
      return reduce(op, false);
    case StepOpKind::kExpose: {
      // Into the record of the call's first post (its entry carries no data in a schedule that
      // exposes: the lowering checks it).
      const uint32_t buffer = op.src.base;
      uint64_t addr = reinterpret_cast<uint64_t>(base_[buffer]);
      // The send buffer as the caller passed it (an all-gather in place: its block of the
      // receive buffer, where a peer finds its input).
      if (buffer == kSendBuf) addr = reinterpret_cast<uint64_t>(d_->sendbuf);
      std::memcpy(board_->outbox(epoch_, BoardPlace::kEntry) + buffer * sizeof(uint64_t), &addr,
                  sizeof(addr));
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

Status OneSidedRun::agreeWith(const Op& op) {
  const auto seq = static_cast<uint32_t>(static_cast<int64_t>(epoch_) + op.value);
  // The call agreement: every post of the call carries its signature.
  const BoardSignature theirs = board_->signature(op.peer, seq);
  if (!(theirs == sig_)) [[unlikely]]
    return mismatchWith(op, theirs);
  if (!op.first_post) return Status::Ok();
  const auto peer = static_cast<size_t>(op.peer);
  if (seen_first_[peer] == epoch_) return Status::Ok();
  seen_first_[peer] = epoch_;
  if (exposure_) {
    // Its exposure record, kept for the call (its entry is consumed before the reads).
    std::memcpy(&exposed_[peer * kExposable], board_->inbox(op.peer, epoch_, BoardPlace::kEntry),
                kExposable * sizeof(uint64_t));
  }
  if (++first_waits_ == comm_->nranks() - 1) {
    agreed_ = true;
    if (!settled_) {
      comm_->boardClock().settle(epoch_, posts_);
      settled_ = true;
    }
  }
  return Status::Ok();
}

Status OneSidedRun::mismatchWith(const Op& op, const BoardSignature& theirs) {
  mismatch_ = true;
  // Every rank finds a difference at this call (if a differs from b, every rank differs from one
  // of them) and every rank posted it: the board stays in step (the call took one post on every
  // rank), and the call has read all it will.
  step_ = steps_.size();
  finish();
  publish();
  return InvalidUsage("call mismatch: rank " + std::to_string(op.peer) + " called " +
                      DescribeBoardSignature(theirs) +
                      " at this point; every rank must make the same calls in the same order "
                      "(nothing was transferred; the communicator is still usable)");
}

Status OneSidedRun::advance(bool* moved, bool defer_publish) {
  const size_t nsteps = steps_.size();
  while (step_ < nsteps) {
    const StepRange& r = steps_[step_];
    // Every wait not met yet is looked at, and the run blocks on the last one not met: when that
    // peer's post comes the others' have usually come too (on oversubscribed cores, blocking on
    // the first one cost a yield round per peer).
    bool all = true;
    for (uint32_t i = r.begin; i < r.data; ++i) {
      const uint32_t bit = i - r.begin;
      if (bit < 64 && (met_ >> bit & 1)) continue;
      const Op& op = ops_[i];
      if (!waitMet(op)) {
        all = false;
        blocked_ = {op.peer, op.counter,
                    static_cast<uint32_t>(static_cast<int64_t>(epoch_) + op.value)};
        continue;
      }
      if (op.counter == Counter::kPosted) BRAID_RETURN_IF_ERROR(agreeWith(op));
      if (bit < 64) met_ |= uint64_t{1} << bit;  // (waits past 64 are looked at again)
    }
    if (!all) return Status::Ok();  // (this run's posts were published after their steps)
    for (uint32_t i = r.data; i < r.end; ++i) {
      const Op& op = ops_[i];
      BRAID_RETURN_IF_ERROR(runOp(op));
      if (op.traffic) count(op);
    }
    // A step that posted publishes before the run polls a peer: the fence lets this rank's post
    // (a slot's line and its entry's) leave the store buffer before the polls' loads of the
    // peers' lines go out. Polling first cost 0.05-0.1 us per call from 64 bytes on (a payload
    // in a slot of its own) on 2 ranks (docs/performance.md "Publish before polling"); a call
    // publishes once either way.
    if (!defer_publish) publish();
    *moved = true;
    met_ = 0;
    blocked_ = {};
    ++step_;
  }
  finish();
  return Status::Ok();
}

std::string OneSidedRun::describe() const {
  // (A call that finished behind calls still parked: Engine::finishReadyParked.)
  if (finished()) return "board steps done, completes after the calls before it";
  std::string s = "board step " + std::to_string(step_ + 1) + "/" + std::to_string(steps_.size());
  if (blocked_.peer >= 0)
    s += ", waiting for rank " + std::to_string(blocked_.peer) +
         (blocked_.counter == Counter::kPosted ? " to post " : " to consume post ") +
         std::to_string(blocked_.value);
  return s;
}

}  // namespace braid
