#include "core/runtime/engine.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <string>

#include "core/runtime/comm.h"
#include "core/net/failure_notice.h"
#include "core/runtime/hang_report.h"
#include "core/base/log.h"
#include "transport/local_board.h"

namespace braid {

namespace {

// After a stalled operation's peer answers a liveness probe, how long this rank waits for the
// notice of the rank that finds the stopped one (it times out at about the same moment, then
// probes for up to kLivenessProbeMs) before it blames the peer itself.
constexpr int64_t kStallGraceMs = 600;

// How long and how many bytes a progress loop that keeps moving data runs before it yields, when
// threads outnumber CPUs (see driveUntilIdle). Bulk streaming only: a loop of small operations
// waits on its peers anyway, and yielding there cost 4 ranks on TCP a third of their small
// all-reduce speed.
constexpr int64_t kBusyYieldUs = 200;
// How long a board stage waiting for a peer to consume sleeps between looks (the peer does not
// ring for that: see sleepUntilProgress).
constexpr int64_t kBoardPollUs = 50;
constexpr int64_t kBusyYieldBytes = 1 << 20;

Status OutOfMemory(const std::string& context) {
  // Engine memory (scratch, the pre-multiplied input) grows with the message; an exception must
  // not leave the progress thread (std::terminate) or cross the C API.
  return SystemError(context +
                     "out of memory for the engine's buffers (about the message size in scratch): "
                     "free memory or raise the limit (ulimit -v), or split the call");
}

}  // namespace

Engine::Engine(braidComm* comm)
    : comm_(comm), window_(static_cast<size_t>(std::max<int64_t>(1, comm->config().max_inflight))) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  (void)InstallDumpSignal(comm->config().dump_signal);  // validated with the configuration
  gate_.reset(comm->nranks(), comm->nlanes());
  parked_.reserve(kMaxParked);
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

template <typename Take>
Engine::Claim Engine::claimOrQueue(Take&& take) {
  std::lock_guard<std::mutex> lock(mu_);
  // Whoever gets there first drives: when nobody drives the loop, the caller makes a pass itself
  // (a board call posts; one that completes needs no thread at all) and leaves the thread asleep
  // while what is left needs nothing from it (ActiveOp::quiet). Not with BRAID_INLINE=0, whose
  // callers never drive. active_ is read only when nobody drives (the flags come first).
  const bool drive =
      comm_->config().inline_blocking && !driving_ && !inline_busy_ && !handoff_ && !stop_;
  // Nothing queued ahead of it and room in the window: the caller activates it without the
  // queue. The queue's round trip, a second lock in admit(), was about 400 instructions of a small
  // non-blocking call.
  if (drive && queue_.empty() && active_.size() < window_) {
    inline_busy_.store(true, std::memory_order_relaxed);
    // (Parked calls are not active: a call behind them may park too, startCall.)
    return active_.empty() && parked_.empty() ? Claim::kIdle : Claim::kDirect;
  }
  std::shared_ptr<Operation> op = take();  // (may throw std::bad_alloc: nothing is claimed yet)
  submitted_.fetch_add(1, std::memory_order_relaxed);
  queue_.push_back(std::move(op));
  queued_.fetch_add(1);
  if (!drive) return Claim::kQueued;
  inline_busy_.store(true, std::memory_order_relaxed);
  return Claim::kQueuedDriving;
}

void Engine::wakeForQueued() {
  cv_.notify_one();
  // Pairs with the driver's sleeping_ store and queued_ load (both seq_cst): either the driver
  // sees the new operation before it polls, or we see it sleeping and wake it.
  uint64_t one = 1;
  if (sleeping_.load() && wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

void Engine::submit(std::shared_ptr<Operation> op) {
  const Claim claim = claimOrQueue([&] { return std::move(op); });
  if (claim == Claim::kQueued) {
    wakeForQueued();
    return;
  }
  driveOnCaller([&] {
    adoptParked();
    // (A board call that completes at once is counted as one: eagerBoardCall.)
    if (claim != Claim::kQueuedDriving && !(claim == Claim::kIdle && eagerBoardCall(op)))
      activateSubmitted(std::move(op));
    passOnCaller();
  });
}

CallStart Engine::startCall(braidComm* owner, OpDesc& d, Status* result, MakeOperation make,
                            void* ctx) {
  // One claim decision for the call, as submit's: an engine that is busy gets the call's
  // operation queued under the same lock (made there: nothing runs before it anyway), so a call
  // issued while others are in flight takes the lock once, not once to try and once to submit.
  const auto made = [&] {
    std::shared_ptr<Operation> op = make(std::move(d), ctx);
    op->setOwner(owner);
    owner->opIssued();
    return op;
  };
  const Claim claim = claimOrQueue(made);
  if (claim == Claim::kQueued) {
    wakeForQueued();
    return CallStart::kTaken;
  }
  CallStart started = CallStart::kTaken;
  bool no_memory = false;
  driveOnCaller([&] {
    // Behind calls that are only parked (nothing active), a call may park too; behind anything
    // else it goes after what is ahead of it, as an operation.
    const bool behind_parked = claim == Claim::kDirect && active_.empty();
    if (!behind_parked) {
      adoptParked();
    } else {
      // Those of them whose peers have posted complete first (in order), with no wait.
      try {
        finishReadyParked();
      } catch (const std::bad_alloc&) {
        no_memory = true;  // the call fails, as queued (nothing of it started)
        throw;
      }
    }
    // As submit's: a few passes while it moves (a call of several posts may get past its last
    // one, and then needs nothing of the thread; a queued one is admitted).
    if (claim == Claim::kQueuedDriving) return passOnCaller();
    // Only on an engine with nothing active may the call start before its operation exists: a
    // call behind others starts after them.
    const EagerRun run = claim == Claim::kIdle || behind_parked ? eagerBoardRun(owner, d, result)
                                                                : EagerRun::kNotTaken;
    if (run == EagerRun::kFinished) {
      started = CallStart::kCompleted;
      return;
    }
    if (run == EagerRun::kNotTaken) adoptParked();  // it goes behind them, as an operation
    // It goes on in an operation (and its request), built from `d` only now.
    std::shared_ptr<Operation> op;
    try {
      op = made();  // (an allocation that fails leaves `d` as it was)
    } catch (const std::bad_alloc&) {
      if (run == EagerRun::kNotTaken) {  // nothing started: the call fails (below), as queued
        no_memory = true;
        return;
      }
      // No memory for the operation, and the call has started: it ends here, on this thread, as
      // a blocking call would (completing before the function returns is the call's right).
      *result = finishBoardCall(*eager_call_, d);
      started = CallStart::kCompleted;
      return;
    }
    if (run == EagerRun::kWaiting) {
      // It only reads from here: it stays a board call, for its wait to finish as a blocking
      // call's (finishParked), or for the next taker of the loop to adopt. No pass: it was just
      // found waiting, and nothing else is active.
      parkEagerRun(std::move(op));
      if (eager_call_->run.pastLastPost()) return;
      // Waiting on the board with a post still to make: it needs a driver, and goes on as an
      // operation (after those parked before it).
      adoptParked();
    } else {
      // Too large, no board, a split view's call, the shape's first call: the caller holds the
      // loop with room in the window, so it is activated as submit's direct path would.
      activateSubmitted(std::move(op));
    }
    passOnCaller();
  });
  // Thrown only once the loop is given back (inside, driveOnCaller would fail every operation).
  if (no_memory) throw std::bad_alloc();
  return started;
}

void Engine::activateSubmitted(std::shared_ptr<Operation> op) {
  submitted_.fetch_add(1, std::memory_order_relaxed);
  Operation* raw = op.get();  // before the move: argument order is unspecified
  activate(raw, std::move(op));
}

void Engine::passOnCaller() {
  // A few passes while they move: a board call's post, and what completes meanwhile.
  int64_t bytes = 0;
  for (int pass = 0; pass < 4; ++pass) {
    if (queued_.load() > 0 && active_.size() < window_) admit();
    if (active_.empty() || !sweep(&bytes)) break;
  }
}

bool Engine::poll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (driving_ || inline_busy_ || handoff_ || stop_ ||
        (queue_.empty() && active_.empty() && parked_.empty()))
      return false;
    inline_busy_.store(true, std::memory_order_relaxed);
  }
  driveOnCaller([&] {
    adoptParked();
    passOnCaller();
  });
  return true;
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

void Engine::wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  cv_.notify_all();
}

bool Engine::beginInline() {
  std::lock_guard<std::mutex> lock(mu_);
  // Not while a caller waits for the loop (handoff_) or operations a driving caller left active
  // wait for the thread: the flags come first, so active_ is read only while nobody drives.
  if (inline_busy_ || driving_ || handoff_ || stop_ || !queue_.empty() || !active_.empty() ||
      !parked_.empty())
    return false;
  inline_busy_.store(true, std::memory_order_relaxed);
  return true;
}

bool Engine::quiet() const {
  for (const auto& a : active_)
    if (!a->quiet()) return false;
  return true;
}

void Engine::endInline() {
  bool thread_has_work;
  bool waiters;
  // Operations left that need nothing from this rank but its own reads (ActiveOp::quiet) wait for
  // the caller's next call into the library (a wait, a test, another call, or the destroy)
  // instead of waking the thread. (Read while this caller still drives.)
  if (active_.empty() || quiet()) {
    // Nothing left that needs the thread (a board call, a blocking call that completed, a
    // non-blocking one waiting for a peer's post): the claim goes back with one store, and the
    // lock is taken only when someone may need waking. A submit() from another thread meanwhile
    // counts queued_ before it reads inline_busy_, a debugState() counts cv_waiters_
    // before it does, and this caller clears inline_busy_ before it reads them (all seq_cst):
    // either they see it clear (and claim the loop, or stop waiting), or this caller sees them and
    // wakes them below. The lock round trip this saves was two locked instructions and ~50 others
    // per small call (a non-blocking one takes the loop twice: its submit and its wait).
    inline_busy_.store(false, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) == 0 &&
        cv_waiters_.load(std::memory_order_seq_cst) == 0)
      return;
    // Another caller may hold the loop by now: nothing here reads the driver's state.
    std::lock_guard<std::mutex> lock(mu_);
    waiters = cv_waiters_.load(std::memory_order_relaxed) > 0;
    thread_has_work = stop_ || !queue_.empty();
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    inline_busy_.store(false, std::memory_order_relaxed);
    // (Notified only when someone waits: two broadcasts per blocking call were a tenth of a
    // small call's instructions.)
    waiters = cv_waiters_.load(std::memory_order_relaxed) > 0;
    // Operations left active that need the thread. Only then: waking an idle thread after every
    // blocking call cost a futex round trip per call and, on oversubscribed cores, the peer's CPU
    // (docs/performance.md, "Small calls over TCP").
    thread_has_work = true;
  }
  if (waiters) report_cv_.notify_all();
  if (thread_has_work) cv_.notify_one();
}

template <typename Drive>
void Engine::driveOnCaller(Drive&& drive) {
  // The caller's thread: an allocation failure (an operation's state, the window) must not cross
  // the C API nor leave the loop claimed. It fails every operation instead, as on the thread.
  try {
    drive();
  } catch (const std::bad_alloc&) {
    abortOutOfMemory();
  }
  endInline();
}

void Engine::abortOutOfMemory() {
  abort(OutOfMemory(comm_->where() + ": "));
  try {
    driveUntilIdle(false);  // retires what is active with the abort's error; allocates nothing
  } catch (const std::bad_alloc&) {
  }
}

bool Engine::tryRunInline(Operation& op) {
  if (!beginInline()) return false;
  submitted_.fetch_add(1, std::memory_order_relaxed);
  driveOnCaller([&] {
    activate(&op, nullptr);
    driveUntilIdle(false);
  });
  return true;
}

bool Engine::runBoardCalls(std::span<const OpDesc* const> calls, Status* results) {
  if (!comm_->board() || calls.empty()) return false;
  if (!beginInline()) return false;
  bool ran = false;
  driveOnCaller([&] { ran = driveBoardCalls(calls, results); });
  return ran;
}

bool Engine::tryRunInline(const std::vector<std::shared_ptr<Operation>>& ops) {
  if (ops.size() > window_ || !beginInline()) return false;
  submitted_.fetch_add(ops.size(), std::memory_order_relaxed);
  driveOnCaller([&] {
    for (const auto& op : ops) activate(op.get(), op);
    driveUntilIdle(false);
  });
  return true;
}

bool Engine::driveUntilDone(const Operation& op, Deadline deadline) {
  // A wait that is already over (braidWait(req, 0) polling) leaves the loop where it is.
  if (deadline.expired()) return false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (inline_busy_ || handoff_ || stop_) return false;  // another caller has or wants the loop
    if (driving_) {
      handoff_ = true;
      handoff_wanted_.store(true, std::memory_order_release);
      lock.unlock();
      uint64_t one = 1;
      if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));  // it may sleep in poll()
      lock.lock();
      // Nobody else takes the loop meanwhile: beginInline and driveUntilDone refuse while
      // handoff_ is set, and threadMain waits for it to clear.
      const bool handed = handoff_cv_.wait_until(lock, deadline.at(), [&] { return !driving_; });
      handoff_ = false;
      handoff_wanted_.store(false, std::memory_order_relaxed);
      if (!handed) {
        // The thread still drives (a long pass, a liveness probe): leave it the loop.
        lock.unlock();
        cv_.notify_one();
        return false;
      }
    }
    inline_busy_.store(true, std::memory_order_relaxed);
  }
  // The parked call itself, waited for with no time limit on an engine not aborted: it ends here
  // as a blocking call would. Otherwise it is adopted first (a wait with a deadline must be able
  // to return with the call still running).
  const bool finish_parked =
      deadline.never() && !aborted_.load(std::memory_order_acquire) && isParked(op);
  driveOnCaller([&] {
    if (finish_parked) return finishParked(op);
    adoptParked();
    driveUntilIdle(true, &op, deadline);  // then the thread takes the rest
  });
  return true;
}

void Engine::threadMain() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wait while idle, and while a caller drives. active_ is read only while nobody drives
      // (inline_busy_, handoff_ and driving_ all false): a caller may leave operations active.
      // A parked call is work for the thread too, but nothing wakes it for one but an abort, a
      // wake (the destroy's drain) or the stop: its caller's wait finishes it.
      cv_.wait(lock, [&] {
        return !inline_busy_ && !handoff_ &&
               (stop_ || !queue_.empty() || !active_.empty() || !parked_.empty());
      });
      if (queue_.empty() && active_.empty() && parked_.empty()) break;  // stop_ and nothing left
      driving_ = true;
    }
    adoptParked();
    driveUntilIdle(true);
  }
}

void Engine::admit() {
  std::vector<std::shared_ptr<Operation>>& batch = admit_batch_;
  batch.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!queue_.empty() && active_.size() + batch.size() < window_) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      queued_.fetch_sub(1);
    }
  }
  for (auto& op : batch) {
    Operation* raw = op.get();  // before the move: argument order is unspecified
    activate(raw, std::move(op));
  }
  batch.clear();
}

void Engine::finish(Operation* op, const Status& st) {
  braidComm* owner = op->owner() ? op->owner() : comm_;
  // Only the driver completes operations: a load and a store, not a locked increment.
  completed_.store(completed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  op->complete(st);
  owner->opDone();  // the last touch of the owner: a view may go away after it
}

void Engine::activate(Operation* op, std::shared_ptr<Operation> keep) {
  if (aborted_.load(std::memory_order_acquire)) {
    Status reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reason = abort_reason_;
    }
    return finish(op, reason);
  }
  // The communicator the call was made on: this engine's, or a split view of it.
  braidComm* owner = op->owner() ? op->owner() : comm_;
  if (owner != comm_ && owner->viewAborted()) return finish(op, owner->viewAbortReason());
  for (braidComm* c : {comm_, owner}) {
    if (c->asyncErrorCode() != braidSuccess) {
      Status st = c->asyncError();
      return finish(op, st.prepend("not run because the communicator failed earlier: "));
    }
  }
  // A retired operation's state, when there is one: its vectors keep their capacity (scratch
  // included), so a small call allocates nothing here. The most recently retired first: when it
  // ran this call's plan, rearm() takes it as it is (a repeated small non-blocking call).
  braidComm::CallNumbers& numbers = owner->callNumbers();
  std::unique_ptr<ActiveOp> a;
  bool armed = false;
  if (!spare_.empty()) {
    a = std::move(spare_.back());
    spare_.pop_back();
    armed = a->rearm(owner, op, keep, next_id_, numbers.coll);
    if (!armed) a->reset(owner, op, std::move(keep), next_id_);
    ++next_id_;
  } else {
    a = std::make_unique<ActiveOp>(owner, op, std::move(keep), next_id_++);
  }
  Status st;
  try {
    if (!armed) st = a->prepare(numbers.coll, numbers.p2p_send, numbers.p2p_recv);
  } catch (const std::bad_alloc&) {
    st = OutOfMemory(owner->where() + ": " + DescribeCall(op->desc()) + ": ");
  }
  // Every rank numbers the same collectives alike, whatever happened to this one.
  if (op->desc().kind != CollKind::kSendRecv) {
    ++numbers.coll;
    if (owner == comm_) {
      colls_issued_.store(numbers.coll, std::memory_order_relaxed);
      if (LocalBoard* board = comm_->board()) board->announceStarted(numbers.coll);
    }
  }
  a->last_progress_us = -1;  // (stamped by the first failStalled that sees it)
  gate_.claim(a->id(), a->claims());
  active_.push_back(std::move(a));
  if (!st.ok()) failAll(active_.size() - 1, st);
}

void Engine::retire(size_t i, const Status& st) {
  std::unique_ptr<ActiveOp> a = std::move(active_[i]);
  if (p2p_wait_published_.load(std::memory_order_relaxed)) withdrawP2pWait(a->id());
  active_.erase(active_.begin() + static_cast<ptrdiff_t>(i));
  gate_.releaseAll(a->id(), a->claims());
  if (a->isCollective() && &a->owner() == comm_)
    last_coll_completed_.store(static_cast<int64_t>(a->seq()), std::memory_order_relaxed);
  if (const OneSidedRun* run = a->adoptedRun()) {
    // The board call it went on from (eagerBoardCall): its slot is free again.
    for (BoardCall& c : board_calls_)
      if (&c.run == run) c.live = c.adopted = false;
    a->dropAdoptedRun();
  }
  Operation* op = &a->operation();
  std::shared_ptr<Operation> keep = a->releaseKeep();
  // It holds the owner's address: dropped before the owner may go (finish), kept for reuse.
  a->recycle();
  if (spare_.size() < 2 * window_) spare_.push_back(std::move(a));
  a.reset();
  finish(op, st);
}

void Engine::failAll(size_t i, const Status& st, const std::optional<FailureCause>& local) {
  ActiveOp& failed = *active_[i];
  const std::string coll = CollKindName(failed.operation().desc().kind);
  const uint64_t seq = failed.isCollective() ? failed.seq() : FailureCause::kNoSeq;
  const Status final = comm_->failWithCause(st, failed.context(), coll, seq, local);
  for (const auto& a : active_) a->owner().setAsyncError(final);  // views: their sticky error
  std::vector<Status> outcome(active_.size());
  for (size_t j = 0; j < active_.size(); ++j) {
    outcome[j] = final;
    if (j != i)
      outcome[j].prepend(active_[j]->context() + "not completed, another operation failed: ");
  }
  while (!active_.empty()) {
    const size_t last = active_.size() - 1;
    retire(last, outcome[last]);
  }
}

bool Engine::sweep(int64_t* bytes) {
  if (aborted_.load(std::memory_order_acquire)) {
    Status reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reason = abort_reason_;
    }
    while (!active_.empty()) {
      Status st = reason;
      retire(active_.size() - 1, st.prepend(active_.back()->context()));
    }
    return true;
  }
  bool any = false;
  for (size_t i = 0; i < active_.size();) {
    ActiveOp& a = *active_[i];
    if (&a.owner() != comm_ && a.owner().viewAborted()) {
      if (!dropAbortedView(i)) {  // it failed everything (the endpoints are shut down)
        corked_.clear();
        return true;
      }
      any = true;
      continue;
    }
    bool moved = false;
    Status st;
    try {
      // Only with company: one operation alone gains nothing from waiting for the pass's end.
      st = a.advance(gate_, &moved, active_.size() > 1 ? &corked_ : nullptr);
    } catch (const std::bad_alloc&) {
      st = OutOfMemory(a.context());
    }
    if (moved) {
      a.last_progress_us = -1;
      // A published wait that moves is over (a group's receive from one peer arrived, say): it
      // is withdrawn at once, and published again should it stall again (failIfP2pDeadlock).
      if (p2p_wait_published_.load(std::memory_order_relaxed)) withdrawP2pWait(a.id());
      any = true;
      *bytes += a.bytesLastPass();
    }
    if (!st.ok()) {
      any = true;
      if (a.cleanFailure()) {
        // Found before any data moved (the call agreement): every rank reports it and the
        // communicator stays usable.
        BRAID_WARN("%s", st.message().c_str());
        retire(i, st);
        continue;
      }
      failAll(i, st);
      corked_.clear();  // failAll shut the endpoints down: nothing left to flush
      return true;
    }
    if (a.finished()) {
      retire(i, Status::Ok());
      any = true;
      continue;
    }
    ++i;
  }
  // A send error shows at the corked transfer's next pass (AdvanceCorked), where the operation
  // it belongs to fails with it.
  for (Endpoint* ep : corked_) (void)ep->flush();
  corked_.clear();
  return any;
}

bool Engine::dropAbortedView(size_t i) {
  ActiveOp& a = *active_[i];
  Status reason = a.owner().viewAbortReason();
  if (!a.touchedStreams()) {
    retire(i, reason.prepend(a.context()));
    return true;
  }
  failAll(i, AbortedError(a.context() + reason.message() +
                          "; it was aborted in the middle of a transfer on connections it shares "
                          "with the communicator it was split from, which fails with it"));
  return false;
}

bool Engine::failBoardDeaths() {
  for (size_t i = 0; i < active_.size(); ++i) {
    const OneSidedRun* run = active_[i]->boardBlocked();
    if (!run) continue;
    LocalBoard& board = *active_[i]->owner().board();
    // A peer that left (destroy, exit) did all its posts and reads before it said so: once it has
    // gone, what it made is visible, so the wait is looked at again before it counts as failed.
    const int peer = run->blocked().peer;
    if (peer >= 0 && board.dead(peer) && !run->blockedReady()) {
      failAll(i, board.deathError(peer).prepend(active_[i]->context()));
      return true;
    }
  }
  return false;
}

bool Engine::failBoardStragglers() {
  // Only while nothing of this rank's runs on the streams: every operation waits on the board.
  for (const auto& a : active_)
    if (!a->boardBlocked()) return false;
  for (size_t i = 0; i < active_.size(); ++i) {
    const OneSidedRun* run = active_[i]->boardBlocked();
    const int peer = run->blocked().peer;
    if (peer < 0 || !comm_->peerInAnotherCall(peer, active_[i]->seq())) continue;
    // The peer's data may be for any of this rank's calls, not only the one waiting on it: a
    // peer sends a call's data only after every post of its agreement, so a call it is in is
    // ready here once its data is seen (read first, above). Any ready call is no straggler:
    // it moves at the next pass (4 calls in flight, the oldest ready, a later one waiting on
    // the peer that sent the oldest's data: that is not a mismatch).
    for (const auto& a : active_)
      if (a->boardBlocked()->blockedReady()) return false;
    failAll(i, OtherCallOnTheStreams(peer, run->describe()).prepend(active_[i]->context()));
    return true;
  }
  return false;
}

void Engine::failStalled(int64_t now_us) {
  const int64_t timeout_us = comm_->config().timeout_ms * 1000;
  // An operation waiting behind an older one that still moves is not stalled.
  int64_t older = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    ActiveOp& a = *active_[i];
    if (a.last_progress_us < 0) a.last_progress_us = now_us;  // it moved since the last look
    const int64_t since = std::max(a.last_progress_us, older);
    if (now_us - since > timeout_us) {
      handleStall(i, since);
      return;
    }
    if (now_us - since > kLeftCheckUs && now_us >= next_left_check_us_) {
      next_left_check_us_ = now_us + kLeftCheckUs;
      if (failIfPeerLeft(i) || failIfP2pDeadlock(i)) return;
    }
    older = std::max(older, a.last_progress_us);
  }
}

bool Engine::failIfPeerLeft(size_t i) {
  ActiveOp& a = *active_[i];
  for (int peer : stalledPeers(a)) {
    const CauseAnswer answer =
        AskCause(comm_->controlPeers(), peer, Deadline::After(kLivenessProbeMs));
    if (answer.cause) {
      // The peer failed, and knows why; no notice of it reached this rank (the failed rank could
      // not send them all, or learned the cause from another rank's): the same cause, now.
      failAll(i,
              RemoteError(a.context() + "waiting " + a.pendingDescription(gate_) +
                          ": that rank failed: " + answer.cause->describe()),
              answer.cause);
      return true;
    }
    if (answer.result != ProbeResult::kRefused) continue;
    failAll(i,
            RemoteError(a.context() + "waiting " + a.pendingDescription(gate_) +
                        ": its control listener refuses connections"),
            comm_->peerCause(peer, FailureCause::Reason::kLeft));
    return true;
  }
  return false;
}

bool Engine::failIfP2pDeadlock(size_t i) {
  ActiveOp& a = *active_[i];
  if (!a.operation().callerBlocked()) return false;
  if (!a.isCollective()) {
    publishP2pWait(a);
    return false;
  }
  // A view numbers its collectives apart from the communicator's count (collsIssued); a send
  // or receive in this engine may be what the peer waits for.
  if (&a.owner() != comm_ || holdsP2p()) {
    deadlock_suspect_ = {0, -1};
    return false;
  }
  for (int peer : stalledPeers(a)) {
    auto d = p2pDeadlock(peer, a.seq(), DescribeCall(a.operation().desc()));
    if (!d) continue;
    // Only when the same peer answered so at the previous check too (0.5 s earlier, this
    // operation stalled all along): a wait the peer published just before it moved on is
    // withdrawn by then, and every stall check sees its own fresh record.
    if (deadlock_suspect_ == std::pair<uint64_t, int>{a.id(), peer}) {
      failAll(i, d->error.prepend(a.context()), d->cause);
      return true;
    }
    deadlock_suspect_ = {a.id(), peer};
    return false;
  }
  deadlock_suspect_ = {0, -1};
  return false;
}

void Engine::publishP2pWait(const ActiveOp& a) {
  std::vector<int> peers = stalledPeers(a);
  std::lock_guard<std::mutex> lock(p2p_wait_mu_);
  p2p_wait_op_ = a.id();
  p2p_wait_peers_ = std::move(peers);
  p2p_wait_published_.store(true, std::memory_order_release);
}

void Engine::withdrawP2pWait(uint64_t op_id) {
  std::lock_guard<std::mutex> lock(p2p_wait_mu_);
  if (p2p_wait_op_ != op_id) return;
  p2p_wait_published_.store(false, std::memory_order_relaxed);
  p2p_wait_peers_.clear();
}

bool Engine::p2pBlockedOn(int rank) const {
  if (!p2p_wait_published_.load(std::memory_order_acquire)) return false;
  // A queued call may be the very collective the asker waits in (issued, not yet numbered: the
  // window is full, or a group put it behind the send or receive): it moves once the window does.
  if (queued_.load() > 0) return false;
  std::lock_guard<std::mutex> lock(p2p_wait_mu_);
  return p2p_wait_published_.load(std::memory_order_relaxed) &&
         std::find(p2p_wait_peers_.begin(), p2p_wait_peers_.end(), rank) != p2p_wait_peers_.end();
}

bool Engine::holdsP2p() {
  for (const auto& a : active_)
    if (!a->isCollective()) return true;
  // (Parked calls are board collectives: eagerBoardRun parks no send or receive.)
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& op : queue_)
    if (op->desc().kind == CollKind::kSendRecv) return true;
  return false;
}

std::optional<Engine::P2pDeadlock> Engine::p2pDeadlock(int peer, uint64_t seq,
                                                       const std::string& call) {
  // The peer's record is published at its own stall check: a peer that has not looked yet
  // answers "not blocked", and this rank asks again at its next check.
  const auto w = AskWaitState(comm_->controlPeers(), peer, Deadline::After(kLivenessProbeMs));
  if (!w || !w->p2p_blocked_on_asker || w->issued > seq) return std::nullopt;
  const std::string last = w->issued == 0
                               ? "it issued no collective yet"
                               : "its last collective was #" + std::to_string(w->issued - 1);
  P2pDeadlock d;
  d.cause = comm_->peerCause(peer, FailureCause::Reason::kP2pDeadlock);
  // Not a "call mismatch": that name promises a communicator still usable, and data may have
  // moved on the streams here (the communicator fails).
  d.error = InvalidUsage(
      "deadlock: rank " + std::to_string(peer) +
      " is blocked in a send or receive that waits on this rank, and has not issued " + call +
      " #" + std::to_string(seq) + " (" + last +
      "); this rank sends or receives nothing before this call ends, so neither can go on. A "
      "send must meet its receive between the same collectives on every rank");
  return d;
}

std::vector<int> Engine::stalledPeers(const ActiveOp& a) {
  // In this engine's (the root's) numbering, like the control plane and the causes.
  std::vector<int> peers = a.waitingOn(gate_);
  for (int& p : peers) p = a.owner().rootRank(p);
  waits_.clear();
  a.collectWaits(gate_, waits_);
  for (const auto& w : waits_)
    for (int p = 0; p < comm_->nranks(); ++p)
      for (int lane = 0; p != comm_->rank() && lane < comm_->nlanes(); ++lane)
        if (comm_->endpoint(p, lane) == w.ep &&
            std::find(peers.begin(), peers.end(), p) == peers.end())
          peers.push_back(p);
  return peers;
}

void Engine::handleStall(size_t i, int64_t since_us) {
  ActiveOp& a = *active_[i];
  const int64_t timeout_s = comm_->config().timeout_ms / 1000;
  const Status st = TimeoutError(a.context() + "no progress for " + std::to_string(timeout_s) +
                                 " s (BRAID_TIMEOUT) " + a.pendingDescription(gate_) +
                                 "; that rank may be stopped, hung, or not calling this operation");
  // Another rank already named the cause (its notice arrived while this one waited).
  if (comm_->causes().hasStrong()) return failAll(i, st);
  const std::vector<int> peers = stalledPeers(a);
  auto cause_for = [&](int peer, FailureCause::Reason reason) {
    FailureCause c = comm_->peerCause(peer, reason);
    c.seconds = static_cast<uint32_t>(timeout_s);
    return c;
  };
  if (peers.empty())
    return failAll(i, st,
                   comm_->selfCause(FailureCause::Reason::kOwnFailure,
                                    "no progress for " + std::to_string(timeout_s) + " s"));
  if (stall_op_ != a.id() || stall_since_us_ != since_us) {
    // A new stall: is one of the peers stopped itself?
    stall_op_ = a.id();
    stall_since_us_ = since_us;
    for (int peer : peers)
      if (!ProbeAlive(comm_->controlPeers(), peer, Deadline::After(kLivenessProbeMs)))
        return failAll(i, st, cause_for(peer, FailureCause::Reason::kStalled));
    // They run. A rank that never issued this collective is the one every other waits on,
    // directly or through a chain of waiting ranks (the peer this rank waits on may be a live
    // rank waiting itself): ask every rank how many collectives it issued, and name the lowest
    // that has not reached this one. Every waiting rank finds the same rank.
    if (a.isCollective() && &a.owner() == comm_) {
      std::vector<int> all;
      for (int r = 0; r < comm_->nranks(); ++r)
        if (r != comm_->rank()) all.push_back(r);
      const auto issued =
          AskIssuedCalls(comm_->controlPeers(), all, Deadline::After(kLivenessProbeMs));
      for (size_t k = 0; k < all.size(); ++k)
        if (issued[k] && *issued[k] <= a.seq()) {
          FailureCause c = cause_for(all[k], FailureCause::Reason::kNotCalling);
          c.detail = *issued[k] == 0 ? "it issued no collective yet"
                                     : "its last collective was #" + std::to_string(*issued[k] - 1);
          return failAll(i, st, c);
        }
    }
    // They run, so they wait on someone too: the neighbour of the stopped rank names it soon.
    stall_grace_until_us_ = NowMicros() + kStallGraceMs * 1000;
    return;
  }
  if (NowMicros() < stall_grace_until_us_) return;
  // Nobody named a cause: the peer is alive but stuck, or not calling this operation.
  failAll(i, st, cause_for(peers.front(), FailureCause::Reason::kNoProgress));
}

void Engine::driveUntilIdle(bool admit_queued, const Operation* target, Deadline deadline) {
  const int64_t spin_us = comm_->config().spin_us;
  // On oversubscribed cores, a loop that keeps moving bulk data would keep its CPU for a whole
  // scheduler slice (milliseconds) while a woken caller of this or another rank waits for one
  // (e.g. to issue the small call it had queued behind a large one). Yielding after
  // kBusyYieldBytes and kBusyYieldUs of progress lets it in; sched_yield returns at once when
  // nobody waits.
  const bool yield_when_busy = comm_->threadsOutnumberCpus();  // (cached at init)
  // Polling without yielding pays where every rank has a core: the peer is usually microseconds
  // away. Where the ranks outnumber the cores it holds the core the peer needs in order to
  // answer: 64 polls before the first yield cost 4 ranks on 2 cores about half of a small
  // all-reduce over TCP (~100 us against ~50 yielding at once; 8 ranks ~430 against ~200).
  const int tight_polls = comm_->ranksOutnumberCpus() ? 1 : 64;
  // The clock is read only where a decision needs it: after the tight polls of a loop that moves
  // nothing (the spin budget, stall checks) and once a megabyte has moved (the busy yield); a
  // pass that moved a small call's data reads none, nor does a tight poll (a read is about 30 ns
  // on a VM, a third of such a pass).
  // last_progress < 0: the loop moved something since the clock was last read, so the spin
  // starts at the next read.
  int64_t last_progress = -1;
  int64_t last_yield = yield_when_busy ? NowMicros() : 0;
  int64_t bytes_since_yield = 0;
  int idle_iterations = 0;
  for (;;) {
    if (report_requested_.load(std::memory_order_relaxed)) answerReport();
    if (target) {
      if (target->done()) return;
    } else if (admit_queued && handoff_wanted_.load(std::memory_order_acquire)) {
      // A blocked caller takes the loop over (driveUntilDone); active operations stay.
      {
        std::lock_guard<std::mutex> lock(mu_);
        driving_ = false;
      }
      handoff_cv_.notify_all();
      return;
    }
    if (admit_queued && queued_.load() > 0 && active_.size() < window_) admit();
    if (active_.empty()) {
      if (!admit_queued) return;
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) {
        if (target) return;  // (target is done: it was queued or active when the caller came)
        driving_ = false;
        report_cv_.notify_all();
        handoff_cv_.notify_all();  // a caller asking for the loop takes a free one
        return;
      }
      continue;
    }
    const bool progressed = sweep(&bytes_since_yield);
    // A driving caller's deadline ends its drive after a pass, never before one.
    if (target && (target->done() || deadline.expired())) return;
    if (progressed) {
      last_progress = -1;
      idle_iterations = 0;
      if (yield_when_busy && bytes_since_yield >= kBusyYieldBytes) {
        if (const int64_t now = NowMicros(); now - last_yield >= kBusyYieldUs) {
          sched_yield();
          last_yield = now;
          bytes_since_yield = 0;
        }
      }
      continue;
    }
    // Tight polls look for nothing but the peers' progress: no clock (stalls are seconds away).
    if (++idle_iterations < tight_polls) continue;
    const int64_t now = NowMicros();
    if (last_progress < 0) last_progress = now;
    failStalled(now);
    if (active_.empty() || failBoardDeaths()) continue;
    if (now - last_progress < spin_us) {
      sched_yield();  // let co-located ranks run (more ranks than cores is the normal case)
      continue;
    }
    if (failBoardStragglers()) continue;
    // Bounded, so that stall deadlines (and a driving caller's own deadline) are checked.
    sleepUntilProgress(target ? std::clamp<int64_t>(deadline.remainingMs(), 1, 100) : 100,
                       admit_queued);
  }
}

std::string Engine::reportHeader() {
  const int64_t last = last_coll_completed_.load(std::memory_order_relaxed);
  const uint64_t issued = colls_issued_.load(std::memory_order_relaxed);
  // Appended piece by piece (one long chain of + trips GCC 12's -Wrestrict false positive).
  std::string s = "braid state of " + comm_->where() + " (pid " + std::to_string(getpid()) + ")\n";
  s += "  operations: submitted " + std::to_string(submitted_.load() + board_started_.load()) +
       ", completed " + std::to_string(completed_.load() + board_done_.load()) + ", queued " +
       std::to_string(queued_.load()) + " (window " + std::to_string(window_) + ")\n";
  s += "  collectives: issued " + std::to_string(issued);
  if (issued) {
    s += " (last #";
    s += std::to_string(issued - 1);
    s += ")";
  }
  s += ", last completed ";
  if (last < 0) {
    s += "none";
  } else {
    s += "#";
    s += std::to_string(last);
  }
  return s + "\n";
}

std::string Engine::boardCallsReport() const {
  // Blocking calls a caller runs on the board (runBoardCalls), and a parked call.
  std::string s;
  for (const BoardCall& c : board_calls_) {
    if (!c.live || c.adopted) continue;
    s += "  " + DescribeCall(*c.desc) + " #" + std::to_string(c.seq) + " [oneshot] on the board\n";
    s += "    " + c.run.describe() + "\n";
    if (c.run.blocked().peer >= 0)
      s += "    waiting on rank " + std::to_string(c.run.blocked().peer) +
           " (not there yet, or stuck on an earlier operation)\n";
  }
  return s;
}

void Engine::answerReport() {
  std::string s = reportHeader();
  size_t board_calls = 0;
  for (const BoardCall& c : board_calls_) board_calls += c.live && !c.adopted;
  const size_t inflight = active_.size() + board_calls;
  s +=
      inflight == 0 ? "  nothing in flight\n" : "  in flight (" + std::to_string(inflight) + "):\n";
  for (const auto& a : active_) s += a->progressReport(gate_);
  s += boardCallsReport();
  {
    std::lock_guard<std::mutex> lock(mu_);
    report_ = std::move(s);
    ++report_gen_;
    report_requested_.store(false, std::memory_order_relaxed);
  }
  report_cv_.notify_all();
}

std::string Engine::debugState(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (driving_ || inline_busy_ || handoff_) {
    const uint64_t gen = report_gen_;
    report_requested_.store(true, std::memory_order_relaxed);
    lock.unlock();
    uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
    lock.lock();
    ++cv_waiters_;
    const bool answered = report_cv_.wait_until(lock, deadline.at(), [&] {
      return report_gen_ != gen || (!driving_ && !inline_busy_ && !handoff_);
    });
    --cv_waiters_;
    if (answered && report_gen_ != gen) return report_;
    if (!answered)
      return reportHeader() +
             "  an operation is in flight, but the progress loop did not answer in time (it is "
             "inside a transport call or a reduction)\n";
  }
  // Nobody drives, and a taker of the loop takes mu_ first: the board calls of parked calls are
  // read here as the driver would. They are alone (every taker of the loop adopts them first).
  if (!parked_.empty())
    return reportHeader() + "  in flight (" + std::to_string(parked_.size()) + "):\n" +
           boardCallsReport() +
           "    parked: its wait, a braidTest or the next call on this communicator drives it\n";
  if (!active_.empty())  // a caller gave the loop back to the thread
    return reportHeader() + "  " + std::to_string(active_.size()) +
           " operation(s) in flight, waiting for the progress thread to take the loop\n";
  return reportHeader() + "  nothing in flight\n";
}

void Engine::sleepUntilProgress(int64_t budget_ms, bool admitting) {
  waits_.clear();
  for (const auto& a : active_) a->collectWaits(gate_, waits_);
  fds_.clear();
  fds_.push_back({comm_->doorbell().fd(), POLLIN, 0});
  fds_.push_back({wake_fd_, POLLIN, 0});
  bool ready = false;
  // Board stages waiting for a peer's post: that peer rings this rank's doorbell at its next
  // publish (LocalBoard::armBell); a wait for a peer to consume (rare: a rank far ahead of a
  // slow one) polls, as does a rank the board cannot ring.
  board_bells_.clear();
  int64_t budget_us = budget_ms * 1000;
  for (const auto& a : active_) {
    const OneSidedRun* run = a->boardBlocked();
    if (!run) continue;
    const int peer = run->blocked().peer;
    if (peer < 0 || run->blockedReady()) {
      ready = true;
      continue;
    }
    if (run->blocked().counter == Counter::kPosted && comm_->board()->armBell(peer)) {
      board_bells_.push_back(peer);
      if (run->blockedReady()) ready = true;  // posted between the check and the arming
    } else {
      budget_us = std::min<int64_t>(budget_us, kBoardPollUs);
    }
  }
  size_t armed = 0;
  for (; armed < waits_.size(); ++armed) {
    if (waits_[armed].ep->arm(waits_[armed].send, waits_[armed].recv, fds_)) {
      ready = true;
      ++armed;
      break;
    }
  }
  sleeping_.store(true);
  const bool new_work = admitting && queued_.load() > 0 && active_.size() < window_;
  const bool handoff = handoff_wanted_.load();  // (only ever set while the thread drives)
  if (!ready && !new_work && !handoff && !aborted_.load()) {
    const timespec ts{static_cast<time_t>(budget_us / 1000000),
                      static_cast<long>(budget_us % 1000000) * 1000};
    int rc = ppoll(fds_.data(), fds_.size(), &ts, nullptr);
    (void)rc;  // EINTR or timeout: the caller re-checks everything anyway
  }
  sleeping_.store(false);
  for (int peer : board_bells_) comm_->board()->disarmBell(peer);
  for (size_t i = 0; i < armed; ++i) waits_[i].ep->disarm(fds_);
  comm_->doorbell().drain();
  uint64_t v;
  if (wake_fd_ >= 0) (void)!read(wake_fd_, &v, sizeof(v));
}

}  // namespace braid
