// The communicator: who the ranks are, how each peer is reached, and the engine that runs this
// rank's operations. `struct braidComm` (the C handle) is this class.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/tuner.h"
#include "braid/braid.h"
#include "core/net/bootstrap.h"
#include "core/base/config.h"
#include "core/net/doorbell.h"
#include "core/base/failure_cause.h"
#include "core/net/failure_notice.h"
#include "core/net/handshake_listener.h"
#include "core/runtime/link_calibration.h"
#include "core/runtime/one_sided_run.h"
#include "core/runtime/operation.h"
#include "device/ipc_probe.h"
#include "core/net/socket.h"
#include "core/base/status.h"
#include "core/net/unique_id.h"
#include "transport/local_board.h"
#include "transport/transport.h"

namespace braid {

class Engine;

// A pre-multiplied sum operator created by braidRedOpCreatePreMulSum.
struct PreMulOp {
  DataType dtype;
  uint8_t scalar[8];
};

// Options a communicator is created with: the environment's Config plus braidConfig_t.
struct CommOptions {
  Config config;
  bool blocking = true;
  // A parent communicator's link model (split, shrink): the child takes it instead of measuring
  // again, so that creating communicators often stays cheap.
  std::optional<LinkModel> inherited_links;
  // The device context current on the thread that asked for the communicator (the device
  // runtime's, null without one): init may run on another thread (non-blocking init, a group).
  void* device_context = nullptr;
};

Result<CommOptions> MakeCommOptions(const braidConfig_t* config);

}  // namespace braid

struct braidComm {
 public:
  using Status = braid::Status;

  braidComm();
  ~braidComm();

  // Joins the communicator (collective). Called on a fresh object; on failure the object is
  // left in the failed state and must still be destroyed.
  Status init(const braid::UniqueIdData& id, int rank, int nranks, const braid::CommOptions& opts);

  // Split views (braidCommSplit, comm_split.cc). A view holds some of its root communicator's
  // ranks and runs on the root's connections: its operations go to the root's engine, carry the
  // view's id on the wire, and share the root's streams in issue order. Making one needs no
  // rendezvous, socket, shm segment or thread. The price (the same as NCCL's for communicators
  // that share resources): a rank that belongs to a root and its views must call them in the
  // same order as every other rank of those communicators, and a failure, abort or revoke of
  // one stops all of them. A view of a view is a view of the same root.
  //
  // Makes this fresh object a view of `parent` (a root or a view) holding the parent's ranks
  // `members`, in the view's rank order; this rank is members[rank]. `id` is non-zero and the
  // same on every member (nextSplitId).
  Status initView(std::shared_ptr<braidComm> parent, const std::vector<int>& members, int rank,
                  uint32_t id, const braid::CommOptions& opts);
  bool isView() const { return root_ != nullptr; }
  // The root's rank of this communicator's rank `r`.
  int rootRank(int r) const { return root_ ? root_rank_of_[r] : r; }
  int rootNranks() const { return root_ ? root_->nranks() : nranks_; }
  // 0 for a root; the view's id otherwise (WireHeader::comm).
  uint32_t commId() const { return comm_id_; }
  // The id of this communicator's next split view with `color`: every rank calls splits in the
  // same order, so every member computes the same id.
  uint32_t nextSplitId(int color);

  // How this communicator numbers its calls (the wire's sequence numbers), advanced by the engine
  // as it activates operations; a view numbers its own calls.
  struct CallNumbers {
    uint64_t coll = 0;               // collectives
    std::vector<uint64_t> p2p_send;  // point-to-point messages per peer
    std::vector<uint64_t> p2p_recv;
  };
  CallNumbers& callNumbers() { return numbers_; }
  // The engine calls it once an operation of this communicator has completed.
  void opDone();
  // An operation of this communicator was handed to the engine (submit, runInline, or made by
  // the engine itself: Engine::startCall); opDone pairs with it.
  void opIssued() { own_inflight_.fetch_add(1); }
  // A split view aborted or revoked: its operations fail (Engine::dropAbortedView), its root
  // and sibling views go on unless one was in the middle of a transfer.
  bool viewAborted() const { return view_aborted_.load(std::memory_order_acquire); }
  Status viewAbortReason() const;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const braid::Config& config() const { return opts_.config; }
  const std::string& hostname() const { return infos_[rank_].hostname; }
  const std::vector<braid::RankInfo>& rankInfos() const { return infos_; }

  // Init state for non-blocking communicators.
  enum class State { kInitializing, kReady, kFailed, kDestroyed };
  State state() const { return state_.load(std::memory_order_acquire); }
  void setState(State s) { state_.store(s, std::memory_order_release); }
  std::thread& initThread() { return init_thread_; }

  // Sticky error: once set, every later operation fails with it.
  void setAsyncError(const Status& st);
  braidResult_t asyncErrorCode() const { return async_code_.load(std::memory_order_acquire); }
  Status asyncError() const;

  // Last error message for braidGetLastError(comm).
  void setLastError(const std::string& msg);
  std::string lastError() const;

  // The host's board (transport/local_board.h) when every peer of this communicator is on it
  // (one host, shm to every peer); null for split views and communicators that span hosts. Its
  // windows carry the one-sided schedules (algorithms/board_schedules.h) and every call's
  // agreement; boardClock() numbers its posts (touched only by the engine's driver).
  braid::LocalBoard* board() const { return root_ ? nullptr : board_; }
  braid::BoardClock& boardClock() { return board_clock_; }
  // The per-rank payload from which the board runs a call by reference (board_schedules.h:
  // each rank reads its peers' buffers in place, transport/cross_memory.h); 0 when it never
  // does: no board, BRAID_SINGLE_COPY_BYTES=0, or a rank that may not read its peers' memory.
  // The same on every rank.
  uint64_t singleCopyBytes() const { return board() ? single_copy_bytes_ : 0; }
  // Whether every rank of this communicator could map the device memory of every rank of its
  // node in another process (CUDA IPC; device/ipc_probe.h), agreed at init: the NCCL shim then
  // runs device calls of a one-node communicator on the device (nccl/peer_buffers.h). The same on
  // every rank; a split view takes its root's.
  bool deviceIpc() const { return root_ ? root_->device_ipc_ : device_ipc_; }
  // The CPUs in the union of the ranks' affinity masks (core/base/cpus.h), the same number on
  // every rank.
  int hostCpus() const { return host_cpus_; }
  // Whether this host's ranks, with a caller and a progress thread each, outnumber those CPUs:
  // then a busy progress loop yields now and then (Engine::driveUntilIdle).
  bool threadsOutnumberCpus() const { return threads_outnumber_cpus_; }
  // Whether this host's ranks alone outnumber those CPUs: then a rank that waits yields at once
  // instead of polling (Engine::driveUntilIdle, as the board does).
  bool ranksOutnumberCpus() const { return ranks_outnumber_cpus_; }
  // One pass of the engine's loop on this thread if nobody drives it (braidTest).
  void poll();
  // Submits an operation; the engine runs operations in submission order.
  void submit(std::shared_ptr<braid::Operation> op);
  // Issues non-blocking call `d`, started on this thread when the engine is idle and submitted
  // under the same claim otherwise (Engine::startCall).
  braid::CallStart startCall(braid::OpDesc& d, braid::Status* result, braid::MakeOperation make,
                             void* ctx);
  // Runs `op` now on this thread if the engine is idle (see Engine::tryRunInline).
  bool runInline(braid::Operation& op);
  // The same for a batch of operations that run at once (see Engine::tryRunInline).
  bool runInline(const std::vector<std::shared_ptr<braid::Operation>>& ops);
  // Whether `peer` has sent this rank stream bytes that nobody has read. Asked while this rank
  // waits on the board with nothing of its own on the streams: then the two ranks are in
  // different calls (a call on a split view where this rank called its root).
  bool peerSentUnreadStreamBytes(int peer) const;
  // Whether `peer`, which this rank waits for on the board in its collective `seq`, is in
  // another call instead: it sent stream data nothing here reads and has not started `seq`
  // (a peer that has started it sends data only for a later operation running beside it).
  bool peerInAnotherCall(int peer, uint64_t seq) const;
  // Runs blocking calls on the board on this thread when the engine is idle and every call runs on
  // the board (Engine::runBoardCalls); false otherwise (split views: always).
  bool runBoardCalls(std::span<const braid::OpDesc* const> calls, Status* results);
  // Waits for submitted `op` until it is done or `deadline`, driving the progress loop on this
  // thread when the configuration allows (Engine::driveUntilDone); true when done. `held`: the
  // waiting thread is the one that issued `op` in a blocking call (or a group's end), so it
  // issues nothing more before `op` ends (Operation::HeldCaller); not for braidWait, which
  // another thread may call while the issuing thread goes on.
  bool waitFor(braid::Operation& op, braid::Deadline deadline, bool held = false);
  // Waits for every submitted operation (bounded by the communicator's timeout); returns the
  // sticky error, if any.
  Status finalize();
  // Waits for every submitted operation; a Timeout status only when they did not finish.
  Status drain();
  // Stops everything now (any thread). During an init it only stops the init's waits (see
  // abortInit) and records the abort; the caller then joins the init thread, if any.
  void abort();
  // Stops a pending init from any thread: every wait of init() is bounded by a deadline bound to
  // this flag (Deadline::abortableBy), so init() fails with braidErrAborted within about
  // kAbortCheckMs and its thread can be joined at once (braidCommAbort / braidCommDestroy).
  void abortInit() { init_aborted_.store(true, std::memory_order_release); }

  // Pre-multiplied sum operators.
  int addPreMulOp(const braid::PreMulOp& op);
  bool removePreMulOp(int id);
  bool findPreMulOp(int id, braid::PreMulOp* out) const;

  std::string describe() const;
  // "rank 0/8 on host h: inter-node pairs by common RDMA fabric: ib 4 none 8; ...": which NIC
  // type each pair of ranks on different nodes would share (logged at init at INFO).
  std::string fabricSummary() const;
  // Hang localisation report (see Engine::debugState); bounded by `deadline`.
  std::string debugState(braid::Deadline deadline) const;
  std::string where() const;  // "rank 2/4 on host h1"

  // For the engine.
  // Streams per peer: the schedules' channels 0..nchannels-1 on lanes of the same index, plus
  // the express lane (index nchannels) for call agreements and small collectives.
  braid::Endpoint* endpoint(int peer, int lane) const {
    return root_ ? root_->endpoint(root_rank_of_[peer], lane) : endpoints_[peer][lane].get();
  }
  int nchannels() const { return nchannels_; }
  int nlanes() const { return nchannels_ + 1; }
  int expressLane() const { return nchannels_; }
  const braid::Tuner& tuner() const { return *tuner_; }
  // Whether a call carries its call agreement in its data (CarriesAgreement, active_op.h),
  // decided per call shape by ActiveOp and kept here: the decision builds the call's schedule for
  // every rank and placement. Touched only by the engine's driver (one at a time).
  // Keyed by the call's wire signature less its sequence number and communicator.
  using CarriedAgreementCache =
      std::map<std::tuple<uint8_t, uint8_t, uint8_t, uint64_t, int32_t, uint32_t>, bool>;
  CarriedAgreementCache& carriedAgreementCache() { return carried_agreement_cache_; }
  // This rank's data schedule per call shape (the call's CollArgs; the tuner and the
  // configuration do not change for a communicator), so a repeated call skips the tuner, the
  // builder and its lowering. Schedules are immutable once
  // built and shared with the operations that run them. Touched only by the engine's driver.
  struct CachedPlan {
    const braid::Algorithm* algo = nullptr;
    std::shared_ptr<const braid::RankSchedule> schedule;
  };
  using PlanCache = std::map<braid::CollArgs, CachedPlan>;
  PlanCache& planCache() { return plan_cache_; }
  // The last collective shape the engine planned (ActiveOp::buildSchedule), its arguments and
  // plan: a repeated call (the common case) skips CollArgsFor and the plan cache's lookup.
  struct PlanMemo {
    braid::OpDesc shape;
    braid::CollArgs args;
    CachedPlan plan;
  };
  PlanMemo& planMemo() { return plan_memo_; }
  // The call agreement's schedule (a dissemination barrier of this rank), built once.
  std::shared_ptr<const braid::RankSchedule>& agreementPlan() { return agreement_plan_; }
  // The board's agreement of a call that runs on the streams (BoardAgreementSchedule), built once.
  std::shared_ptr<const braid::RankSchedule>& boardAgreementPlan() { return board_agreement_plan_; }
  // The link model the tuner was built with, and where it came from (link_calibration.h).
  const braid::CalibratedLinks& links() const { return links_; }
  const braid::GroupLayout& layout() const { return layout_; }
  braid::Doorbell& doorbell() { return root_ ? root_->doorbell() : doorbell_; }
  const std::string& transportOf(int peer) const {
    return root_ ? root_->transportOf(root_rank_of_[peer]) : transport_of_[peer];
  }

  // Recovery (braidCommShrink): each rank keeps an authenticated listener for the lifetime of
  // the communicator, so survivors can exchange a new unique id without the data streams,
  // which a failed operation may have left mid-message. It is served all along (strangers on it
  // are dropped within a second, whenever they come).
  braid::HandshakeListener& control() { return root_ ? root_->control() : *control_; }
  const sockaddr_storage& controlAddress(int rank) const {
    return root_ ? root_->controlAddress(root_rank_of_[rank]) : control_addrs_[rank];
  }
  const std::vector<uint8_t>& secret() const { return secret_; }
  // The blob this rank published for transport `name` ("tcp1 10.0.0.2:4711"), "" without one
  // (tests aim strangers at a transport's listener with it).
  std::string transportBlob(const std::string& name) const {
    if (root_) return root_->transportBlob(name);
    for (const auto& t : transports_)
      if (name == t->name()) return t->localBlob();
    return "";
  }
  // Shuts every stream down so that peers fail at once (the engine calls it when an operation
  // of this rank fails; see Endpoint::shutdown).
  void shutdownEndpoints();
  // This rank leaves the communicator with every call complete: at braidCommDestroy (`why` =
  // kDestroyed, once its operations are drained and no split view lives on) or when its process
  // exits without one (kExited, from the exit hook, LeaveAtExit). A peer left waiting for a call
  // this rank never made must hear why, at once, instead of a crash ("died") or a timeout
  // (issue 42):
  // - a peer already waits (it sent stream data nobody read here, or posted a board call this
  //   rank never posted): the reason goes to every rank as an abort's does (announceLeaving);
  // - else a peer may still come: shm peers find the reason in this rank's segment, and every
  //   open stream gets a goodbye (wire_header.h kWireGoodbye) after its last message, so a late
  //   call reads the reason where it expected data, on any host.
  // Nothing is said when the communicator failed (the failure was announced), when the engine
  // is busy (another thread still calls), or for a split view. Sends no notice when nobody waits.
  void leave(braid::FailureCause::Reason why);
  // Whether a peer waits on this rank in a call this rank has not made: it sent stream data
  // nobody read here (other than its goodbye, which is read past), or posted a board call this
  // rank never posted. On the engine's thread or in its idle loop: it reads the streams.
  bool awaitedByAPeer();
  // Tells every rank that this rank leaves for `why`, then shuts the streams down.
  void announceLeaving(braid::FailureCause::Reason why);
  // Aborts the running operations without marking the communicator failed for good.
  void abortOperations(const Status& reason);

  // Root causes (failure_cause.h): what this rank learned first about a failure, from its own
  // transports, its engine, or another rank's notice on the control listener.
  braid::CauseBoard& causes() { return root_ ? root_->causes() : causes_; }
  // The control listeners of every rank, for notices and probes (failure_notice.h).
  braid::ControlPeers controlPeers() const;
  // The cause this rank names for its failure (the board's first; filled in beforehand with
  // causes().offer / complete). When this rank observed that cause itself, it first sends it to
  // every other rank (once, bounded by kFailureNoticeMs), so that the ranks that fail after this
  // one can name it. Call before shutdownEndpoints().
  braid::FailureCause announceFailure();
  // The error of an operation of this (root) communicator that failed with `st`, naming the root
  // cause: a failure seen here (`local`), another rank's notice, else this rank's own failure,
  // which it then announces to every rank. `ctx` prefixes the operation ("allreduce #5: "),
  // `coll` and `seq` name it in the cause. Marks the communicator failed and shuts its streams
  // down so that peers fail at once. The engine (its board calls too) uses it.
  Status failWithCause(const Status& st, const std::string& ctx, const std::string& coll,
                       uint64_t seq, const std::optional<braid::FailureCause>& local);
  // This rank as a FailureCause of `reason` (its own failure, a revoke).
  braid::FailureCause selfCause(braid::FailureCause::Reason reason, std::string detail) const;
  // A cause naming peer `peer` (its pid and host from the rendezvous) for `reason`.
  braid::FailureCause peerCause(int peer, braid::FailureCause::Reason reason) const;

 private:
  // The engine that runs this communicator's operations: its own, or its root's.
  braid::Engine* engine() const { return root_ ? root_->engine() : engine_.get(); }
  // node_of / local_rank from infos_ (nodes in order of first appearance), then what depends on
  // them (threads_outnumber_cpus_; host_cpus_ must be set first).
  void buildLayout();
  void buildNodeLayout();
  // layout_.dgroup_of from infos_' device groups (empty when no rank is bound to a device).
  void buildDeviceGroupLayout();
  // Waits (bounded) until every operation submitted on this communicator has completed.
  bool waitOwnOps(braid::Deadline deadline);
  Status exchangeRankInfo(braid::Bootstrap& bs, braid::Deadline deadline);
  Status connectTransports(braid::Bootstrap& bs, braid::Deadline deadline);
  Status calibrateLinks(braid::Bootstrap& bs, braid::Deadline deadline);

  std::atomic<State> state_{State::kInitializing};
  std::thread init_thread_;
  std::atomic<bool> init_aborted_{false};  // see abortInit()
  int rank_ = -1;
  int nranks_ = 0;
  int nchannels_ = 1;
  braid::CommOptions opts_;
  std::string tag_;
  std::vector<uint8_t> secret_;
  std::vector<braid::RankInfo> infos_;
  braid::GroupLayout layout_;
  braid::Doorbell doorbell_;
  std::vector<std::unique_ptr<braid::TransportInstance>> transports_;
  std::vector<std::string> transport_of_;                                 // per peer
  std::vector<std::vector<std::unique_ptr<braid::Endpoint>>> endpoints_;  // [peer][channel]
  braid::CalibratedLinks links_;
  // Every rank's first transport is tcp, so a node's ranks talk over TCP (LinkModel::intra_tcp;
  // computed from the transport lists every rank received alike).
  bool intra_tcp_ = false;
  std::unique_ptr<braid::Tuner> tuner_;
  CarriedAgreementCache carried_agreement_cache_;
  PlanCache plan_cache_;
  PlanMemo plan_memo_;
  std::shared_ptr<const braid::RankSchedule> agreement_plan_;
  std::shared_ptr<const braid::RankSchedule> board_agreement_plan_;
  std::unique_ptr<braid::Engine> engine_;
  // The control listener's thread reads the engine (issued calls, wait states) until the
  // destructor clears this, under the lock, before the engine goes.
  std::mutex listener_engine_mu_;
  bool listener_may_read_engine_ = true;
  // Before control_: its thread writes here until the listener is destroyed.
  braid::CauseBoard causes_;
  braid::LocalBoard* board_ = nullptr;  // owned by its transport in transports_
  braid::BoardClock board_clock_;
  int host_cpus_ = 1;
  uint64_t single_copy_bytes_ = 0;     // agreed in connectTransports
  braid::device::IpcProbe ipc_probe_;  // this rank's, from exchangeRankInfo to connectTransports
  bool device_ipc_ = false;            // agreed in connectTransports
  // Rank 0's topology's device-group link (init field 13), for links_.model.group.
  std::optional<braid::LinkParams> group_link_;
  bool threads_outnumber_cpus_ = false;
  bool ranks_outnumber_cpus_ = false;
  std::unique_ptr<braid::HandshakeListener> control_;
  // Descriptors held in reserve for the failure notice (announceFailure): a rank that fails
  // because it ran out of descriptors can still tell the others why.
  std::vector<braid::Fd> notice_reserve_;
  std::vector<sockaddr_storage> control_addrs_;
  bool loopback_root_ = false;

  std::atomic<braidResult_t> async_code_{braidSuccess};
  mutable std::mutex mu_;  // guards the strings and the op table below
  std::string async_message_;
  std::string last_error_;
  std::map<int, braid::PreMulOp> premul_ops_;
  int next_premul_id_ = braidNumOps;

  // Views (see initView).
  std::shared_ptr<braidComm> root_;  // null for a root
  std::vector<int> root_rank_of_;    // per rank of this view
  uint32_t comm_id_ = 0;
  uint32_t splits_ = 0;  // splits made of this communicator, for nextSplitId
  CallNumbers numbers_;  // touched by the engine's driver only
  // Operations submitted and not completed. A counter, not a guarded integer: every call bumps it
  // twice, and the lock round trips with a broadcast were about 300 instructions of a small
  // non-blocking call. own_mu_, own_cv_ and own_waiters_ serve waitOwnOps (drain, destroy) only;
  // opDone says how they pair.
  std::atomic<uint64_t> own_inflight_{0};
  std::atomic<int> own_waiters_{0};
  std::mutex own_mu_;
  std::condition_variable own_cv_;
  std::atomic<bool> view_aborted_{false};
  braid::Status view_abort_reason_;  // guarded by mu_
};
