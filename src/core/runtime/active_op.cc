#include "core/runtime/active_op.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithm.h"
#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/codec_kernels.h"
#include "algorithms/cost_model.h"
#include "algorithms/lowering.h"
#include "core/runtime/board_selection.h"
#include "core/runtime/comm.h"
#include "device/cpu/reduce_kernels.h"
#include "device/cpu/streaming_copy.h"

namespace braid {

namespace {

// Bytes of the largest buffer a collective touches on one rank (what decides its lane).
uint64_t LargestBufferBytes(const OpDesc& d, int nranks) {
  const uint64_t b = d.count * DataTypeSize(d.dtype);
  switch (d.kind) {
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
    case CollKind::kAllToAll:
      return b * static_cast<uint64_t>(nranks);
    default:
      return b;
  }
}

}  // namespace

CollArgs CollArgsFor(const braidComm& comm, const OpDesc& d) {
  CollArgs a;
  a.kind = d.kind;
  a.dtype = d.dtype;
  a.op = d.base_op;
  a.count = d.count;
  a.root = d.root;
  a.nranks = comm.nranks();
  a.in_place = d.in_place;
  a.premul = d.premul;
  a.avg = d.avg;
  a.nchannels = comm.nchannels();
  a.chunk_bytes = comm.config().chunk_bytes;
  a.layout = &comm.layout();
  a.codec = d.codec;
  if (LargestBufferBytes(d, comm.nranks()) <= kExpressBytes) a.nchannels = 1;  // express lane
  if (d.kind != CollKind::kSendRecv) FillBoardArgs(comm, &a);
  return a;
}

const Algorithm* AlgorithmFor(const braidComm& comm, const OpDesc& d, const CollArgs& args) {
  // A quantized call runs the quantized builder of its kind, whatever the tuner would pick.
  if (d.codec.id != CodecId::kNone) {
    const Algorithm* q = QuantizedAlgorithmFor(d.kind);
    return q && q->supports(args) ? q : nullptr;
  }
  // On one host: the board, where its rules take the call (its reductions fold in rank order,
  // the deterministic order too).
  if (BoardTakes(comm, d, args)) return &BoardAlgorithm();
  const bool reduction = d.kind == CollKind::kAllReduce || d.kind == CollKind::kReduceScatter ||
                         d.kind == CollKind::kReduce;
  // Deterministic mode: one fixed reduction order whatever the tuner or BRAID_ALGO would pick.
  if (comm.config().deterministic && reduction) return &OrderedReductionAlgorithm();
  return comm.tuner().choose(args);
}

// The plan cache's bounds: at most this many call shapes per communicator, each of at most
// this many ops (a few KiB of schedule).
constexpr size_t kPlanCacheEntries = 256;
constexpr size_t kPlanCacheMaxOps = 256;

Result<braidComm::CachedPlan> PlanFor(braidComm& comm, const OpDesc& d, const CollArgs& a) {
  auto& cache = comm.planCache();
  if (auto it = cache.find(a); it != cache.end()) return it->second;
  const Algorithm* algo = AlgorithmFor(comm, d, a);
  if (!algo) return InternalError(std::string("no algorithm can serve ") + DescribeCall(d));
  auto sched = BuildSchedule(*algo, a, comm.rank());
  if (!sched.ok()) return sched.status();
  if (static_cast<int>(sched->channels.size()) > a.nchannels)
    return InternalError(std::string("algorithm ") + algo->name() + " built " +
                         std::to_string(sched->channels.size()) + " channels, more than the " +
                         std::to_string(a.nchannels) + " it was given");
  braidComm::CachedPlan plan{algo, std::make_shared<const RankSchedule>(std::move(*sched))};
  // Only schedules whose build costs as much as their run: a call of many chunks moves enough
  // bytes to hide its build, and would hold tens of KiB here. Bounded per communicator.
  size_t ops = 0;
  for (const Channel& ch : plan.schedule->channels)
    for (const Step& st : ch.steps) ops += st.ops.size();
  if (ops <= kPlanCacheMaxOps) {
    if (cache.size() >= kPlanCacheEntries) cache.clear();  // call shapes of a long job
    cache.emplace(a, plan);
  }
  return plan;
}

ActiveOp::ActiveOp(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id)
    : comm_(comm), op_(op), keep_(std::move(keep)), id_(id), d_(op->desc()) {
  is_p2p_ = d_.kind == CollKind::kSendRecv;
}

void ActiveOp::reset(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id) {
  comm_ = comm;
  op_ = op;
  keep_ = std::move(keep);
  id_ = id;
  d_ = op->desc();
  is_p2p_ = d_.kind == CollKind::kSendRecv;
  seq_ = 0;
  algo_name_ = "";
  algo_ = nullptr;
  args_ = CollArgs();
  proto_ = WireHeader();
  stage_ = Stage::kData;
  clean_failure_ = false;
  touched_ = false;
  agree_chans_.clear();
  data_chans_.clear();
  p2p_seq_.clear();
  claims_.clear();
  conflict_ = CallConflict();
  have_conflict_ = false;
  carried_agreement_ = false;
  agreement_checked_ = false;
  shadow_output_ = false;
  shadow_bytes_ = 0;
  sent_.clear();
  incoming_ = CallConflict();
  board_started_ = false;
  adopted_ = nullptr;
  budget_ = 0;
  corked_ = nullptr;
  last_progress_us = -1;
  rearmable_ = false;
}

void ActiveOp::recycle() {
  keep_.reset();
  // A one-sided plan that ran through: the next call of its shape may take it as it is (the
  // layout holds the schedule alive anyway).
  rearmable_ = !is_p2p_ && stage_ == Stage::kFinished && board_started_ && !have_conflict_ &&
               !clean_failure_ && !shadow_output_ && data_sched_ && data_sched_->posts > 0 &&
               layout_.of == data_sched_ && layout_.board_form >= 0 && layout_.unsupported.ok();
  rearm_comm_ = comm_;
  agree_sched_.reset();
  if (!rearmable_) data_sched_.reset();
  agree_chans_.clear();
  data_chans_.clear();
  op_ = nullptr;
  comm_ = nullptr;
}

bool ActiveOp::canRearm(braidComm* comm, const OpDesc& d) const {
  if (!rearmable_ || comm != rearm_comm_) return false;
  if (d.kind == CollKind::kSendRecv) return false;
  const braidComm::PlanMemo& memo = comm->planMemo();
  // The memo's plan is the one this ran (the plan cache is keyed by the call's arguments, so the
  // same schedule means the same args_, algorithm and layout).
  return memo.plan.schedule == data_sched_ && SamePlanShape(d, memo.shape) && SamePlanShape(d, d_);
}

bool ActiveOp::canTake(braidComm* comm, const OpDesc& d,
                       const std::shared_ptr<const RankSchedule>& schedule) const {
  // (The plan cache is keyed by the call's arguments: the same schedule means the same args_,
  // algorithm and layout, as in canRearm.)
  return rearmable_ && comm == rearm_comm_ && d.kind != CollKind::kSendRecv &&
         data_sched_ == schedule && SamePlanShape(d, d_);
}

bool ActiveOp::rearm(braidComm* comm, Operation* op, std::shared_ptr<Operation>& keep, uint64_t id,
                     uint64_t coll_seq) {
  if (!canRearm(comm, op->desc())) return false;
  arm(comm, op, std::move(keep), id, coll_seq);
  return true;
}

void ActiveOp::arm(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id,
                   uint64_t coll_seq) {
  const OpDesc& d = op->desc();
  rearmable_ = false;
  comm_ = comm;
  op_ = op;
  keep_ = std::move(keep);
  id_ = id;
  // What a call of the same shape may change (the rest, and the wire identity but its number,
  // are the shape's; d_ is never modified while a one-sided schedule runs).
  d_.sendbuf = d.sendbuf;
  d_.recvbuf = d.recvbuf;
  d_.user_op = d.user_op;
  std::memcpy(d_.scalar, d.scalar, sizeof(d_.scalar));
  seq_ = coll_seq;
  proto_.op = WireOp(d_);
  proto_.seq = seq_;
  stage_ = Stage::kBoard;
  board_started_ = false;
  adopted_ = nullptr;
  touched_ = false;
  budget_ = 0;
  corked_ = nullptr;
  last_progress_us = -1;
  // The scratch slots point where they did: the same layout found `scratch` large enough.
  auto* send = const_cast<std::byte*>(static_cast<const std::byte*>(d_.sendbuf));
  for (const uint16_t k : layout_.send_slots) bufs_.base[k] = send;
  for (const uint16_t k : layout_.recv_slots) bufs_.base[k] = static_cast<std::byte*>(d_.recvbuf);
}

std::string ActiveOp::context() const {
  return comm_->where() + ": " + DescribeCall(d_) + (is_p2p_ ? "" : " #" + std::to_string(seq_)) +
         " [" + algo_name_ + "]: ";
}

Result<std::shared_ptr<const RankSchedule>> ActiveOp::buildSchedule(CollArgs* args) {
  const int rank = comm_->rank();
  if (is_p2p_) {
    std::vector<P2PSpec> calls;
    calls.reserve(d_.p2p.size());
    for (const P2PCall& c : d_.p2p)
      calls.push_back({c.peer, c.is_send, c.count * DataTypeSize(c.dtype)});
    algo_name_ = "p2p";
    args->dtype = DataType::kUint8;
    auto sched = BuildPointToPointSchedule(calls, rank, comm_->nranks());
    if (!sched.ok()) return sched.status();
    return std::make_shared<const RankSchedule>(std::move(*sched));
  }
  braidComm::PlanMemo& memo = comm_->planMemo();
  if (memo.plan.schedule && SamePlanShape(d_, memo.shape)) {
    *args = memo.args;
    algo_ = memo.plan.algo;
    algo_name_ = algo_->name();
    return memo.plan.schedule;
  }
  *args = CollArgsFor(*comm_, d_);
  auto plan = PlanFor(*comm_, d_, *args);
  if (!plan.ok()) return plan.status();
  algo_ = plan->algo;
  algo_name_ = algo_->name();
  memo.shape = d_;
  memo.shape.p2p.clear();
  memo.args = *args;
  memo.plan = *plan;
  return std::move(plan->schedule);
}

std::vector<ActiveOp::ChannelState> ActiveOp::StatesFor(const RankSchedule& s, int lane_base,
                                                        bool one_lane) {
  std::vector<ChannelState> chans(s.channels.size());
  for (size_t c = 0; c < chans.size(); ++c) {
    chans[c].ch = &s.channels[c];
    chans[c].lane = one_lane ? lane_base : lane_base + static_cast<int>(c);
    chans[c].enterStep();
  }
  return chans;
}

Status ActiveOp::prepare(uint64_t coll_seq, std::vector<uint64_t>& p2p_send_seq,
                         std::vector<uint64_t>& p2p_recv_seq) {
  const int nranks = comm_->nranks();
  if (!is_p2p_) seq_ = coll_seq;
  auto sched = buildSchedule(&args_);
  if (!sched.ok()) {
    Status st = sched.status();
    return st.prepend(context());
  }
  data_sched_ = std::move(*sched);

  proto_.coll = static_cast<uint8_t>(d_.kind);
  proto_.dtype = static_cast<uint8_t>(op_->desc().dtype);
  proto_.op = WireOp(d_);
  proto_.seq = seq_;
  proto_.count = d_.count;
  proto_.root = d_.root;
  proto_.comm = comm_->commId();
  proto_.codec = PackCodec(d_.codec);

  const int express = comm_->expressLane();
  const bool small = !is_p2p_ && LargestBufferBytes(d_, nranks) <= kExpressBytes;
  stage_ = Stage::kData;
  if (!is_p2p_ && comm_->board()) {
    // One host: the board runs the call (a one-sided schedule, its agreement included), or its
    // agreement before the streams run it.
    if (data_sched_->posts > 0) {
      stage_ = Stage::kBoard;
      if (Status bound = bindBuffers(); !bound.ok()) return bound.prepend(context());
      return Status::Ok();
    }
    if (!comm_->boardAgreementPlan())
      comm_->boardAgreementPlan() =
          std::make_shared<const RankSchedule>(BoardAgreementSchedule(nranks, comm_->rank()));
    stage_ = Stage::kBoardAgreement;
  } else if (carriesAgreement()) {
    carried_agreement_ = true;
    // Beyond two ranks a later round may bring the news of a conflict after an earlier round's
    // data was combined: the call works on a shadow of its receive buffer (bindBuffers).
    shadow_output_ = nranks > 2;
    sent_.resize(data_sched_->channels[0].steps.size());
  } else if (!is_p2p_ && comm_->config().verify_calls && nranks > 1) {
    auto& agreement = comm_->agreementPlan();
    if (!agreement) {
      CollArgs bargs;
      bargs.kind = CollKind::kBarrier;
      bargs.nranks = nranks;
      bargs.dtype = DataType::kUint8;
      auto agree = DisseminationAlgorithm().build(bargs, comm_->rank());
      if (!agree.ok()) {
        Status st = agree.status();
        return st.prepend(context());
      }
      agreement = std::make_shared<const RankSchedule>(std::move(*agree));
    }
    agree_sched_ = agreement;
    agree_chans_ = StatesFor(*agree_sched_, express, true);
    sent_.resize(agree_sched_->channels.empty() ? 0 : agree_sched_->channels[0].steps.size());
    stage_ = Stage::kAgreement;
    // The agreement is a dissemination barrier: a barrier needs nothing more.
    if (d_.kind == CollKind::kBarrier) {
      static const auto kNothing = std::make_shared<const RankSchedule>();
      data_sched_ = kNothing;
    }
  }
  data_chans_ = small ? StatesFor(*data_sched_, express, true) : StatesFor(*data_sched_, 0, false);

  // (Not bindBuffers().prepend(context()): the context string would be built on every call.)
  if (Status bound = bindBuffers(); !bound.ok()) return bound.prepend(context());

  if (is_p2p_ && !data_sched_->channels.empty()) {
    const auto& ops = data_sched_->channels[0].steps[0].ops;
    p2p_seq_.resize(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == StepOpKind::kSend) p2p_seq_[i] = p2p_send_seq[ops[i].peer]++;
      if (ops[i].kind == StepOpKind::kRecv) p2p_seq_[i] = p2p_recv_seq[ops[i].peer]++;
    }
  }

  // Stream claims: every transfer of both stages, counted per stream.
  StreamGate probe;
  probe.reset(comm_->rootNranks(), comm_->nlanes());
  std::vector<uint32_t> streams;
  for (const auto* chans : {&agree_chans_, &data_chans_})
    for (const auto& cs : *chans)
      for (const auto& step : cs.ch->steps)
        for (const auto& sop : step.ops)
          if (IsTransfer(sop.kind)) streams.push_back(streamOf(probe, cs, sop));
  std::sort(streams.begin(), streams.end());
  for (size_t i = 0; i < streams.size();) {
    size_t j = i;
    while (j < streams.size() && streams[j] == streams[i]) ++j;
    claims_.push_back({streams[i], static_cast<uint32_t>(j - i)});
    i = j;
  }
  if (stage_ != Stage::kBoardAgreement && agree_chans_.empty() && data_chans_.empty())
    stage_ = Stage::kFinished;
  return Status::Ok();
}

Status ActiveOp::bindBuffers() {
  const auto& table = data_sched_->buffers;
  if (layout_.of != data_sched_) {
    Layout& l = layout_;
    l.of = data_sched_;
    l.unsupported = Status::Ok();
    l.offset.assign(table.size(), 0);
    l.elsize.assign(table.size(), 1);
    // Scratch buffers share one allocation from the engine's pool, each at a 64-byte boundary.
    l.scratch_bytes = 0;
    l.codec_elems = 0;
    l.board_form = -1;
    l.send_slots.clear();
    l.recv_slots.clear();
    for (size_t i = 0; i < table.size(); ++i) {
      const BufferDesc& b = table[i];
      if (b.role == BufferRole::kUserSend) l.send_slots.push_back(static_cast<uint16_t>(i));
      if (b.role == BufferRole::kUserRecv) l.recv_slots.push_back(static_cast<uint16_t>(i));
      if (b.memory != MemoryType::kHost && l.unsupported.ok())
        l.unsupported = InvalidArgument(std::string("buffer in ") + MemoryTypeName(b.memory) +
                                        " memory: this build moves host memory only");
      l.elsize[i] = DataTypeSize(b.dtype);
      if (b.role == BufferRole::kScratch) {
        l.offset[i] = l.scratch_bytes;
        l.scratch_bytes += (b.count * l.elsize[i] + 63) / 64 * 64;
      }
    }
    for (const auto& ch : data_sched_->channels)
      for (const auto& st : ch.steps)
        for (const auto& op : st.ops)
          if (op.kind == StepOpKind::kDequantizeReduce)
            l.codec_elems = std::max(l.codec_elems, op.dst.count);
  }
  if (!layout_.unsupported.ok()) return layout_.unsupported;
  bufs_.base.assign(table.size(), nullptr);
  bufs_.elsize.assign(layout_.elsize.begin(), layout_.elsize.end());
  uint64_t scratch_bytes = layout_.scratch_bytes;
  const uint64_t shadow_offset = scratch_bytes;
  if (shadow_output_) {
    shadow_bytes_ = table[kRecvBuf].count * bufs_.elsize[kRecvBuf];
    scratch_bytes += shadow_bytes_;
  }
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  for (size_t i = 0; i < table.size(); ++i) {
    switch (table[i].role) {
      case BufferRole::kUserSend:
        bufs_.base[i] = const_cast<std::byte*>(static_cast<const std::byte*>(d_.sendbuf));
        break;
      case BufferRole::kUserRecv:
        bufs_.base[i] = static_cast<std::byte*>(d_.recvbuf);
        if (shadow_output_) {
          // In place the buffer holds the input, which the schedule reads from it.
          bufs_.base[i] = scratch.data() + shadow_offset;
          if (shadow_bytes_ && d_.in_place) std::memcpy(bufs_.base[i], d_.recvbuf, shadow_bytes_);
        }
        break;
      case BufferRole::kScratch:
        bufs_.base[i] = scratch.data() + layout_.offset[i];
        break;
      case BufferRole::kUserP2P:
        if (i >= d_.p2p.size()) return InternalError("point-to-point buffer without its call");
        bufs_.base[i] = static_cast<std::byte*>(d_.p2p[i].buf);
        break;
      case BufferRole::kWindow:
        break;  // on the board, at the call's posts (OneSidedRun binds them)
    }
  }
  // The decoder of a dequantize-reduce needs room for one decoded slice.
  if (layout_.codec_elems) codec_tmp_.resize(layout_.codec_elems * DataTypeSize(args_.dtype));
  return Status::Ok();
}

uint32_t ActiveOp::streamOf(const StreamGate& gate, const ChannelState& cs,
                            const StepOp& sop) const {
  // The gate orders the root's streams, which a root and its split views share.
  return gate.stream(comm_->rootRank(sop.peer), cs.lane, IsRecv(sop.kind));
}

namespace {

// Whether `s`, rank `rank`'s schedule on two ranks, starts with one exchange: one channel whose
// first step holds one send to the peer and one receive from it, besides local steps.
bool StartsWithOneExchange(const RankSchedule& s, int rank) {
  if (s.channels.size() != 1) return false;
  const auto& steps = s.channels[0].steps;
  if (steps.empty() || !steps[0].deps.empty()) return false;
  int sends = 0, recvs = 0;
  for (const StepOp& op : steps[0].ops) {
    if (!IsTransfer(op.kind)) continue;
    if (op.peer != 1 - rank) return false;
    sends += op.kind == StepOpKind::kSend;
    recvs += IsRecv(op.kind);
  }
  return sends == 1 && recvs == 1;
}

// Whether `s`, rank `rank`'s schedule on `n` ranks (a power of two), moves its data in exactly
// the call agreement's butterfly (DisseminationAlgorithm): one channel whose k-th step with
// transfers holds one send to rank XOR 2^k and one receive from it, log2(n) such steps, and
// nothing else but local steps.
bool IsButterfly(const RankSchedule& s, int rank, int n) {
  if (s.channels.size() != 1) return false;
  int round = 0;
  for (const Step& st : s.channels[0].steps) {
    if (!st.deps.empty()) return false;
    int sends = 0, recvs = 0;
    for (const StepOp& op : st.ops) {
      if (!IsTransfer(op.kind)) continue;
      if (op.peer != (rank ^ (1 << round))) return false;
      sends += op.kind == StepOpKind::kSend;
      recvs += IsRecv(op.kind);
    }
    if (sends + recvs == 0) continue;
    if (sends != 1 || recvs != 1 || (1 << ++round) > n) return false;
  }
  return (1 << round) == n;
}

// The part of CarriesAgreement that needs no schedule.
bool MayCarryAgreement(const braidComm& comm, const OpDesc& d, const Algorithm* algo) {
  const int n = comm.nranks();
  // Beyond two ranks the shadow is copied out whole on every rank: only collectives whose every
  // rank holds the whole receive buffer at the end may carry (a rooted one's would copy
  // scratch that nothing wrote).
  const bool everyone_receives = d.kind == CollKind::kAllReduce || d.kind == CollKind::kAllGather ||
                                 d.kind == CollKind::kReduceScatter;
  const bool butterfly =
      n > 2 && n <= kCarriedAgreementMaxRanks && IsPowerOfTwo(n) && everyone_receives;
  return d.kind != CollKind::kSendRecv && d.kind != CollKind::kBarrier && algo &&
         comm.config().verify_calls && (n == 2 || butterfly) &&
         LargestBufferBytes(d, n) <= kExpressBytes;
}

// The part of CarriesAgreement that builds schedules: `algo`'s schedule on every rank of `n`, in
// both placements, has the agreement's shape. The peers decide from their own rank and placement
// (in place or not is each rank's own choice), so the answer must not depend on either: every
// combination must run alike.
bool SchedulesCarryAgreement(int n, const Algorithm& algo, const CollArgs& args) {
  for (int rank = 0; rank < n; ++rank)
    for (bool in_place : {false, true}) {
      CollArgs a = args;
      a.in_place = in_place;
      if (!algo.supports(a)) continue;  // a placement no rank can run
      auto s = BuildSchedule(algo, a, rank);
      if (!s.ok() || !(n == 2 ? StartsWithOneExchange(*s, rank) : IsButterfly(*s, rank, n)))
        return false;
    }
  return true;
}

}  // namespace

bool CarriesAgreement(const braidComm& comm, const OpDesc& d, const Algorithm* algo,
                      const CollArgs& args) {
  return MayCarryAgreement(comm, d, algo) && SchedulesCarryAgreement(comm.nranks(), *algo, args);
}

bool ActiveOp::carriesAgreement() {
  if (!MayCarryAgreement(*comm_, d_, algo_)) return false;
  auto& cache = comm_->carriedAgreementCache();
  const auto key = std::make_tuple(proto_.coll, proto_.dtype, proto_.op, proto_.count, proto_.root,
                                   proto_.codec);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const bool carries = SchedulesCarryAgreement(comm_->nranks(), *algo_, args_);
  if (cache.size() >= 4096) cache.clear();  // call shapes of a long job: keep it bounded
  cache.emplace(key, carries);
  return carries;
}

bool ActiveOp::firstTransfersDone() const {
  const ChannelState& cs = data_chans_[0];
  if (cs.step > 0) return true;
  const auto& ops = cs.ch->steps[0].ops;
  for (size_t i = 0; i < ops.size(); ++i)
    if (IsTransfer(ops[i].kind) && cs.progress[i].phase != kDone) return false;
  return true;
}

Status ActiveOp::conflictError() {
  // Every rank holds a conflict now (see CallConflict) and none used data: fail cleanly.
  clean_failure_ = true;
  // Equal signatures: one rank's call carried its agreement in its data and the other's did
  // not, so the ranks built different schedules for the same call.
  const std::string why =
      conflict_.a == conflict_.b
          ? "; the calls are the same but the ranks built different schedules for them (set "
            "BRAID_ALGO, BRAID_DETERMINISTIC, BRAID_NCHANNELS and BRAID_CHUNK_BYTES alike)"
          : "; every rank must issue the same collectives in the same order with the same count, "
            "type, op and root";
  return InvalidUsage(
      context() + "call mismatch: rank " + std::to_string(conflict_.rank_a) + " called " +
      DescribeSignature(conflict_.a) + ", rank " + std::to_string(conflict_.rank_b) + " called " +
      DescribeSignature(conflict_.b) + why + ". No data moved; the communicator is still usable");
}

Status ActiveOp::advanceBoard(bool* moved) {
  if (!board_started_) {
    // The calls before it have taken their posts (a call of several posts says how many at its
    // agreement; until then the next number is not known).
    if (comm_->boardClock().next() == 0) return Status::Ok();
    const bool data = stage_ == Stage::kBoard;
    const std::shared_ptr<const RankSchedule>& s = data ? data_sched_ : comm_->boardAgreementPlan();
    // (prepare() bound the data schedule: the layout is this plan's.)
    if (data && layout_.board_form < 0)
      layout_.board_form = static_cast<int>(PlanBoardCall(args_)->form);
    const auto form = data ? static_cast<uint8_t>(layout_.board_form) : uint8_t{4};
    run_.start(*comm_, s, d_, BoardSignatureOf(d_, comm_->nranks(), form), bufs_.base, &codec_tmp_);
    board_started_ = true;
    *moved = true;
  }
  Status st = run().advance(moved);
  if (!st.ok()) {
    // A mismatch found by the agreement: nothing written, every rank fails it, the communicator
    // stays usable.
    if (run().mismatched()) clean_failure_ = true;
    return st.prepend(context());
  }
  // (A peer that died never posts: the engine looks for that when its loop idles,
  // Engine::failBoardDeaths.)
  if (!run().finished()) return Status::Ok();
  stage_ = stage_ == Stage::kBoard ? Stage::kFinished : Stage::kData;
  if (stage_ == Stage::kData && data_chans_.empty()) stage_ = Stage::kFinished;
  *moved = true;
  return Status::Ok();
}

Status ActiveOp::advance(StreamGate& gate, bool* moved, std::vector<Endpoint*>* corked) {
  budget_ = kSweepBudgetBytes;
  corked_ = corked;
  if (stage_ == Stage::kBoardAgreement || stage_ == Stage::kBoard) {
    BRAID_RETURN_IF_ERROR(advanceBoard(moved));
    if (stage_ != Stage::kData) return Status::Ok();
  }
  if (stage_ == Stage::kAgreement) {
    auto done = advanceStage(agree_chans_, gate, moved);
    if (!done.ok()) return done.status();
    if (!*done) return Status::Ok();
    if (have_conflict_) return conflictError();
    stage_ = Stage::kData;
    *moved = true;
  }
  if (stage_ == Stage::kData) {
    auto done = advanceStage(data_chans_, gate, moved);
    if (!done.ok()) return done.status();
    // A conflict found by the first data step fails once that step is complete (advanceStage
    // stops there): this rank's own first message is then wholly sent.
    if (have_conflict_ && !shadow_output_)
      return firstTransfersDone() ? conflictError() : Status::Ok();
    if (*done) {
      // Every round of a butterfly ran: all ranks know of a conflict, or none had one.
      if (have_conflict_) return conflictError();
      if (shadow_output_ && shadow_bytes_)
        std::memcpy(d_.recvbuf, bufs_.base[kRecvBuf], shadow_bytes_);
      stage_ = Stage::kFinished;
    }
  }
  return Status::Ok();
}

Result<bool> ActiveOp::advanceStage(std::vector<ChannelState>& chans, StreamGate& gate,
                                    bool* moved) {
  const bool agreement = stage_ == Stage::kAgreement;
  bool all_done = true;
  for (auto& cs : chans) {
    while (!cs.finished()) {
      // A carried agreement failed: on two ranks both know it after the first step and stop;
      // beyond, the butterfly's later rounds still run to tell the others.
      if (have_conflict_ && !agreement && cs.step > 0 && !shadow_output_) break;
      const Step& step = cs.ch->steps[cs.step];
      // A step with edges waits for the steps of other channels it names.
      if (!std::all_of(step.deps.begin(), step.deps.end(),
                       [&](const StepRef& d) { return chans[d.channel].step > d.step; }))
        break;
      const auto& ops = step.ops;
      bool step_done = true;
      for (size_t i = 0; i < ops.size(); ++i) {
        OpProgress& pr = cs.progress[i];
        if (pr.phase == kDone) continue;
        const StepOp& sop = ops[i];
        const bool transfer = IsTransfer(sop.kind);
        // A first step that carries the agreement writes nothing before the peer's header has
        // matched (and nothing at all after a conflict). Rounds that write a shadow
        // (shadow_output_) need not wait, but skip their local steps after a conflict.
        if (!transfer && carried_agreement_ && !agreement) {
          if (shadow_output_ && have_conflict_) {
            pr.phase = kDone;
            continue;
          }
          if (!shadow_output_ && cs.step == 0 && !agreement_checked_) {
            step_done = false;
            continue;
          }
        }
        // Transfers of one step on the same (peer, direction) go in the order listed.
        bool blocked = false;
        for (size_t j = 0; transfer && j < i && !blocked; ++j)
          blocked = cs.progress[j].phase != kDone && cs.progress[j].phase != kCorked &&
                    IsTransfer(ops[j].kind) && ops[j].peer == sop.peer &&
                    IsRecv(ops[j].kind) == IsRecv(sop.kind);
        const uint32_t s = transfer ? streamOf(gate, cs, sop) : 0;
        if (pr.phase == kCorked) {
          // Its place in the stream is fixed (the gate already moved on); it waits for a flush.
          Endpoint* ep = comm_->endpoint(sop.peer, cs.lane);
          if (!ep) return InternalError("no endpoint to rank " + std::to_string(sop.peer));
          bool m = false;
          Status st = AdvanceCorked(ep, pr, &m);
          if (!st.ok()) return st.prepend(context());
          if (m) *moved = true;
          if (pr.phase != kDone) step_done = false;
          continue;
        }
        if (blocked || (transfer && !gate.owns(id_, s))) {
          step_done = false;
          continue;
        }
        bool m = false;
        Status st = agreement ? advanceAgreement(cs, i, &m) : advanceData(cs, i, &m);
        if (m) {
          *moved = true;
          if (transfer) touched_ = true;
        }
        if (!st.ok()) return st.prepend(context());
        if (transfer && !pr.released && (pr.phase == kDone || pr.phase == kCorked)) {
          gate.release(id_, s);  // a corked message's order on the stream is already fixed
          pr.released = true;
        }
        if (pr.phase != kDone) step_done = false;
      }
      if (!step_done || budget_ <= 0) {
        if (step_done) {  // out of budget at a step boundary: enter the next step next pass
          ++cs.step;
          cs.enterStep();
          *moved = true;
        }
        break;
      }
      ++cs.step;
      cs.enterStep();
      *moved = true;
    }
    if (!cs.finished()) all_done = false;
  }
  return all_done;
}

Status ActiveOp::PeerLeft(int peer, const WireHeader& h) const {
  const auto reason = h.reserved == static_cast<uint32_t>(FailureCause::Reason::kExited)
                          ? FailureCause::Reason::kExited
                          : FailureCause::Reason::kDestroyed;
  FailureCause c = comm_->peerCause(peer, reason);
  comm_->causes().offer(c);
  return RemoteError(c.describe() + " before this call reached it");
}

Status ActiveOp::OtherCommunicator(int peer, const WireHeader& h) const {
  char theirs[48], mine[48];
  auto name = [](char* out, uint32_t id) {
    if (id)
      std::snprintf(out, 48, "split communicator %08x", id);
    else
      std::snprintf(out, 48, "the communicator it was split from");
  };
  name(theirs, h.comm);
  name(mine, proto_.comm);
  return InvalidUsage("rank " + std::to_string(peer) + " sent " + DescribeHeader(h) + " #" +
                      std::to_string(h.seq) + " of " + theirs + " while this rank runs " +
                      DescribeCall(op_->desc()) + " #" + std::to_string(proto_.seq) + " of " +
                      (proto_.comm ? std::string(mine) : std::string("its root communicator")) +
                      ": a communicator and its split views share connections, so every rank "
                      "must call them in the same order (or split with BRAID_SPLIT_SHARE=0)");
}

Status ActiveOp::advanceAgreement(ChannelState& cs, size_t i, bool* moved) {
  const StepOp& sop = cs.ch->steps[cs.step].ops[i];
  OpProgress& pr = cs.progress[i];
  Endpoint* ep = comm_->endpoint(sop.peer, cs.lane);
  if (!ep) return InternalError("no endpoint to rank " + std::to_string(sop.peer));
  if (sop.kind == StepOpKind::kSend) {
    if (pr.phase == kHeader && pr.done == 0) {
      pr.hdr = proto_;
      pr.hdr.flags = kWireAgreement;
      pr.hdr.payload = have_conflict_ ? sizeof(CallConflict) : 0;
      sent_[cs.step] = conflict_;
    }
    return SendFramed(ep, pr, reinterpret_cast<const std::byte*>(&sent_[cs.step]), &budget_, moved,
                      corked_);
  }
  if (pr.drop) return dropPayload(ep, sop.peer, pr, moved);
  if (pr.phase == kHeader) {
    auto got = RecvHeader(ep, sop.peer, pr, moved);
    if (!got.ok()) return got.status();
    if (!*got) return Status::Ok();
    const WireHeader& h = pr.hdr;
    if (h.flags == kWireGoodbye) return PeerLeft(sop.peer, h);
    if (h.comm != proto_.comm) return OtherCommunicator(sop.peer, h);
    if (h.flags == kWireCarriesAgreement) {
      // The peer's call starts with an exchange whose first message carries its agreement, this
      // rank's does not: the calls differ (CallConflict). Its payload is dropped.
      noteConflict(sop.peer, h);
      return dropPayload(ep, sop.peer, pr, moved);
    }
    if (!(h.flags & kWireAgreement))
      return InvalidUsage("mismatch with rank " + std::to_string(sop.peer) + ": it sent " +
                          DescribeHeader(h) + " #" + std::to_string(h.seq) +
                          " without call verification while this rank verifies its calls "
                          "(set BRAID_VERIFY_CALLS alike on every rank)");
    if (h.payload != 0 && h.payload != sizeof(CallConflict))
      return RemoteError("rank " + std::to_string(sop.peer) + " sent a call-agreement message of " +
                         std::to_string(h.payload) + " bytes: the stream is corrupt");
    if (!(SignatureOf(h) == SignatureOf(proto_))) noteConflict(sop.peer, h);
    pr.phase = kPayload;
    pr.done = 0;
  }
  return recvConflictRecord(ep, pr, moved);
}

Status ActiveOp::recvConflictRecord(Endpoint* ep, OpProgress& pr, bool* moved) {
  auto* in = reinterpret_cast<std::byte*>(&incoming_);
  while (pr.phase == kPayload && pr.done < pr.hdr.payload) {
    auto r = ep->recv(in + pr.done, pr.hdr.payload - pr.done);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    pr.done += *r;
    *moved = true;
  }
  if (pr.phase == kPayload) {
    if (pr.hdr.payload && !have_conflict_) {
      conflict_ = incoming_;
      have_conflict_ = true;
    }
    pr.phase = kPadding;
    pr.done = 0;
  }
  return RecvPadding(ep, pr, moved);
}

void ActiveOp::noteConflict(int peer, const WireHeader& h) {
  if (have_conflict_) return;  // the first one found is the one reported
  conflict_ = {comm_->rank(), peer, SignatureOf(proto_), SignatureOf(h)};
  have_conflict_ = true;
}

Status ActiveOp::dropPayload(Endpoint* ep, int peer, OpProgress& pr, bool* moved) {
  // A conflicting message is at most an express-lane call's (or a conflict record): a larger
  // length is a corrupt stream, not a call to skip.
  if (pr.hdr.payload > kExpressBytes)
    return RemoteError("rank " + std::to_string(peer) + " sent a message of " +
                       std::to_string(pr.hdr.payload) +
                       " bytes with its call agreement: the stream is corrupt");
  if (pr.phase == kHeader) {
    pr.drop = true;
    pr.phase = kPayload;
    pr.done = 0;
  }
  while (pr.phase == kPayload && pr.done < pr.hdr.payload) {
    auto view = ep->peek(pr.hdr.payload - pr.done);
    if (!view.ok()) return view.status();
    if (view->empty()) return Status::Ok();
    ep->consume(view->size());
    pr.done += view->size();
    *moved = true;
  }
  if (pr.phase == kPayload) {
    pr.phase = kPadding;
    pr.done = 0;
  }
  return RecvPadding(ep, pr, moved);
}

Status ActiveOp::advanceData(ChannelState& cs, size_t i, bool* moved) {
  const StepOp& sop = cs.ch->steps[cs.step].ops[i];
  OpProgress& pr = cs.progress[i];
  if (!IsTransfer(sop.kind)) {
    // Elementwise local steps run in pieces of the pass's budget (pr.done counts elements): an
    // out-of-place all-gather of 64 MiB copies its own 32 MiB block locally, and done whole that
    // held the loop for milliseconds while a small operation issued after it waited to start.
    // Codec steps work in blocks and run whole.
    const bool elementwise = sop.kind == StepOpKind::kDivide ||
                             ((sop.kind == StepOpKind::kCopy || sop.kind == StepOpKind::kReduce ||
                               sop.kind == StepOpKind::kScale) &&
                              bufs_.elsize[sop.src.buffer] == bufs_.elsize[sop.dst.buffer]);
    if (!elementwise) {
      BRAID_RETURN_IF_ERROR(runLocal(sop, bufs_.bytes(sop.src)));
      budget_ -= static_cast<int64_t>(bufs_.bytes(sop.dst));
    } else {
      const uint64_t count = sop.kind == StepOpKind::kDivide ? sop.dst.count : sop.src.count;
      const uint64_t elsize = bufs_.elsize[sop.dst.buffer];
      const int64_t piece_bytes = std::max(budget_, kMinLocalPieceBytes);
      const uint64_t n = std::min<uint64_t>(
          count - pr.done, std::max<uint64_t>(1, static_cast<uint64_t>(piece_bytes) / elsize));
      StepOp piece = sop;
      piece.src.offset += pr.done;
      piece.src.count = n;
      piece.dst.offset += pr.done;
      piece.dst.count = n;
      BRAID_RETURN_IF_ERROR(runLocal(piece, bufs_.bytes(sop.src)));
      budget_ -= static_cast<int64_t>(n * elsize);
      pr.done += n;
      if (pr.done < count) {
        *moved = true;
        return Status::Ok();
      }
    }
    pr.phase = kDone;
    *moved = true;
    return Status::Ok();
  }
  Endpoint* ep = comm_->endpoint(sop.peer, cs.lane);
  if (!ep) return InternalError("no endpoint to rank " + std::to_string(sop.peer));
  if (sop.kind == StepOpKind::kSend) {
    if (pr.phase == kHeader && pr.done == 0) {
      pr.hdr = proto_;
      pr.hdr.payload = bufs_.bytes(sop.src);
      if (carriedRound(cs)) pr.hdr.flags = kWireCarriesAgreement;
      if (carriedRound(cs) && shadow_output_ && have_conflict_) {
        // A butterfly round after a conflict: the round's message is the conflict record, as
        // the agreement's would be, and the data (now meaningless) stays here.
        pr.hdr.flags = kWireAgreement;
        pr.hdr.payload = sizeof(CallConflict);
        sent_[cs.step] = conflict_;
      }
      if (is_p2p_) {
        const P2PCall& c = d_.p2p[sop.src.buffer];
        pr.hdr.seq = p2p_seq_[i];
        pr.hdr.dtype = static_cast<uint8_t>(c.dtype);
        pr.hdr.count = c.count;
      }
    }
    const std::byte* data = pr.hdr.flags == kWireAgreement
                                ? reinterpret_cast<const std::byte*>(&sent_[cs.step])
                                : bufs_.at(sop.src);
    return SendFramed(ep, pr, data, &budget_, moved, corked_);
  }
  // Receives.
  if (pr.drop) return dropPayload(ep, sop.peer, pr, moved);
  if (pr.phase != kHeader && pr.hdr.flags == kWireAgreement)
    return recvConflictRecord(ep, pr, moved);
  const Slice& dst_slice = sop.dst;
  const uint64_t expect = bufs_.bytes(dst_slice);
  const size_t elsize = bufs_.elsize[dst_slice.buffer];
  if (pr.phase == kHeader) {
    auto got = RecvHeader(ep, sop.peer, pr, moved);
    if (!got.ok()) return got.status();
    if (!*got) return Status::Ok();
    const WireHeader& h = pr.hdr;
    if (h.flags == kWireGoodbye) return PeerLeft(sop.peer, h);
    // A message of another communicator sharing the streams (a split view or its root): the
    // ranks issued their calls in different orders and the streams are out of step.
    if (h.comm != proto_.comm) return OtherCommunicator(sop.peer, h);
    if (is_p2p_) {
      if (h.coll != static_cast<uint8_t>(CollKind::kSendRecv) || h.seq != p2p_seq_[i])
        return InvalidUsage("receive #" + std::to_string(p2p_seq_[i]) + " from rank " +
                            std::to_string(sop.peer) + " met " +
                            (h.coll == static_cast<uint8_t>(CollKind::kSendRecv)
                                 ? "its send #" + std::to_string(h.seq)
                                 : DescribeHeader(h) + " #" + std::to_string(h.seq)) +
                            ": the ranks' calls do not match");
      if (h.payload != expect)
        return InvalidUsage("receive of " + std::to_string(expect) + " bytes from rank " +
                            std::to_string(sop.peer) + " met " + DescribeHeader(h) +
                            ": send and receive sizes must match");
    } else if (carriedRound(cs) &&
               (h.flags == kWireAgreement || h.flags == kWireCarriesAgreement)) {
      // The peer's agreement (CallConflict): its data message of this round, or a plain
      // agreement message when its call does not run these rounds (or, in a butterfly's later
      // round, when it knows of a conflict: the message then carries the record).
      const bool same = SignatureOf(h) == SignatureOf(proto_);
      if (h.flags == kWireAgreement && shadow_output_) {
        if (h.payload != 0 && h.payload != sizeof(CallConflict))
          return RemoteError("rank " + std::to_string(sop.peer) +
                             " sent a call-agreement message of " + std::to_string(h.payload) +
                             " bytes: the stream is corrupt");
        // Without a record, the same call that does not carry its agreement: the ranks built
        // different schedules for it (conflictError says so).
        if (!same || h.payload == 0) noteConflict(sop.peer, h);
        pr.phase = kPayload;
        pr.done = 0;
        return recvConflictRecord(ep, pr, moved);
      }
      if (h.flags == kWireAgreement || !same) {
        noteConflict(sop.peer, h);
        return dropPayload(ep, sop.peer, pr, moved);
      }
      // A round after a conflict was found: the data is read past, the call fails at the end.
      if (have_conflict_) return dropPayload(ep, sop.peer, pr, moved);
      agreement_checked_ = true;
    } else if (h.flags != 0 || carriedRound(cs) || !(SignatureOf(h) == SignatureOf(proto_))) {
      // Verifying ranks send agreement flags; a message without them here, or with them to a
      // rank that does not verify, means the ranks set BRAID_VERIFY_CALLS differently.
      // (A point-to-point message never carries the flags: no hint for it.)
      const bool collective = h.coll != static_cast<uint8_t>(CollKind::kSendRecv);
      const bool theirs = h.flags & (kWireAgreement | kWireCarriesAgreement);
      const bool mine = comm_->config().verify_calls;
      const char* hint = collective && theirs && !mine   ? "with call verification on ("
                         : collective && !theirs && mine ? "without call verification ("
                                                         : "";
      // The variable leads: a peer that hears of this failure through its notice sees only the
      // start of the message (FailureCause::kDetailBytes).
      return InvalidUsage(
          "mismatch with rank " + std::to_string(sop.peer) + ": " +
          (*hint ? "BRAID_VERIFY_CALLS differs: " : "") + "this rank called " +
          DescribeCall(op_->desc()) + " #" + std::to_string(proto_.seq) + ", rank " +
          std::to_string(sop.peer) + " called " + hint + DescribeHeader(h) + " #" +
          std::to_string(h.seq) + (*hint ? "; set BRAID_VERIFY_CALLS alike)" : "") +
          "; every rank must issue the same collectives in the same order with the same count, "
          "type, op and root");
    }
    // (A point-to-point size mismatch was refused above, as invalid usage.)
    if (h.payload != expect)
      return InternalError("schedule mismatch with rank " + std::to_string(sop.peer) +
                           ": expected " + std::to_string(expect) + " bytes, peer sent " +
                           std::to_string(h.payload) +
                           " (ranks configured differently? check "
                           "BRAID_NCHANNELS/BRAID_CHUNK_BYTES/BRAID_ALGO)");
    pr.phase = kPayload;
    pr.done = 0;
  }
  while (pr.phase == kPayload && pr.done < expect) {
    if (budget_ <= 0) return Status::Ok();
    if (sop.kind == StepOpKind::kRecv) {
      auto r = ep->recv(bufs_.at(dst_slice) + pr.done, expect - pr.done);
      if (!r.ok()) return r.status();
      if (*r == 0) return Status::Ok();
      pr.done += *r;
      budget_ -= static_cast<int64_t>(*r);
      *moved = true;
      continue;
    }
    // kRecvReduce: combine straight out of the transport's buffer (no staging copy).
    auto view = ep->peek(expect - pr.done);
    if (!view.ok()) return view.status();
    size_t n = view->size() / elsize;
    if (n == 0) return Status::Ok();
    size_t bytes = n * elsize;
    ReduceKernel(data_sched_->buffers[dst_slice.buffer].dtype, args_.op,
                 bufs_.at(sop.src) + pr.done, view->data(), bufs_.at(dst_slice) + pr.done, n);
    ep->consume(bytes);
    pr.done += bytes;
    budget_ -= static_cast<int64_t>(bytes);
    *moved = true;
  }
  if (pr.phase == kPayload) {
    pr.phase = kPadding;
    pr.done = 0;
  }
  return RecvPadding(ep, pr, moved);
}

Status ActiveOp::runLocal(const StepOp& sop, uint64_t whole_bytes) {
  const DataType dst_type = data_sched_->buffers[sop.dst.buffer].dtype;
  std::byte* dst = bufs_.at(sop.dst);
  switch (sop.kind) {
    case StepOpKind::kCopy: {
      const std::byte* src = bufs_.at(sop.src);
      const uint64_t bytes = bufs_.bytes(sop.src);
      const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
      if (whole_bytes >= cpu::kStreamingCopyMinBytes && (d >= s + bytes || s >= d + bytes))
        cpu::StreamingCopy(dst, src, bytes);
      else if (dst != src)
        std::memmove(dst, src, bytes);
      return Status::Ok();
    }
    case StepOpKind::kReduce:
      ReduceKernel(dst_type, args_.op, bufs_.at(sop.src), dst, dst, sop.src.count);
      return Status::Ok();
    case StepOpKind::kScale:
      ScaleKernel(dst_type, bufs_.at(sop.src), dst, sop.src.count, d_.scalar);
      return Status::Ok();
    case StepOpKind::kDivide:
      DivideKernel(dst_type, dst, sop.dst.count, static_cast<uint64_t>(comm_->nranks()));
      return Status::Ok();
    case StepOpKind::kQuantize:
      return EncodeKernel(sop.codec, data_sched_->buffers[sop.src.buffer].dtype, bufs_.at(sop.src),
                          sop.src.count, dst);
    case StepOpKind::kDequantize:
      return DecodeKernel(sop.codec, dst_type, bufs_.at(sop.src), sop.dst.count, dst);
    case StepOpKind::kDequantizeReduce:
      return DecodeReduceKernel(sop.codec, dst_type, args_.op, bufs_.at(sop.src), sop.dst.count,
                                dst, codec_tmp_.data());
    default:
      return InternalError(std::string("not a local op: ") + StepOpKindName(sop.kind));
  }
}

void ActiveOp::collectWaits(const StreamGate& gate, std::vector<TransferWait>& out) const {
  const auto& chans = currentChannels();
  for (const auto& cs : chans) {
    if (cs.finished()) continue;
    const Step& step = cs.ch->steps[cs.step];
    // A step held back by an edge waits for another channel of this operation, whose own
    // transfers are collected; its transfers cannot move yet. Arming them anyway made a rank
    // whose data for such a step had already arrived (buffered, so arm() reports it ready)
    // skip its sleep and spin through the wait without yielding, on the core the ranks it
    // waited for needed: HO-Ring's reduce-scatter (its inter step waits for an intra round)
    // took 14-32 ms instead of 1 with BRAID_SPIN_US=0 on 8 ranks over 2 cores.
    if (!std::all_of(step.deps.begin(), step.deps.end(),
                     [&](const StepRef& d) { return chans[d.channel].step > d.step; }))
      continue;
    const auto& ops = step.ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (cs.progress[i].phase == kDone || !IsTransfer(ops[i].kind)) continue;
      // A corked send waits for room to flush, whoever heads the stream now.
      if (cs.progress[i].phase != kCorked && !gate.owns(id_, streamOf(gate, cs, ops[i]))) continue;
      Endpoint* ep = comm_->endpoint(ops[i].peer, cs.lane);
      const bool recv = IsRecv(ops[i].kind);
      auto it =
          std::find_if(out.begin(), out.end(), [&](const TransferWait& w) { return w.ep == ep; });
      if (it == out.end())
        out.push_back({ep, !recv, recv});
      else
        (recv ? it->recv : it->send) = true;
    }
  }
}

std::string ActiveOp::pendingDescription(const StreamGate& gate) const {
  if (const OneSidedRun* run = boardBlocked()) {
    const int peer = run->blocked().peer;
    if (peer < 0) return run->describe();
    const auto& info = comm_->rankInfos()[static_cast<size_t>(peer)];
    return run->describe() + " (rank " + std::to_string(peer) + ": host " + info.hostname +
           ", pid " + std::to_string(info.pid) + ")";
  }
  std::string s;
  int listed = 0;
  for (const auto& cs : currentChannels()) {
    if (cs.finished()) continue;
    const auto& ops = cs.ch->steps[cs.step].ops;
    for (size_t i = 0; i < ops.size() && listed < 3; ++i) {
      if (cs.progress[i].phase == kDone || !IsTransfer(ops[i].kind)) continue;
      const auto& info = comm_->rankInfos()[ops[i].peer];
      s += std::string(listed ? "; " : "") +
           (IsRecv(ops[i].kind) ? "receiving from" : "sending to") + " rank " +
           std::to_string(ops[i].peer) + " (host " + info.hostname + ", pid " +
           std::to_string(info.pid) + ") on lane " + std::to_string(cs.lane) + ", " +
           (stage_ == Stage::kAgreement ? "call agreement " : "") + "step " +
           std::to_string(cs.step + 1) + "/" + std::to_string(cs.ch->steps.size()) +
           (cs.progress[i].phase == kCorked ? " (buffered: waiting for the peer to read)"
            : gate.owns(id_, streamOf(gate, cs, ops[i])) ? ""
                                                         : " (behind an earlier operation)");
      ++listed;
    }
  }
  return s;
}

std::vector<int> ActiveOp::waitingOn(const StreamGate& gate) const {
  if (const OneSidedRun* run = boardBlocked())
    return run->blocked().peer >= 0 ? std::vector<int>{run->blocked().peer} : std::vector<int>{};
  std::vector<int> peers;
  for (const auto& cs : currentChannels()) {
    if (cs.finished()) continue;
    const auto& ops = cs.ch->steps[cs.step].ops;
    for (size_t i = 0; i < ops.size(); ++i)
      if (cs.progress[i].phase != kDone && IsRecv(ops[i].kind) &&
          gate.owns(id_, streamOf(gate, cs, ops[i])))
        peers.push_back(ops[i].peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::string ActiveOp::progressReport(const StreamGate& gate) const {
  std::string s = "  " + DescribeCall(d_) + (is_p2p_ ? "" : " #" + std::to_string(seq_)) + " [" +
                  algo_name_ + "] " +
                  (stage_ == Stage::kAgreement        ? "call agreement"
                   : stage_ == Stage::kBoardAgreement ? "call agreement on the board"
                   : stage_ == Stage::kBoard          ? "on the board"
                   : stage_ == Stage::kData           ? "data"
                                                      : "finished") +
                  "\n";
  if (stage_ == Stage::kBoardAgreement || stage_ == Stage::kBoard) {
    s += "    " + (board_started_ ? run().describe() : std::string("waiting for its board posts")) +
         "\n";
    const auto peers = waitingOn(gate);
    if (!peers.empty())
      s += "    waiting on rank " + std::to_string(peers[0]) +
           " (not there yet, or stuck on an earlier operation)\n";
    return s;
  }
  for (const auto& cs : currentChannels()) {
    s += "    lane " + std::to_string(cs.lane) + ": ";
    if (cs.finished()) {
      s += "done\n";
      continue;
    }
    s += "step " + std::to_string(cs.step + 1) + "/" + std::to_string(cs.ch->steps.size());
    const auto& ops = cs.ch->steps[cs.step].ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      const OpProgress& pr = cs.progress[i];
      if (pr.phase == kDone || !IsTransfer(ops[i].kind)) continue;
      s += std::string(", ") + (IsRecv(ops[i].kind) ? "recv from " : "send to ") +
           std::to_string(ops[i].peer) + " " +
           (pr.phase == kHeader    ? "header"
            : pr.phase == kPayload ? "payload"
            : pr.phase == kCorked  ? "buffered, waiting to flush"
                                   : "padding") +
           " " + std::to_string(pr.done) + " B" +
           (pr.phase == kCorked || gate.owns(id_, streamOf(gate, cs, ops[i]))
                ? ""
                : " (queued behind an earlier op)");
    }
    s += "\n";
  }
  const auto peers = waitingOn(gate);
  if (!peers.empty()) {
    s += "    waiting on rank";
    s += peers.size() > 1 ? "s" : "";
    for (size_t i = 0; i < peers.size(); ++i) s += (i ? ", " : " ") + std::to_string(peers[i]);
    s += " (not there yet, or stuck on an earlier operation)\n";
  }
  return s;
}

}  // namespace braid
