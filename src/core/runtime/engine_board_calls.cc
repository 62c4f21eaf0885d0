// The engine's one-sided mode on a caller's thread (Engine::runBoardCalls): blocking calls on
// the host's board, run straight from the API while the engine is idle. The same schedules and
// executor (OneSidedRun) as the board stages of an operation on the engine; what this saves is
// the operation object, the window and the progress loop's passes: a small call costs a few
// hundred nanoseconds here (docs/performance.md "Small messages").
#include <sched.h>

#include <algorithm>
#include <string>

#include "algorithms/board_schedules.h"
#include "core/base/log.h"
#include "core/net/failure_notice.h"
#include "core/runtime/board_selection.h"
#include "core/runtime/comm.h"
#include "core/runtime/engine.h"

namespace braid {
namespace {

// How long one sleep lasts before a waiter checks for failures again: bounds how late a peer's
// death, an abort or a revoke is noticed (a post itself wakes the sleeper at once).
constexpr int64_t kSleepSliceUs = 5000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Status OtherCallOnTheStreams(int peer, const std::string& where) {
  return InvalidUsage("call mismatch: rank " + std::to_string(peer) +
                      " is in an operation this rank has not issued (it sent data for it on the "
                      "streams) instead of this call: another collective, or a call on a split "
                      "view where this rank called its root (a communicator and its views share "
                      "connections, so every rank must call them in the same order; " +
                      where + ")");
}

namespace {

std::string CallContext(const braidComm& comm, const OpDesc& d, uint64_t seq) {
  return comm.where() + ": " + DescribeCall(d) + " #" + std::to_string(seq) + " [oneshot]: ";
}

}  // namespace

inline bool Engine::planBoardCall(const OpDesc& d, Planned& p, std::span<Planned> planned) {
  // The last shape planned here, kept alive by the memo: no arguments built, no plan cache
  // lookup, no reference count touched. The shape is all of the call a plan depends on (the rest
  // of CollArgsFor is the communicator's, fixed at init).
  if (board_memo_plan_.schedule && SamePlanShape(d, board_memo_desc_)) [[likely]] {
    p.keep = {};
    p.schedule = &board_memo_plan_.schedule;
    p.scratch_bytes = board_memo_scratch_;
    p.sig = board_memo_sig_;
    return true;
  }
  return planNewBoardCall(d, p, planned);
}

bool Engine::planNewBoardCall(const OpDesc& d, Planned& p, std::span<Planned> planned) {
  braidComm& comm = *comm_;
  const CollArgs args = CollArgsFor(comm, d);
  auto plan = PlanFor(comm, d, args);
  if (!plan.ok() || plan->algo != &BoardAlgorithm()) return false;
  p.keep = std::move(plan->schedule);
  p.schedule = &p.keep;
  p.sig = BoardSignatureOf(d, comm.nranks(), static_cast<uint8_t>(PlanBoardCall(args)->form));
  p.scratch_bytes = 0;
  for (const BufferDesc& b : p.keep->buffers)
    if (b.role == BufferRole::kScratch)
      p.scratch_bytes += (b.count * DataTypeSize(b.dtype) + 63) / 64 * 64;
  // Earlier calls of the batch that took the memo's plan keep it themselves.
  for (Planned& q : planned)
    if (q.schedule == &board_memo_plan_.schedule) {
      q.keep = board_memo_plan_.schedule;
      q.schedule = &q.keep;
    }
  board_memo_desc_ = d;
  board_memo_plan_ = {&BoardAlgorithm(), p.keep};
  board_memo_scratch_ = p.scratch_bytes;
  board_memo_sig_ = p.sig;
  return true;
}

inline void Engine::startBoardCall(BoardCall& c, const OpDesc& d, const Planned& p) {
  braidComm& comm = *comm_;
  braidComm::CallNumbers& numbers = comm.callNumbers();
  c.desc = &d;
  board_started_.store(board_started_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
  c.seq = numbers.coll++;
  colls_issued_.store(numbers.coll, std::memory_order_relaxed);
  comm.board()->announceStarted(numbers.coll);
  c.live = true;
  if (comm.asyncErrorCode() != braidSuccess) return;  // the caller fails it
  const RankSchedule& s = **p.schedule;
  // The call's buffers: the user's, and scratch (by reference in place, a pre-multiplied sum's
  // scaled input) from memory kept between calls.
  if (c.scratch.size() < p.scratch_bytes + 64) c.scratch.resize(p.scratch_bytes + 64);
  auto* send = const_cast<std::byte*>(static_cast<const std::byte*>(d.sendbuf));
  auto* recv = static_cast<std::byte*>(d.recvbuf);
  if (c.slots_of == *p.schedule && c.slots_scratch == c.scratch.data()) {
    for (const uint16_t k : c.send_slots) c.slots[k] = send;
    for (const uint16_t k : c.recv_slots) c.slots[k] = recv;
  } else {
    c.slots.assign(s.buffers.size(), nullptr);
    c.send_slots.clear();
    c.recv_slots.clear();
    uint64_t at = 0;
    for (size_t k = 0; k < s.buffers.size(); ++k) {
      const BufferDesc& b = s.buffers[k];
      switch (b.role) {
        case BufferRole::kUserSend:
          c.slots[k] = send;
          c.send_slots.push_back(static_cast<uint16_t>(k));
          break;
        case BufferRole::kUserRecv:
          c.slots[k] = recv;
          c.recv_slots.push_back(static_cast<uint16_t>(k));
          break;
        case BufferRole::kScratch:
          c.slots[k] = c.scratch.data() + at;
          at += (b.count * DataTypeSize(b.dtype) + 63) / 64 * 64;
          break;
        default:
          break;
      }
    }
    c.slots_of = *p.schedule;
    c.slots_scratch = c.scratch.data();
  }
  c.run.start(comm, *p.schedule, d, p.sig, c.slots, &c.pulls);
}

Status Engine::failedEarlier(const OpDesc& d) const {
  Status st = comm_->asyncError();
  return st.prepend(comm_->where() + ": " + DescribeCall(d) +
                    ": not completed because the communicator failed: ");
}

void Engine::endBoardCall(BoardCall& c) {
  c.live = false;
  board_done_.store(board_done_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  last_coll_completed_.store(static_cast<int64_t>(c.seq), std::memory_order_relaxed);
}

Status Engine::driveOneBoardCall(const OpDesc& d, const Planned& p) {
  BoardCall& c = board_calls_[0];
  startBoardCall(c, d, p);
  return finishBoardCall(c, d);
}

bool Engine::tryFinishBoardCall(BoardCall& c, const OpDesc& d, Status* result) {
  bool moved = false;
  if (comm_->asyncErrorCode() != braidSuccess) {
    *result = failedEarlier(d);
  } else if (Status st = c.run.advance(&moved); !st.ok()) {
    *result = runError(c, st);
  } else if (!c.run.finished()) {
    return false;
  }
  endBoardCall(c);
  return true;
}

Status Engine::finishBoardCall(BoardCall& c, const OpDesc& d) {
  // (tryFinishBoardCall's steps, with a wait between passes: written out, because the blocking
  // call's path runs this loop, and a call per pass was not inlined.)
  braidComm& comm = *comm_;
  std::optional<Deadline> deadline;
  Status result;
  for (;;) {
    if (comm.asyncErrorCode() != braidSuccess) {
      result = failedEarlier(d);
      break;
    }
    bool moved = false;
    if (Status st = c.run.advance(&moved); !st.ok()) {
      result = runError(c, st);
      break;
    }
    if (c.run.finished()) break;
    if (Status st = awaitBoard(c.run, d, c.seq, &deadline); !st.ok()) {
      result = st;
      break;
    }
  }
  endBoardCall(c);
  return result;
}

Engine::EagerRun Engine::eagerBoardRun(const braidComm* owner, const OpDesc& d, Status* result) {
  braidComm& comm = *comm_;
  // This communicator's own call (not a split view's), with posts to take, room behind the
  // parked calls, and a spare that will take it as it is should it wait.
  if (owner != comm_ || !comm.board() || parked_.size() >= kMaxParked ||
      spare_.size() <= parked_.size() || aborted_.load(std::memory_order_acquire) ||
      comm.asyncErrorCode() != braidSuccess || comm.boardClock().next() == 0 ||
      d.kind == CollKind::kSendRecv)
    return EagerRun::kNotTaken;
  // A board call not live.
  BoardCall* c = nullptr;
  for (BoardCall& b : board_calls_)
    if (!b.live) {
      c = &b;
      break;
    }
  if (!c) return EagerRun::kNotTaken;
  if (board_planned_.empty()) board_planned_.resize(1);
  Planned& p = board_planned_[0];
  if (!planBoardCall(d, p, {})) return EagerRun::kNotTaken;
  // A spare no parked call holds that takes the call as it is, among the last few: calls of two
  // shapes in flight by turns each find one of theirs.
  const auto held = [&](size_t j) {
    for (const ParkedCall& q : parked_)
      if (q.spare == j) return true;
    return false;
  };
  size_t spare = spare_.size();
  int looked = 0;
  for (size_t j = spare_.size(); j-- > 0 && looked < 4;) {
    if (held(j)) continue;
    ++looked;
    const ActiveOp& a = *spare_[j];
    if (a.canTake(comm_, d, *p.schedule)) {
      spare = j;
      break;
    }
  }
  if (spare == spare_.size()) {
    p.keep = {};
    return EagerRun::kNotTaken;
  }
  startBoardCall(*c, d, p);  // (the run keeps its schedule)
  p.keep = {};
  bool moved = false;
  if (comm.asyncErrorCode() != braidSuccess) {
    *result = failedEarlier(d);
  } else if (Status st = c->run.advance(&moved); !st.ok()) {
    *result = runError(*c, st);
  } else if (!c->run.finished() || !parked_.empty()) {
    // Waiting for a peer, or finished behind calls still parked (they complete first).
    eager_call_ = c;
    eager_spare_ = spare;
    return EagerRun::kWaiting;
  }
  endBoardCall(*c);
  return EagerRun::kFinished;
}

void Engine::adoptEagerRun(std::shared_ptr<Operation> op, BoardCall& c,
                           std::unique_ptr<ActiveOp> a) {
  Operation* raw = op.get();
  // The run reads the call's description from the operation from here on.
  c.desc = &raw->desc();
  c.run.rebind(raw->desc());
  a->arm(comm_, raw, std::move(op), next_id_++, c.seq);  // (eagerBoardRun asked canTake)
  a->adoptBoardRun(&c.run);
  c.adopted = true;
  // Counted as an operation (the report's totals): it completes as one.
  board_started_.store(board_started_.load(std::memory_order_relaxed) - 1,
                       std::memory_order_relaxed);
  submitted_.fetch_add(1, std::memory_order_relaxed);
  gate_.claim(a->id(), a->claims());
  active_.push_back(std::move(a));
}

void Engine::parkEagerRun(std::shared_ptr<Operation> op) {
  BoardCall& c = *eager_call_;
  // The run reads the call's description from the operation from here on.
  c.desc = &op->desc();
  c.run.rebind(op->desc());
  parked_.push_back({std::move(op), &c, eager_spare_});
}

void Engine::adoptParked() {
  if (parked_.empty()) return;
  // In order: the oldest call is the first operation. Each takes the spare it holds; the spares
  // taken are then removed together (their indices name them until then).
  for (ParkedCall& p : parked_) adoptEagerRun(std::move(p.op), *p.call, std::move(spare_[p.spare]));
  parked_.clear();
  std::erase_if(spare_, [](const std::unique_ptr<ActiveOp>& a) { return !a; });
}

void Engine::completeParked(size_t count, bool wait) {
  size_t n = 0;
  try {
    for (; n < count; ++n) {
      ParkedCall& p = parked_[n];
      Status result;
      if (wait)
        result = finishBoardCall(*p.call, p.op->desc());
      else if (!tryFinishBoardCall(*p.call, p.op->desc(), &result))
        break;
      // Counted as the board call it ran as (startBoardCall, endBoardCall), and as its caller's
      // operation (startCall's opIssued).
      braidComm* owner = p.op->owner() ? p.op->owner() : comm_;
      p.op->complete(std::move(result));
      owner->opDone();
    }
  } catch (const std::bad_alloc&) {
    // (No memory for an error's text.) The calls not completed go on as operations, which the
    // abort that driveOnCaller makes of this then fails: their waiters are not left waiting.
    parked_.erase(parked_.begin(), parked_.begin() + static_cast<ptrdiff_t>(n));
    adoptParked();
    throw;
  }
  parked_.erase(parked_.begin(), parked_.begin() + static_cast<ptrdiff_t>(n));
}

void Engine::finishParked(const Operation& upto) {
  size_t n = 0;
  while (parked_[n].op.get() != &upto) ++n;
  completeParked(n + 1, true);
}

bool Engine::eagerBoardCall(std::shared_ptr<Operation>& op) {
  Status result;
  switch (eagerBoardRun(op->owner(), op->desc(), &result)) {
    case EagerRun::kNotTaken:
      return false;
    case EagerRun::kWaiting:
      // It waits for a peer: an operation from here, numbered as the call was.
      parkEagerRun(std::move(op));
      adoptParked();
      return true;
    case EagerRun::kFinished:
      break;
  }
  op->complete(std::move(result));
  comm_->opDone();  // (after complete(), as Engine::finish does)
  return true;
}

bool Engine::driveBoardCalls(std::span<const OpDesc* const> calls, Status* results) {
  braidComm& comm = *comm_;
  const size_t n = calls.size();
  // Plans first: every call runs on the board, or none runs here.
  if (board_planned_.size() < n) board_planned_.resize(n);
  const std::span<Planned> planned(board_planned_.data(), n);
  for (size_t i = 0; i < n; ++i) {
    if (!planBoardCall(*calls[i], planned[i], planned.first(i))) {
      for (size_t k = 0; k < i; ++k) planned[k].keep = {};
      return false;
    }
  }
  // One call, its posts known (nothing else runs on an idle engine): straight through.
  if (n == 1 && comm.boardClock().next() != 0) {
    results[0] = driveOneBoardCall(*calls[0], planned[0]);
    planned[0].keep = {};
    return true;
  }
  size_t next = 0;  // calls started: [0, next)
  size_t left = n;  // calls not complete
  std::optional<Deadline> deadline;
  // Call i runs in board_calls_[i % kBoardBatch]: at most kBoardBatch in flight.
  const auto slot = [&](size_t i) -> BoardCall& { return board_calls_[i % kBoardBatch]; };
  const auto complete = [&](size_t i, const Status& st) {
    results[i] = st;
    planned[i].keep = {};
    --left;
    endBoardCall(slot(i));
  };
  while (left > 0) {
    // Start the calls whose posts are known (a call of several posts settles its count at its
    // agreement), in order.
    while (next < n && comm.boardClock().next() != 0 && !slot(next).live) {
      const size_t i = next++;
      startBoardCall(slot(i), *calls[i], planned[i]);
      if (comm.asyncErrorCode() != braidSuccess) complete(i, failedEarlier(*calls[i]));
    }
    // Every call in flight, in order, as far as it goes.
    bool moved = false;
    size_t first_blocked = n;
    for (size_t i = next > kBoardBatch ? next - kBoardBatch : 0; i < next; ++i) {
      BoardCall& c = slot(i);
      if (!c.live) continue;
      if (comm.asyncErrorCode() != braidSuccess) {
        complete(i, failedEarlier(*calls[i]));
        continue;
      }
      Status st = c.run.advance(&moved, /*defer_publish=*/true);
      if (!st.ok()) {
        complete(i, runError(c, st));
        continue;
      }
      if (c.run.finished()) {
        complete(i, Status::Ok());
        deadline.reset();
        continue;
      }
      if (first_blocked == n) first_blocked = i;
    }
    // One fence for every post the pass made (the runs defer theirs), before anything waits: a
    // peer may sleep on any of them. Eight calls of a group each publishing its own post cost
    // 0.03-0.07 us per call (all_reduce_perf -m 8; docs/performance.md "Publish before
    // polling").
    comm.board()->publish();
    if (left == 0 || moved) continue;
    if (first_blocked == n) continue;  // the next call waits for its posts: loop
    BoardCall& c = slot(first_blocked);
    if (Status st = awaitBoard(c.run, *c.desc, c.seq, &deadline); !st.ok()) {
      complete(first_blocked, st);
      for (size_t i = next > kBoardBatch ? next - kBoardBatch : 0; i < next; ++i)
        if (slot(i).live) complete(i, failedEarlier(*calls[i]));
    }
  }
  return true;
}

Status Engine::runError(const BoardCall& c, const Status& st) {
  // A mismatch: every rank fails the call, nothing was written, the communicator goes on.
  if (c.run.mismatched()) return Status(st).prepend(CallContext(*comm_, *c.desc, c.seq));
  return failBoardCall(st, *c.desc, c.seq, std::nullopt);
}

Status Engine::failBoardCall(const Status& st, const OpDesc& d, uint64_t seq,
                             const std::optional<FailureCause>& local) {
  braidComm& comm = *comm_;
  const std::string ctx = CallContext(comm, d, seq);
  // An abort or revoke of this communicator already marked it failed and told the peers.
  if (comm.asyncErrorCode() != braidSuccess) return Status(st).prepend(ctx);
  const Status final =
      comm.failWithCause(Status(st).prepend(ctx), ctx, CollKindName(d.kind), seq, local);
  // Like an engine failure: the operations in flight (non-blocking calls, views) end with it.
  comm.abortOperations(final);
  return final;
}

Status Engine::awaitBoard(OneSidedRun& run, const OpDesc& d, uint64_t seq,
                          std::optional<Deadline>* deadline) {
  braidComm& comm = *comm_;
  LocalBoard& board = *comm.board();
  if (run.blockedReady()) return Status::Ok();
  const OneSidedRun::Blocked b = run.blocked();
  // Spin while the peer is likely on its way: it is, on a host with a core per rank, unless the
  // program is unbalanced. With more ranks than cores a spinning rank takes the core its peer
  // needs, so it yields instead. The clock is read only every 64 polls (a post usually lands
  // sooner, and a clock read costs as much as a few polls).
  const bool yield = comm.nranks() > comm.hostCpus();
  const int64_t spin_us = comm.config().spin_us;
  int64_t start = 0;
  for (uint32_t i = 1;; ++i) {
    if (run.blockedReady()) return Status::Ok();
    if (yield || (i & 63) == 0) {
      const int64_t now = NowMicros();
      if (start == 0) start = now;
      if (now - start >= spin_us) break;
    }
    if (yield)
      sched_yield();
    else
      CpuRelax();
  }
  run.publish();
  if (!*deadline) *deadline = Deadline::After(comm.config().timeout_ms);
  const int64_t waited_since_us = start != 0 ? start : NowMicros();
  int deadlock_hits = 0;
  for (;;) {
    if (b.counter == Counter::kPosted)
      board.sleepUntilPosted(b.peer, b.value, kSleepSliceUs);
    else
      board.sleepUntilConsumed(b.peer, b.value, kSleepSliceUs);
    if (run.blockedReady()) return Status::Ok();
    if (report_requested_.load(std::memory_order_relaxed)) answerReport();
    // A death seen here was reported as the cause by deathError.
    // (Looked at again once the peer has gone: what it posted or read before is visible then.)
    if (board.dead(b.peer) && !run.blockedReady())
      return failBoardCall(board.deathError(b.peer), d, seq, std::nullopt);
    if (comm.asyncErrorCode() != braidSuccess)
      return failBoardCall(comm.asyncError(), d, seq, std::nullopt);
    if (auto cause = comm.causes().first(); cause && !cause->weak())
      return failBoardCall(Status::Error(cause->errorClass(), cause->describe()), d, seq,
                           std::nullopt);
    // The peer is not where this call needs it but sends this rank stream data, which nothing of
    // this rank's (an idle engine) will read: it is in another call, and both would wait for
    // BRAID_TIMEOUT. (Its post, made before its data, would be visible by now.)
    if (comm.peerInAnotherCall(b.peer, seq) && !run.blockedReady())
      return failBoardCall(OtherCallOnTheStreams(b.peer, run.describe()), d, seq, std::nullopt);
    // A peer whose control listener refuses connections has left the communicator (destroyed it
    // before this call, or exited): its post never comes. Looked at once a second of waiting.
    if (const int64_t now = NowMicros();
        now - waited_since_us >= kLeftCheckUs && now >= board_left_check_us_) {
      board_left_check_us_ = now + kLeftCheckUs;
      if (Probe(comm.controlPeers(), b.peer, Deadline::After(kLivenessProbeMs)) ==
          ProbeResult::kRefused) {
        return failBoardCall(
            RemoteError("rank " + std::to_string(b.peer) +
                        "'s control listener refuses connections: " + run.describe()),
            d, seq, comm.peerCause(b.peer, FailureCause::Reason::kLeft));
      }
      // A peer held in a send or receive that waits on this rank, before this call: a deadlock
      // (a board call is a blocking call on an idle engine, so nothing else of this rank's moves).
      // Found at two checks in a row, as Engine::failIfP2pDeadlock requires.
      if (b.counter == Counter::kPosted && d.kind != CollKind::kSendRecv) {
        auto dl = p2pDeadlock(b.peer, seq, DescribeCall(d));
        deadlock_hits = dl ? deadlock_hits + 1 : 0;
        if (deadlock_hits >= 2) return failBoardCall(dl->error, d, seq, dl->cause);
      }
    }
    if (!(*deadline)->expired()) continue;
    const bool posting = b.counter == Counter::kPosted;
    const int64_t timeout_s = comm.config().timeout_ms / 1000;
    const Status st = TimeoutError(
        "rank " + std::to_string(b.peer) + " did not " +
        (posting ? "make this call" : "read this rank's earlier calls") + " within " +
        std::to_string(timeout_s) +
        " s (BRAID_TIMEOUT): it is stopped, hung, or it called a different collective or count "
        "(every rank must make the same calls in the same order)");
    // Another rank named the cause already (its notice arrived while this one waited).
    if (comm.causes().hasStrong()) return failBoardCall(st, d, seq, std::nullopt);
    // Every rank waits for every post, so every survivor sees the missing rank itself: whether it
    // answers a liveness probe tells a stopped process from one that runs but is elsewhere.
    FailureCause c = comm.peerCause(
        b.peer, ProbeAlive(comm.controlPeers(), b.peer, Deadline::After(kLivenessProbeMs))
                    ? FailureCause::Reason::kNoProgress
                    : FailureCause::Reason::kStalled);
    c.seconds = static_cast<uint32_t>(timeout_s);
    // A peer that has not read an earlier call but runs may itself wait for a third rank's post
    // (it posted ahead in a group): that rank, not this peer, is the cause, and the ranks
    // waiting for its post name it.
    if (!posting && c.reason == FailureCause::Reason::kNoProgress)
      return failBoardCall(st, d, seq, std::nullopt);
    // Alive, and its post for this call is not there: it has not made the call.
    if (posting && c.reason == FailureCause::Reason::kNoProgress)
      c.reason = FailureCause::Reason::kNotCalling;
    return failBoardCall(st, d, seq, c);
  }
}

}  // namespace braid
