#include "core/engine.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "algorithms/algorithm.h"
#include "algorithms/builtin_algorithms.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/wire_header.h"
#include "device/cpu/reduce_kernels.h"

namespace braid {

namespace {

enum Phase : uint8_t { kHeader = 0, kPayload = 1, kPadding = 2, kDone = 3 };

// Per-op progress inside the current step of a channel.
struct OpProgress {
  Phase phase = kHeader;
  uint64_t done = 0;  // bytes of the current phase
  WireHeader hdr;
};

bool IsTransfer(StepOpKind k) {
  return k == StepOpKind::kSend || k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}
bool IsRecv(StepOpKind k) {
  return k == StepOpKind::kRecv || k == StepOpKind::kRecvReduce;
}

uint8_t WireOp(const OpDesc& d) {
  return d.premul ? static_cast<uint8_t>(braidNumOps) : static_cast<uint8_t>(d.user_op);
}

// What the peer called, reconstructed from its header, for mismatch messages.
std::string DescribeHeader(const WireHeader& h) {
  OpDesc d;
  d.kind = static_cast<CollKind>(h.coll < kNumCollKinds ? h.coll : 0);
  d.dtype = static_cast<DataType>(h.dtype < kNumDataTypes ? h.dtype : 0);
  d.count = h.count;
  d.root = h.root;
  d.avg = h.op == braidAvg;
  d.premul = h.op == braidNumOps;
  d.base_op = static_cast<ReduceOp>(h.op < kNumReduceOps ? h.op : 0);
  if (d.kind == CollKind::kSendRecv)
    return "a send of " + std::to_string(h.payload) + " bytes (" + std::to_string(h.count) + " x " +
           DataTypeName(d.dtype) + ")";
  return DescribeCall(d);
}

// Sending one framed message (header, payload, padding to 8 bytes) as far as the stream allows.
// `pr.hdr` is set by the caller before the first call.
Status SendFramed(Endpoint* ep, OpProgress& pr, const std::byte* payload, bool* moved) {
  static const std::byte kZeros[8] = {};
  const uint64_t payload_len = pr.hdr.payload;
  for (;;) {
    const std::byte* p;
    uint64_t len;
    if (pr.phase == kHeader) {
      p = reinterpret_cast<const std::byte*>(&pr.hdr) + pr.done;
      len = sizeof(WireHeader) - pr.done;
    } else if (pr.phase == kPayload) {
      p = payload + pr.done;
      len = payload_len - pr.done;
    } else if (pr.phase == kPadding) {
      p = kZeros;
      len = PaddedSize(payload_len) - payload_len - pr.done;
    } else {
      return Status::Ok();
    }
    if (len == 0) {
      pr.phase = static_cast<Phase>(pr.phase + 1);
      pr.done = 0;
      *moved = true;
      continue;
    }
    auto r = ep->send(p, len);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    pr.done += *r;
    *moved = true;
  }
}

// Reads the rest of an incoming header into `pr.hdr`; true once it is complete and has the magic.
Result<bool> RecvHeader(Endpoint* ep, int peer, OpProgress& pr, bool* moved) {
  while (pr.done < sizeof(WireHeader)) {
    auto r = ep->recv(reinterpret_cast<std::byte*>(&pr.hdr) + pr.done, sizeof(WireHeader) - pr.done);
    if (!r.ok()) return r.status();
    if (*r == 0) return false;
    pr.done += *r;
    *moved = true;
  }
  if (pr.hdr.magic != kWireMagic)
    return RemoteError("rank " + std::to_string(peer) +
                       " sent bytes that are not a braid message (bad magic): the stream is "
                       "corrupt or the peer runs another protocol");
  return true;
}

// Skips the padding after a payload; marks the op done at its end.
Status RecvPadding(Endpoint* ep, OpProgress& pr, bool* moved) {
  std::byte trash[8];
  const uint64_t pad = PaddedSize(pr.hdr.payload) - pr.hdr.payload;
  while (pr.done < pad) {
    auto r = ep->recv(trash, pad - pr.done);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    pr.done += *r;
    *moved = true;
  }
  pr.phase = kDone;
  *moved = true;
  return Status::Ok();
}

}  // namespace

struct Engine::Buffers {
  std::byte* base[kFirstUserBuf + 1] = {};
  std::vector<std::byte*> user;  // slots >= kFirstUserBuf
  size_t elsize = 1;
  std::byte* at(const Slice& s) const {
    std::byte* b = s.buffer < kFirstUserBuf ? base[s.buffer] : user[s.buffer - kFirstUserBuf];
    return b + s.offset * elsize;
  }
};

struct Engine::ChannelState {
  const Channel* ch = nullptr;
  int index = 0;
  size_t step = 0;
  std::vector<OpProgress> progress;
  bool finished() const { return step >= ch->steps.size(); }
  void enterStep() {
    if (finished()) return;
    progress.assign(ch->steps[step].ops.size(), OpProgress{});
  }
};

Engine::Engine(braidComm* comm) : comm_(comm) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p2p_send_seq_.assign(comm->nranks(), 0);
  p2p_recv_seq_.assign(comm->nranks(), 0);
  thread_ = std::thread([this] { threadMain(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  abort(AbortedError("communicator destroyed"));
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Engine::submit(std::shared_ptr<Operation> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void Engine::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  cv_.notify_all();
}

bool Engine::drain(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_cv_.wait_until(lock, deadline.at(), [&] { return queue_.empty() && !busy_; });
}

Status Engine::executeChecked(Operation& op) {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    return abort_reason_;
  }
  if (comm_->asyncErrorCode() != braidSuccess) {
    Status st = comm_->asyncError();
    return st.prepend("not run because the communicator failed earlier: ");
  }
  bool streams_intact = false;
  Status st;
  try {
    st = execute(op, &streams_intact);
  } catch (const std::bad_alloc&) {
    // Engine memory (scratch, the pre-multiplied input) grows with the message; an exception
    // must not leave the progress thread (std::terminate) or cross the C API.
    st = SystemError(std::string(comm_->where()) + ": " + DescribeCall(op.desc()) +
                     ": out of memory for the engine's buffers (about the message size in "
                     "scratch): free memory or raise the limit (ulimit -v), or split the call");
  }
  if (!st.ok() && streams_intact) {
    // A usage error found before any data moved (e.g. the call agreement): every rank reports
    // it and the communicator stays usable.
    BRAID_WARN("%s", st.message().c_str());
  } else if (!st.ok()) {
    BRAID_WARN("%s", st.message().c_str());
    comm_->setAsyncError(st);
    // The streams may now be mid-message: close them so peers fail at once instead of
    // waiting for their timeout (errors propagate through the communicator).
    comm_->shutdownEndpoints();
  }
  return st;
}

bool Engine::tryRunInline(Operation& op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ || !queue_.empty() || stop_) return false;
    busy_ = true;
  }
  op.complete(executeChecked(op));
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    if (queue_.empty()) drained_cv_.notify_all();
  }
  cv_.notify_one();  // operations queued meanwhile (non-blocking calls from another thread)
  return true;
}

void Engine::threadMain() {
  for (;;) {
    std::shared_ptr<Operation> op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wait while idle, and while a caller runs an operation inline.
      cv_.wait(lock, [&] { return (stop_ && !busy_) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) break;  // stop_ and nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    op->complete(executeChecked(*op));
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      if (queue_.empty()) drained_cv_.notify_all();
    }
  }
}

Result<RankSchedule> Engine::buildSchedule(const OpDesc& d, CollArgs* args,
                                           std::string* algo_name) {
  const int rank = comm_->rank();
  if (d.kind == CollKind::kSendRecv) {
    // One step on channel 0 with every call in order: the engine posts them together, so any
    // pattern of matching sends and receives completes (NCCL's fused group semantics).
    RankSchedule s;
    s.channels.resize(1);
    s.channels[0].steps.resize(1);
    auto& ops = s.channels[0].steps[0].ops;
    std::vector<size_t> self_sends, self_recvs;
    for (size_t i = 0; i < d.p2p.size(); ++i) {
      const P2PCall& c = d.p2p[i];
      Slice sl{static_cast<uint16_t>(kFirstUserBuf + i), 0, c.count * DataTypeSize(c.dtype)};
      if (c.peer == rank) {
        (c.is_send ? self_sends : self_recvs).push_back(i);
        continue;
      }
      StepOp op;
      op.kind = c.is_send ? StepOpKind::kSend : StepOpKind::kRecv;
      op.peer = c.peer;
      (c.is_send ? op.src : op.dst) = sl;
      ops.push_back(op);
    }
    // braidGroupEnd validated the pairing (CheckSelfPairs): k-th send to self, k-th receive.
    if (self_sends.size() != self_recvs.size())
      return InternalError("unpaired send/receive to self reached the engine");
    for (size_t k = 0; k < self_sends.size(); ++k) {
      const P2PCall& s = d.p2p[self_sends[k]];
      const uint64_t sb = s.count * DataTypeSize(s.dtype);
      StepOp op;
      op.kind = StepOpKind::kCopy;
      op.src = {static_cast<uint16_t>(kFirstUserBuf + self_sends[k]), 0, sb};
      op.dst = {static_cast<uint16_t>(kFirstUserBuf + self_recvs[k]), 0, sb};
      ops.push_back(op);
    }
    *algo_name = "p2p";
    args->dtype = DataType::kUint8;
    return s;
  }
  args->kind = d.kind;
  args->dtype = d.dtype;
  args->op = d.base_op;
  args->count = d.count;
  args->root = d.root;
  args->nranks = comm_->nranks();
  args->in_place = d.in_place;
  args->nchannels = comm_->nchannels();
  args->chunk_bytes = comm_->config().chunk_bytes;
  args->layout = &comm_->layout();
  const Algorithm* algo = comm_->tuner().choose(*args);
  if (!algo) return InternalError(std::string("no algorithm can serve ") + DescribeCall(d));
  *algo_name = algo->name();
  auto sched = algo->build(*args, rank);
  if (!sched.ok()) return sched.status();
  if (static_cast<int>(sched->channels.size()) > comm_->nchannels())
    return InternalError(std::string("algorithm ") + algo->name() + " built " +
                         std::to_string(sched->channels.size()) + " channels, more than the " +
                         std::to_string(comm_->nchannels()) + " the communicator has");
  return sched;
}

Status Engine::execute(Operation& op, bool* streams_intact) {
  *streams_intact = false;
  OpDesc d = op.desc();  // a copy: the prologue may redirect the input
  const int nranks = comm_->nranks();
  const bool is_p2p = d.kind == CollKind::kSendRecv;

  // Pre-multiplied sum: scale this rank's input once into engine memory, then sum. Running the
  // schedule out of place keeps the user's send buffer untouched (in-place callers included).
  if (d.premul) {
    uint64_t n = d.kind == CollKind::kReduceScatter ? d.count * nranks : d.count;
    size_t bytes = n * DataTypeSize(d.dtype);
    if (premul_input_.size() < bytes) premul_input_.resize(bytes);
    ScaleKernel(d.dtype, d.sendbuf, premul_input_.data(), n, d.scalar);
    d.sendbuf = premul_input_.data();
    d.in_place = false;
  }

  CollArgs args;
  std::string algo_name;
  auto sched = buildSchedule(d, &args, &algo_name);
  const uint64_t seq = is_p2p ? 0 : coll_seq_++;
  auto context = [&] {
    return std::string(comm_->where()) + ": " + DescribeCall(d) +
           (is_p2p ? "" : " #" + std::to_string(seq)) + " [" + algo_name + "]: ";
  };
  if (!sched.ok()) {
    Status st = sched.status();
    return st.prepend(context());
  }

  // Wire identity of this call, checked by every receiver.
  WireHeader proto;
  proto.coll = static_cast<uint8_t>(d.kind);
  proto.dtype = static_cast<uint8_t>(op.desc().dtype);
  proto.op = WireOp(d);
  proto.seq = seq;
  proto.count = d.count;
  proto.root = d.root;

  if (!is_p2p && comm_->config().verify_calls && nranks > 1) {
    Status st = agree(proto, context);
    if (!st.ok()) {
      // A conflict found by the agreement moved no data on any rank: nothing to tear down.
      *streams_intact = st.cls() == ErrorClass::kInvalidUsage;
      return st;
    }
    // The agreement is a dissemination barrier: a barrier needs nothing more.
    if (d.kind == CollKind::kBarrier) {
      *streams_intact = true;
      return Status::Ok();
    }
  }

  Buffers bufs;
  bufs.elsize = DataTypeSize(args.dtype);
  bufs.base[kSendBuf] = const_cast<std::byte*>(static_cast<const std::byte*>(d.sendbuf));
  bufs.base[kRecvBuf] = static_cast<std::byte*>(d.recvbuf);
  size_t scratch_bytes = sched->scratch_count * bufs.elsize;
  if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);
  bufs.base[kScratchBuf] = scratch_.data();
  for (const auto& c : d.p2p) bufs.user.push_back(static_cast<std::byte*>(c.buf));

  std::vector<ChannelState> chans(sched->channels.size());
  for (size_t c = 0; c < chans.size(); ++c) {
    chans[c].ch = &sched->channels[c];
    chans[c].index = static_cast<int>(c);
    chans[c].enterStep();
  }

  // Per-peer p2p numbering (only the fused group uses it).
  std::vector<uint64_t> p2p_seq;
  if (is_p2p) {
    const auto& ops = sched->channels[0].steps[0].ops;
    p2p_seq.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == StepOpKind::kSend) p2p_seq[i] = p2p_send_seq_[ops[i].peer]++;
      if (ops[i].kind == StepOpKind::kRecv) p2p_seq[i] = p2p_recv_seq_[ops[i].peer]++;
    }
  }

  // Advances one op of the data schedule as far as the transport allows.
  auto advance = [&](ChannelState& cs, size_t i, bool* moved) -> Status {
    const StepOp& sop = cs.ch->steps[cs.step].ops[i];
    OpProgress& pr = cs.progress[i];
    if (sop.kind == StepOpKind::kCopy) {
      std::byte* dst = bufs.at(sop.dst);
      const std::byte* src = bufs.at(sop.src);
      if (dst != src) std::memmove(dst, src, sop.src.count * bufs.elsize);
      pr.phase = kDone;
      *moved = true;
      return Status::Ok();
    }
    if (sop.kind == StepOpKind::kReduce) {
      std::byte* dst = bufs.at(sop.dst);
      ReduceKernel(args.dtype, args.op, bufs.at(sop.src), dst, dst, sop.src.count);
      pr.phase = kDone;
      *moved = true;
      return Status::Ok();
    }
    Endpoint* ep = comm_->endpoint(sop.peer, cs.index);
    if (!ep) return InternalError("no endpoint to rank " + std::to_string(sop.peer));
    if (sop.kind == StepOpKind::kSend) {
      if (pr.phase == kHeader && pr.done == 0) {
        pr.hdr = proto;
        pr.hdr.payload = sop.src.count * bufs.elsize;
        if (is_p2p) {
          const P2PCall& c = d.p2p[sop.src.buffer - kFirstUserBuf];
          pr.hdr.seq = p2p_seq[i];
          pr.hdr.dtype = static_cast<uint8_t>(c.dtype);
          pr.hdr.count = c.count;
        }
      }
      return SendFramed(ep, pr, bufs.at(sop.src), moved);
    }
    // Receives.
    const Slice& dst_slice = sop.dst;
    const uint64_t expect = dst_slice.count * bufs.elsize;
    if (pr.phase == kHeader) {
      auto got = RecvHeader(ep, sop.peer, pr, moved);
      if (!got.ok()) return got.status();
      if (!*got) return Status::Ok();
      const WireHeader& h = pr.hdr;
      if (is_p2p) {
        if (h.coll != static_cast<uint8_t>(CollKind::kSendRecv) || h.seq != p2p_seq[i])
          return InvalidUsage("receive #" + std::to_string(p2p_seq[i]) + " from rank " +
                              std::to_string(sop.peer) + " met " +
                              (h.coll == static_cast<uint8_t>(CollKind::kSendRecv)
                                   ? "its send #" + std::to_string(h.seq)
                                   : DescribeHeader(h) + " #" + std::to_string(h.seq)) +
                              ": the ranks' calls do not match");
        if (h.payload != expect)
          return InvalidUsage("receive of " + std::to_string(expect) + " bytes from rank " +
                              std::to_string(sop.peer) + " met " + DescribeHeader(h) +
                              ": send and receive sizes must match");
      } else if (h.flags != 0 || !(SignatureOf(h) == SignatureOf(proto))) {
        return InvalidUsage("mismatch with rank " + std::to_string(sop.peer) +
                            ": this rank called " + DescribeCall(op.desc()) + " #" +
                            std::to_string(proto.seq) + ", rank " + std::to_string(sop.peer) +
                            " called " +
                            (h.flags & kWireAgreement ? "with call verification on ("
                                                      : "") +
                            DescribeHeader(h) + " #" + std::to_string(h.seq) +
                            (h.flags & kWireAgreement ? "; set BRAID_VERIFY_CALLS alike)" : "") +
                            "; every rank must issue the same collectives in "
                            "the same order with the same count, type, op and root");
      } else if (h.payload != expect) {
        return InternalError("schedule mismatch with rank " + std::to_string(sop.peer) +
                             ": expected " + std::to_string(expect) + " bytes, peer sent " +
                             std::to_string(h.payload) +
                             " (ranks configured differently? check "
                             "BRAID_NCHANNELS/BRAID_CHUNK_BYTES/BRAID_ALGO)");
      }
      pr.phase = kPayload;
      pr.done = 0;
    }
    while (pr.phase == kPayload && pr.done < expect) {
      if (sop.kind == StepOpKind::kRecv) {
        auto r = ep->recv(bufs.at(dst_slice) + pr.done, expect - pr.done);
        if (!r.ok()) return r.status();
        if (*r == 0) return Status::Ok();
        pr.done += *r;
        *moved = true;
        continue;
      }
      // kRecvReduce: combine straight out of the transport's buffer (no staging copy).
      auto view = ep->peek(expect - pr.done);
      if (!view.ok()) return view.status();
      size_t n = view->size() / bufs.elsize;
      if (n == 0) return Status::Ok();
      size_t bytes = n * bufs.elsize;
      ReduceKernel(args.dtype, args.op, bufs.at(sop.src) + pr.done, view->data(),
                   bufs.at(dst_slice) + pr.done, n);
      ep->consume(bytes);
      pr.done += bytes;
      *moved = true;
    }
    if (pr.phase == kPayload) {
      pr.phase = kPadding;
      pr.done = 0;
    }
    return RecvPadding(ep, pr, moved);
  };

  BRAID_RETURN_IF_ERROR(drive(chans, advance, context));
  *streams_intact = true;

  // Epilogue: Avg = sum / nranks on the ranks that hold a result.
  if (d.avg) {
    if (d.kind == CollKind::kAllReduce || d.kind == CollKind::kReduceScatter ||
        (d.kind == CollKind::kReduce && comm_->rank() == d.root))
      DivideKernel(d.dtype, d.recvbuf, d.count, static_cast<uint64_t>(nranks));
  }
  return Status::Ok();
}

Status Engine::agree(const WireHeader& proto, const std::function<std::string()>& context) {
  CollArgs bargs;
  bargs.kind = CollKind::kBarrier;
  bargs.nranks = comm_->nranks();
  bargs.dtype = DataType::kUint8;
  auto sched = DisseminationAlgorithm().build(bargs, comm_->rank());
  if (!sched.ok()) {
    Status st = sched.status();
    return st.prepend(context());
  }
  const CallSignature mine = SignatureOf(proto);
  CallConflict conflict;           // what this rank knows so far
  bool have_conflict = false;
  std::vector<CallConflict> sent;  // per step: the record its send carries (a snapshot)
  CallConflict incoming;           // payload of the receive in flight
  const size_t nsteps = sched->channels.empty() ? 0 : sched->channels[0].steps.size();
  sent.resize(nsteps);

  std::vector<ChannelState> chans(sched->channels.size());
  for (size_t c = 0; c < chans.size(); ++c) {
    chans[c].ch = &sched->channels[c];
    chans[c].index = static_cast<int>(c);
    chans[c].enterStep();
  }
  auto advance = [&](ChannelState& cs, size_t i, bool* moved) -> Status {
    const StepOp& sop = cs.ch->steps[cs.step].ops[i];
    OpProgress& pr = cs.progress[i];
    Endpoint* ep = comm_->endpoint(sop.peer, cs.index);
    if (!ep) return InternalError("no endpoint to rank " + std::to_string(sop.peer));
    if (sop.kind == StepOpKind::kSend) {
      if (pr.phase == kHeader && pr.done == 0) {
        pr.hdr = proto;
        pr.hdr.flags = kWireAgreement;
        pr.hdr.payload = have_conflict ? sizeof(CallConflict) : 0;
        sent[cs.step] = conflict;
      }
      return SendFramed(ep, pr, reinterpret_cast<const std::byte*>(&sent[cs.step]), moved);
    }
    if (pr.phase == kHeader) {
      auto got = RecvHeader(ep, sop.peer, pr, moved);
      if (!got.ok()) return got.status();
      if (!*got) return Status::Ok();
      const WireHeader& h = pr.hdr;
      if (!(h.flags & kWireAgreement))
        return InvalidUsage("mismatch with rank " + std::to_string(sop.peer) + ": it sent " +
                            DescribeHeader(h) + " #" + std::to_string(h.seq) +
                            " without call verification while this rank verifies its calls "
                            "(set BRAID_VERIFY_CALLS alike on every rank)");
      if (h.payload != 0 && h.payload != sizeof(CallConflict))
        return RemoteError("rank " + std::to_string(sop.peer) + " sent a call-agreement message of " +
                           std::to_string(h.payload) + " bytes: the stream is corrupt");
      if (!have_conflict && !(SignatureOf(h) == mine)) {
        conflict = {comm_->rank(), sop.peer, mine, SignatureOf(h)};
        have_conflict = true;
      }
      pr.phase = kPayload;
      pr.done = 0;
    }
    auto* in = reinterpret_cast<std::byte*>(&incoming);
    while (pr.phase == kPayload && pr.done < pr.hdr.payload) {
      auto r = ep->recv(in + pr.done, pr.hdr.payload - pr.done);
      if (!r.ok()) return r.status();
      if (*r == 0) return Status::Ok();
      pr.done += *r;
      *moved = true;
    }
    if (pr.phase == kPayload) {
      if (pr.hdr.payload && !have_conflict) {
        conflict = incoming;
        have_conflict = true;
      }
      pr.phase = kPadding;
      pr.done = 0;
    }
    return RecvPadding(ep, pr, moved);
  };
  BRAID_RETURN_IF_ERROR(drive(chans, advance, context));
  if (!have_conflict) return Status::Ok();
  auto describe = [](const CallSignature& s) {
    WireHeader h;
    h.coll = s.coll;
    h.dtype = s.dtype;
    h.op = s.op;
    h.root = s.root;
    h.count = s.count;
    return DescribeHeader(h) + " #" + std::to_string(s.seq);
  };
  return InvalidUsage(context() + "call mismatch: rank " + std::to_string(conflict.rank_a) +
                      " called " + describe(conflict.a) + ", rank " +
                      std::to_string(conflict.rank_b) + " called " + describe(conflict.b) +
                      "; every rank must issue the same collectives in the same order with the "
                      "same count, type, op and root. No data moved; the communicator is still "
                      "usable");
}

Status Engine::drive(std::vector<ChannelState>& chans, const AdvanceFn& advance,
                     const std::function<std::string()>& context) {
  const int64_t timeout_us = comm_->config().timeout_ms * 1000;
  const int64_t spin_us = comm_->config().spin_us;
  int64_t last_progress = NowMicros();
  int idle_iterations = 0;

  // An op waits for earlier unfinished ops of its step on the same (peer, direction).
  auto blocked = [](const ChannelState& cs, size_t i) {
    const auto& ops = cs.ch->steps[cs.step].ops;
    if (!IsTransfer(ops[i].kind)) return false;
    for (size_t j = 0; j < i; ++j) {
      if (cs.progress[j].phase == kDone || !IsTransfer(ops[j].kind)) continue;
      if (ops[j].peer == ops[i].peer && IsRecv(ops[j].kind) == IsRecv(ops[i].kind)) return true;
    }
    return false;
  };

  auto pending_description = [&] {
    std::string s;
    int listed = 0;
    for (const auto& cs : chans) {
      if (cs.finished()) continue;
      const auto& ops = cs.ch->steps[cs.step].ops;
      for (size_t i = 0; i < ops.size() && listed < 3; ++i) {
        if (cs.progress[i].phase == kDone || !IsTransfer(ops[i].kind)) continue;
        const auto& info = comm_->rankInfos()[ops[i].peer];
        s += std::string(listed ? "; " : "") +
             (IsRecv(ops[i].kind) ? "receiving from" : "sending to") + " rank " +
             std::to_string(ops[i].peer) + " (host " + info.hostname + ", pid " +
             std::to_string(info.pid) + ") on channel " + std::to_string(cs.index) + ", step " +
             std::to_string(cs.step + 1) + "/" + std::to_string(cs.ch->steps.size());
        ++listed;
      }
    }
    return s;
  };

  for (;;) {
    bool progressed = false, all_done = true;
    for (auto& cs : chans) {
      if (cs.finished()) continue;
      bool step_done = true;
      const size_t nops = cs.ch->steps[cs.step].ops.size();
      for (size_t i = 0; i < nops; ++i) {
        if (cs.progress[i].phase == kDone) continue;
        if (blocked(cs, i)) {
          step_done = false;
          continue;
        }
        Status st = advance(cs, i, &progressed);
        if (!st.ok()) return st.prepend(context());
        if (cs.progress[i].phase != kDone) step_done = false;
      }
      if (step_done) {
        ++cs.step;
        cs.enterStep();
        progressed = true;
      }
      if (!cs.finished()) all_done = false;
    }
    if (all_done) return Status::Ok();
    if (aborted_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu_);
      Status st = abort_reason_;
      return st.prepend(context());
    }
    const int64_t now = NowMicros();
    if (progressed) {
      last_progress = now;
      idle_iterations = 0;
      continue;
    }
    if (now - last_progress > timeout_us)
      return TimeoutError(context() + "no progress for " + std::to_string(timeout_us / 1000000) +
                          " s (BRAID_TIMEOUT) " + pending_description() +
                          "; that rank may be stopped, hung, or not calling this operation");
    if (++idle_iterations < 64) continue;  // tight poll: the peer is usually microseconds away
    if (now - last_progress < spin_us) {
      sched_yield();  // let co-located ranks run (more ranks than cores is the normal case)
      continue;
    }
    int64_t budget_ms = (timeout_us - (now - last_progress)) / 1000 + 1;
    sleepUntilProgress(chans, std::min<int64_t>(budget_ms, 100));
  }
}

void Engine::sleepUntilProgress(std::vector<ChannelState>& channels, int64_t budget_ms) {
  struct Armed {
    Endpoint* ep;
    bool send, recv;
  };
  std::vector<Armed> want;
  for (auto& cs : channels) {
    if (cs.finished()) continue;
    const auto& ops = cs.ch->steps[cs.step].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (cs.progress[i].phase == kDone || !IsTransfer(ops[i].kind)) continue;
      Endpoint* ep = comm_->endpoint(ops[i].peer, cs.index);
      bool recv = IsRecv(ops[i].kind);
      auto it = std::find_if(want.begin(), want.end(), [&](const Armed& a) { return a.ep == ep; });
      if (it == want.end())
        want.push_back({ep, !recv, recv});
      else
        (recv ? it->recv : it->send) = true;
    }
  }
  std::vector<pollfd> fds;
  fds.push_back({comm_->doorbell().fd(), POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  bool ready = false;
  size_t armed = 0;
  for (; armed < want.size(); ++armed) {
    if (want[armed].ep->arm(want[armed].send, want[armed].recv, fds)) {
      ready = true;
      ++armed;
      break;
    }
  }
  if (!ready) {
    int rc = poll(fds.data(), fds.size(), static_cast<int>(budget_ms));
    (void)rc;  // EINTR or timeout: the caller re-checks everything anyway
  }
  for (size_t i = 0; i < armed; ++i) want[i].ep->disarm(fds);
  comm_->doorbell().drain();
}

}  // namespace braid
