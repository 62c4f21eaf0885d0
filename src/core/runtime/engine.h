// The progress engine (DESIGN.md 2.2): one per communicator. It keeps a window of active
// operations (BRAID_MAX_INFLIGHT) and drives them all from one loop: operations submitted
// without waiting overlap, a small collective is not stuck behind a large one (express lane, see
// active_op.h), and the order of messages on shared streams comes from a StreamGate.
//
// Who drives: a progress thread per communicator; or the caller of a blocking operation (or of
// braidWait) on its own thread: at once when the engine is idle, else after the thread hands the
// loop over at the end of its pass (driveUntilDone). That saves the thread hand-offs and the
// wake-up per call, which dominate small-message latency when ranks outnumber cores, and keeps a
// small call issued behind a large one from waiting out scheduler slices. Only one drives at a
// time; operations left active when a caller returns go back to the thread.
// Waiting spins briefly, then yields, then sleeps in poll() on the transports' fds, the doorbell
// and an eventfd (abort, new work), so eight ranks on two cores do not starve each other and an
// idle communicator uses no CPU.
#pragma once

#include <sys/eventfd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "core/runtime/active_op.h"
#include "core/base/clock.h"
#include "core/base/failure_cause.h"
#include "core/runtime/operation.h"
#include "core/base/status.h"
#include "core/runtime/stream_gate.h"

struct braidComm;

namespace braid {

// The error of a call waiting on the board for `peer`, which sent stream data for a call this
// rank has not issued.
Status OtherCallOnTheStreams(int peer, const std::string& where);

class Engine {
 public:
  // `comm` is a non-owning back-pointer; the communicator owns the engine and outlives it. The
  // engine also runs the operations of comm's split views (braidComm::initView): each operation
  // names its communicator (Operation::owner), which gives its ranks, numbering and algorithms;
  // streams, the gate, the control plane and failure causes are comm's, in comm's numbering.
  explicit Engine(braidComm* comm);
  ~Engine();  // stops the thread; pending operations complete with an aborted error

  void submit(std::shared_ptr<Operation> op);
  // Collectives of the communicator itself (not its views) issued so far, from any thread (the
  // control listener answers it: failure_notice.h kIssuedCallsPurpose).
  uint64_t collsIssued() const { return colls_issued_.load(std::memory_order_relaxed); }
  // The number of the newest collective completed (-1: none), from any thread.
  int64_t lastCollCompleted() const { return last_coll_completed_.load(std::memory_order_relaxed); }
  // Runs `op` on the calling thread when nothing else is queued or running, and returns true
  // (the op is then complete).
  bool tryRunInline(Operation& op);
  // The same for a batch that all runs at once (a group's operations, at most the window): on an
  // idle engine the caller drives them all, in order, and returns true when all are complete.
  bool tryRunInline(const std::vector<std::shared_ptr<Operation>>& ops);
  // A caller blocked on `op` (already submitted) drives the progress loop itself until `op` is
  // done or `deadline` passes: the progress thread, if it drives, hands the loop over at the end
  // of its pass and sleeps until the caller gives it back. A blocked caller then needs no wake-up
  // when its operation completes, and on oversubscribed cores one thread per rank runs instead of
  // two (the woken caller otherwise waits out a scheduler slice behind busy progress threads:
  // milliseconds for a small call issued behind a large one). False when another caller drives
  // (wait on `op` instead). Returns with `op` done, or at `deadline`.
  bool driveUntilDone(const Operation& op, Deadline deadline);
  // Blocking calls on the host's board (board_selection.h), run on the calling thread when the
  // engine is idle: the engine's one-sided mode without an operation object, a progress thread
  // or a syscall while the peers keep up. `calls` run in order (kBoardBatch at once at most), a
  // call of one post posted before the earlier ones are read (a group: one wait for the peers, not
  // one per call); results[i] gets call i's result. False when the engine is busy, the communicator
  // has no board, or one of the calls does not run on it (the caller then takes the general
  // path for all of them).
  static constexpr size_t kBoardBatch = 16;
  bool runBoardCalls(std::span<const OpDesc* const> calls, Status* results);
  // A non-blocking call `d` of `owner` on an idle engine, started on the calling thread before
  // any operation exists (RunOperation): a small call on the host's board whose peers have posted
  // completes here with no allocation, reference count or request of its own (eagerBoardCall
  // without the operation); one that must wait is made an operation (`make`, with `ctx`) only
  // then, and adopted as eagerBoardCall adopts it; a call not on the board is made an operation
  // and activated as submit's direct path would (CallStart says which). On a busy engine it is
  // made an operation and activated or queued as submit would, under the same one claim. Throws
  // std::bad_alloc, with nothing issued, when the operation cannot be made before the call has
  // started.
  CallStart startCall(braidComm* owner, OpDesc& d, Status* result, MakeOperation make, void* ctx);
  // Runs `fn` on the calling thread with the loop claimed, when the engine is idle (nothing
  // queued or running, nobody driving): `fn` may use the endpoints. False when busy.
  template <typename Fn>
  bool withIdleLoop(Fn&& fn) {
    if (!beginInline()) return false;
    fn();
    endInline();
    return true;
  }
  // One pass of the loop on the calling thread when nobody drives it and it has work (braidTest):
  // operations a caller left quiet progress without waking the thread. True when it drove.
  bool poll();
  // Whether this rank's calling thread is held in a point-to-point call (HeldCaller) that has
  // waited on `rank` (root numbering) for a while, from any thread (the control listener answers
  // it: failure_notice.h kWaitStatePurpose). Published by the driver's stall check
  // (publishP2pWait), withdrawn when that call ends.
  bool p2pBlockedOn(int rank) const;
  // Makes the running and all queued operations fail with `reason` as soon as possible.
  void abort(const Status& reason);
  // Wakes the driver (a split view was aborted: braidComm::viewAborted).
  void wake();
  // Hang localisation (spec/reliability.md check 8), callable from any thread: operation
  // counters, the last issued and completed collective numbers, and for each operation in flight
  // its algorithm, stage, per-lane progress and the ranks it waits on. While a loop is driving,
  // it writes the report itself at its next pass (within ~100 ms); `deadline` bounds the wait.
  std::string debugState(Deadline deadline);

 private:
  void threadMain();
  // What a submission found, decided under one lock (claimOrQueue).
  enum class Claim {
    kIdle,           // the caller holds the loop; nothing is queued or active
    kDirect,         // the caller holds the loop; nothing queued, room in the window
    kQueuedDriving,  // the operation was queued behind others; the caller holds the loop
    kQueued,         // the operation was queued; the thread (or another caller) drives
  };
  // The caller claims the loop when nobody drives it; the operation `take()` returns is queued
  // (under the same lock) only when it cannot be activated at once.
  template <typename Take>
  Claim claimOrQueue(Take&& take);
  // Wakes the progress thread after a queued submission.
  void wakeForQueued();
  // Claims the driver for a caller (false when the engine is busy), and gives it back.
  bool beginInline();
  void endInline();
  // Runs `drive` on a caller that claimed the loop, then gives the loop back (endInline). A
  // template, not std::function: no allocation on the blocking-call path.
  template <typename Drive>
  void driveOnCaller(Drive&& drive);
  // What driveOnCaller does when `drive` runs out of memory.
  void abortOutOfMemory();
  // Drives the active operations until none is left (admitting queued ones when `admit`), or, for
  // a caller that drives for `target`, until `target` is done or `deadline`. The progress thread
  // (admit, no target) also returns when a caller asks for the loop (handoff_).
  void driveUntilIdle(bool admit, const Operation* target = nullptr,
                      Deadline deadline = Deadline::Never());
  // An operation that a caller holding the loop activates without the queue (submit's and
  // startCall's direct path), counted as submitted.
  void activateSubmitted(std::shared_ptr<Operation> op);
  // A few passes of the loop on a caller that claimed it (submit, poll).
  void passOnCaller();
  // Whether every active operation needs nothing more of the thread (ActiveOp::quiet): a caller
  // leaves them for its next call instead of waking it. Driver only.
  bool quiet() const;
  // Moves queued operations into the window.
  void admit();
  // Makes `op` active: checks, builds its schedules, claims its streams.
  void activate(Operation* op, std::shared_ptr<Operation> keep);
  // One pass over the active operations; true when anything moved. Adds the bytes the pass moved
  // to *bytes.
  bool sweep(int64_t* bytes);
  // active_[i] belongs to an aborted split view: dropped alone when it has not touched a stream,
  // else it fails the whole engine (the streams it shares are mid-message). True when removed.
  bool dropAbortedView(size_t i);
  // Completes active_[i] with `st` and removes it.
  void retire(size_t i, const Status& st);
  // Completes `op` with `st` and tells its communicator.
  void finish(Operation* op, const Status& st);
  // active_[i] failed with `st`, tearing streams: the communicator fails, and every active
  // operation with it. Every error names the root cause (failure_cause.h): the first this rank
  // learned of, else `local` (what the engine itself found), else a failure of this rank.
  void failAll(size_t i, const Status& st, const std::optional<FailureCause>& local = {});
  void failStalled(int64_t now_us);
  // active_[i] has made no progress for kLeftCheckUs: a rank it waits on whose control listener
  // refuses connections has left the communicator (destroyed it before this call reached it, or
  // exited) and never will; fails the operations naming it. True when it did.
  bool failIfPeerLeft(size_t i);
  // active_[i] has made no progress for kLeftCheckUs and its caller is held on it. A
  // point-to-point call publishes the ranks it waits on (p2pBlockedOn); a collective of the
  // communicator, in an engine that holds no point-to-point call, asks each rank it waits on
  // (p2pDeadlock) and fails the operations when one is in a deadlock with it. True when it did.
  bool failIfP2pDeadlock(size_t i);
  void publishP2pWait(const ActiveOp& a);
  void withdrawP2pWait(uint64_t op_id);
  // The operation and peer a deadlock check found at its last look (failIfP2pDeadlock fails
  // only on a second finding in a row). Driver only.
  std::pair<uint64_t, int> deadlock_suspect_{0, -1};
  // A send or receive anywhere in this engine: active or queued. Driver only.
  bool holdsP2p();
  // This rank's collective #seq (`call`) waits on `peer`, and this rank can issue nothing before
  // it ends (its caller is held on it, no send or receive of its is in the engine). When `peer`
  // has not issued #seq and its caller is held in a send or receive that waits on this rank,
  // neither can ever move: the error (a call mismatch, invalid usage, without context) and the
  // cause (kP2pDeadlock, which every rank names). nullopt otherwise, or when it does not answer.
  struct P2pDeadlock {
    Status error;
    FailureCause cause;
  };
  std::optional<P2pDeadlock> p2pDeadlock(int peer, uint64_t seq, const std::string& call);
  // An operation waiting on the board for a peer that died never completes: fails the
  // operations with the death (the board asks the kernel at most every few ms). Looked at when
  // the loop idles, not on every pass: a pass that finds a post costs no liveness check. True
  // when it failed them.
  bool failBoardDeaths();
  // An operation waiting on the board for a peer that sent stream data nothing of this rank's
  // will read (every operation waits on the board): the ranks are in different calls, and it
  // fails naming that (OtherCallOnTheStreams). True when it failed the engine's operations.
  bool failBoardStragglers();
  // active_[i] made no progress for BRAID_TIMEOUT. The rank it waits on may be the stopped one,
  // or be waiting itself on a stopped rank further on (then all of them time out at about the
  // same moment): a liveness probe tells which, so that only a neighbour of the stopped rank
  // names it, and the others wait a little for its notice instead of blaming each other.
  void handleStall(size_t i, int64_t since_us);
  // The ranks `a` waits on: pending receives first, then pending sends.
  std::vector<int> stalledPeers(const ActiveOp& a);
  // Sleeps in poll() until a transfer can move, a peer posts what a board stage waits for, new
  // work arrives (`admitting`) or `budget_ms`.
  void sleepUntilProgress(int64_t budget_ms, bool admitting);
  // runBoardCalls on the claimed loop; false when a call does not run on the board.
  bool driveBoardCalls(std::span<const OpDesc* const> calls, Status* results);
  struct Planned;
  struct BoardCall;
  // The plan of call `d` into `p` (the memo's, or a new one that the memo then holds); false when
  // it does not run on the board. `planned` are the batch's calls planned before it (those that
  // took the memo's plan keep it themselves when the memo changes).
  // (Inlined: the memo's hit is the common case, and out of line its call cost more than it.)
  [[gnu::always_inline]] inline bool planBoardCall(const OpDesc& d, Planned& p,
                                                   std::span<Planned> planned);
  bool planNewBoardCall(const OpDesc& d, Planned& p, std::span<Planned> planned);
  // Numbers call `d` and starts its run in `c` (its buffers: the user's, and scratch).
  [[gnu::always_inline]] inline void startBoardCall(BoardCall& c, const OpDesc& d,
                                                    const Planned& p);
  // One call outside a group (most blocking calls): the batch's loop without the batch.
  Status driveOneBoardCall(const OpDesc& d, const Planned& p);
  // A non-blocking call submitted to an idle engine, by the caller that claimed the loop: when it
  // runs on the board, the caller starts it as a blocking board call (startBoardCall) and
  // advances it once (eagerBoardRun). A call whose peers have posted completes there, without an
  // operation object of the engine (its activation, passes and retirement were about half of a
  // small non-blocking call's instructions); one that waits for a peer goes on as the operation
  // the last spare takes as it is (adoptEagerRun). True when it took `op`.
  bool eagerBoardCall(std::shared_ptr<Operation>& op);
  // eagerBoardCall's and startCall's start of call `d`: kNotTaken (nothing started), kFinished
  // (*result), or kWaiting for a peer, its run live in eager_call_. Only when a spare that no
  // parked call holds (eager_spare_) can take the call as it is (ActiveOp::canTake): once
  // started, nothing may refuse it.
  enum class EagerRun { kNotTaken, kFinished, kWaiting };
  EagerRun eagerBoardRun(const braidComm* owner, const OpDesc& d, Status* result);
  // The waiting run of board call `c` goes on as operation `op` (of the call it runs), in spare
  // `a` (ActiveOp::adoptBoardRun); the slot is kept until the operation retires.
  void adoptEagerRun(std::shared_ptr<Operation> op, BoardCall& c, std::unique_ptr<ActiveOp> a);
  // A non-blocking call started by startCall on an engine with nothing active, waiting for a
  // peer's post and past its last post of its own (it only reads from here), is "parked": it
  // stays the board call it is (eager_call_), with no activation, sweep or retirement, and holds
  // the spare that would take it (eager_spare_). Calls issued behind it park behind it (up to
  // kMaxParked, each in a board call of its own), so that small calls in flight behind each
  // other are board calls too. A braidWait with no time limit on a parked call finishes it and
  // the calls parked before it, in order, as blocking calls are (finishParked, with the loop
  // claimed); every other taker of the loop (a claim to run or queue an operation, braidTest's
  // poll, the thread woken by an abort, a wake or the stop, a wait with a deadline) adopts them
  // all first, in order (adoptParked: adoptEagerRun), and beginInline refuses while one is
  // parked. A call issued behind them first completes those whose posts are there
  // (finishReadyParked). In order, because peers post their calls in order: the data of a later
  // call being there means the earlier calls' is too, so finishing them first costs no wait. At
  // most kMaxParked (perf's ring of calls in flight; half the board calls, each holding a spare).
  // Measured in docs/performance.md ("Parked calls in a chain").
  static constexpr size_t kMaxParked = 8;
  void parkEagerRun(std::shared_ptr<Operation> op);
  void adoptParked();
  bool isParked(const Operation& op) const {
    for (const ParkedCall& p : parked_)
      if (p.op.get() == &op) return true;
    return false;
  }
  // Completes the first `count` parked calls, in order: each driven to its end (`wait`), or, with
  // no wait, those that end at one advance, up to the first that does not.
  void completeParked(size_t count, bool wait);
  // Finishes the parked calls up to `upto`, in order.
  void finishParked(const Operation& upto);
  // Completes the parked calls whose peers' posts are all there, oldest first, with no wait. A
  // call behind them runs it first (startCall): calls complete in the order they were called
  // (braid.h), so a call that finishes at once completes only if every call parked before it has
  // too; otherwise it parks behind them, finished (eagerBoardRun).
  void finishReadyParked() { completeParked(parked_.size(), false); }
  // Drives started board call `c` to its end on this thread (driveOneBoardCall's loop).
  Status finishBoardCall(BoardCall& c, const OpDesc& d);
  // One advance of started board call `c`, no wait: true when it ended (*result says how).
  bool tryFinishBoardCall(BoardCall& c, const OpDesc& d, Status* result);
  // The error of board call `d` that did not complete because the communicator had failed.
  Status failedEarlier(const OpDesc& d) const;
  // The error of board call `c` whose run failed with `st`: a mismatch (the call fails on every
  // rank, the communicator goes on), else failBoardCall's.
  Status runError(const BoardCall& c, const Status& st);
  // Call `c` is over (whatever its result): its slot is free, the counters move.
  void endBoardCall(BoardCall& c);
  // Waits until `run` (blocked) can go on: spins, then sleeps on the peer's flag, checking for
  // failures; `deadline` is set at the first sleep. An error has failed the communicator.
  Status awaitBoard(OneSidedRun& run, const OpDesc& d, uint64_t seq,
                    std::optional<Deadline>* deadline);
  // The error of a board call that failed with `st` (not a mismatch): names the cause, fails the
  // communicator and its operations.
  Status failBoardCall(const Status& st, const OpDesc& d, uint64_t seq,
                       const std::optional<FailureCause>& local);
  // The first lines of every report (counters; safe from any thread).
  std::string reportHeader();
  // The driver answers a pending debugState() request.
  void answerReport();
  // The report's lines for the live board calls not adopted by an operation.
  std::string boardCallsReport() const;

  braidComm* comm_;
  const size_t window_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::deque<std::shared_ptr<Operation>> queue_;
  // publishP2pWait's record: the point-to-point call whose held caller waits, and on whom.
  mutable std::mutex p2p_wait_mu_;
  uint64_t p2p_wait_op_ = 0;  // ActiveOp::id
  std::vector<int> p2p_wait_peers_;
  std::atomic<bool> p2p_wait_published_{false};  // retire's cheap test
  // The parked calls (parkEagerRun), oldest first. Read and written as active_ is: by whoever
  // holds the loop, and under mu_ only while nobody does. While one is parked nothing is active,
  // so spare_ does not change: a parked call's spare is named by its index.
  struct ParkedCall {
    std::shared_ptr<Operation> op;
    BoardCall* call;
    size_t spare;
  };
  std::vector<ParkedCall> parked_;
  // eagerBoardRun's choice for the call it started: its board call and spare.
  BoardCall* eager_call_ = nullptr;
  size_t eager_spare_ = 0;
  bool driving_ = false;  // the progress thread owns the driver state below
  // A caller runs an operation inline, or drives for its operation. Set under mu_; the caller
  // that holds it may clear it without the lock (endInline's fast path, seq_cst: it pairs with
  // submit()'s queued_ increment and debugState()'s cv_waiters_ increment, each made
  // before they read it).
  std::atomic<bool> inline_busy_{false};
  bool handoff_ = false;  // a caller waits for the progress thread to hand the loop over
  std::atomic<bool> handoff_wanted_{false};  // handoff_, read by the driver without the lock
  std::condition_variable handoff_cv_;
  bool stop_ = false;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> aborted_{false};
  Status abort_reason_;
  int wake_fd_ = -1;  // eventfd: abort(), submit() and debugState() wake a sleeping driver

  // Counters for debugState(). submitted_ is bumped by any submitting thread (a locked
  // read-modify-write); completed_ only by whoever drives (finish(): a load and a store).
  std::atomic<uint64_t> submitted_{0};
  std::atomic<uint64_t> completed_{0};
  // Blocking calls run on the board, counted apart by the caller that holds the inline claim
  // (only it writes them: a load and a store).
  std::atomic<uint64_t> board_started_{0};
  std::atomic<uint64_t> board_done_{0};
  std::atomic<uint64_t> colls_issued_{0};
  std::atomic<int64_t> last_coll_completed_{-1};
  std::atomic<bool> report_requested_{false};
  std::condition_variable report_cv_;
  // Callers in debugState() (changed under mu_): endInline wakes them.
  std::atomic<int> cv_waiters_{0};
  std::string report_;       // guarded by mu_
  uint64_t report_gen_ = 0;  // guarded by mu_; bumped per answered request

  // Driver state: touched only by whoever drives (the thread while driving_, a caller while
  // inline_busy_).
  std::vector<std::unique_ptr<ActiveOp>> active_;
  StreamGate gate_;
  // Endpoints that corked small messages during the current pass (Endpoint::cork): flushed at
  // its end, so that a pass's messages to one peer leave in one syscall.
  std::vector<Endpoint*> corked_;
  // Retired operations' state, for reuse (their scratch included).
  std::vector<std::unique_ptr<ActiveOp>> spare_;
  std::vector<std::shared_ptr<Operation>> admit_batch_;  // admit()'s, kept for its capacity
  uint64_t next_id_ = 0;
  std::vector<TransferWait> waits_;  // reused by sleepUntilProgress
  // The stall being looked at (handleStall): which operation, since when, and until when this
  // rank waits for another rank's notice after the peer answered a probe.
  uint64_t stall_op_ = ~uint64_t{0};
  int64_t stall_since_us_ = -1;
  int64_t stall_grace_until_us_ = 0;
  int64_t next_left_check_us_ = 0;   // failIfPeerLeft, at most once per kLeftCheckUs
  int64_t board_left_check_us_ = 0;  // the same for a board call's wait (awaitBoard)
  // How long an operation waits without progress before the ranks it waits on are probed for
  // having left (a live peer answers in a millisecond; a probe costs one connection).
  static constexpr int64_t kLeftCheckUs = 500'000;
  std::vector<pollfd> fds_;
  std::vector<int> board_bells_;  // peers asked to ring this rank's doorbell (sleepUntilProgress)
  // The board calls a caller runs (runBoardCalls): their plans, and the runs in flight (call i
  // in board_calls_[i % kBoardBatch]), reused from call to call; the report names those in
  // flight.
  struct Planned {
    // The memo's plan or `keep` (stable while the calls run: board_planned_ is not resized).
    const std::shared_ptr<const RankSchedule>* schedule = nullptr;
    std::shared_ptr<const RankSchedule> keep;  // when the memo does not hold it
    uint64_t scratch_bytes = 0;                // its scratch buffers, 64-byte aligned each
    // The call's signature on the board (its shape and board form): a function of its plan
    // shape (SamePlanShape), so the memo keeps it too.
    BoardSignature sig;
  };
  std::vector<Planned> board_planned_;
  struct BoardCall {
    OneSidedRun run;
    std::vector<std::byte*> slots;
    // The schedule `slots` were laid out for (its scratch at `slots_scratch`): a call of the same
    // plan only sets the user's buffers, at `send_slots` and `recv_slots`. Held, so that another
    // plan cannot take its address.
    std::shared_ptr<const RankSchedule> slots_of;
    const std::byte* slots_scratch = nullptr;
    std::vector<uint16_t> send_slots, recv_slots;
    std::vector<std::byte> scratch;  // the schedule's scratch buffers
    std::vector<std::byte> pulls;    // pieces read across processes (OneSidedRun::reduce)
    const OpDesc* desc = nullptr;
    uint64_t seq = 0;
    bool live = false;
    // Its run goes on in an operation (eagerBoardCall), which the report lists instead; the slot
    // is free once the operation retires. (A slot is used only while active_ is empty, so it
    // cannot be taken meanwhile: runBoardCalls and eagerBoardCall both need an idle engine.)
    bool adopted = false;
  };
  BoardCall board_calls_[kBoardBatch];
  // The last call shape planned here and its plan: a repeated call skips the plan cache.
  OpDesc board_memo_desc_;
  braidComm::CachedPlan board_memo_plan_;
  uint64_t board_memo_scratch_ = 0;
  BoardSignature board_memo_sig_;
};

}  // namespace braid
