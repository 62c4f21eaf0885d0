// One operation while the engine runs it: its schedules, per-channel progress, scratch, and the
// code that moves its transfers. Many are in flight at once on one communicator (the engine
// drives a window of them); a StreamGate orders their use of shared streams.
//
// An operation runs in stages:
//   agreement  the call agreement of a collective (see CallConflict in wire_header.h), always on
//              the express lane, so that it never waits behind another operation's bulk data;
//              on a communicator with a board (one host), the board's agreement instead: one
//              post on the board, compared with every peer's (a one-sided schedule,
//              board_schedules.h), so that every call of the communicator, whatever runs it,
//              takes board posts in one numbering;
//   data       the lowered schedule (lowering.h: the algorithm's data movement plus the pre-
//              multiplied sum's scaling and AVG's division); collectives of at most
//              kExpressBytes run on the express lane too (one channel), larger ones on lanes
//              0..nchannels-1, point-to-point groups on lane 0. A one-sided schedule (the board's
//              forms) runs in the board stage instead, agreement included (one_sided_run.h).
// The schedules of both stages are built when the operation becomes active, so its stream claims
// are known before it moves a byte.
#pragma once

#include <sys/poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/schedule.h"
#include "core/runtime/one_sided_run.h"
#include "core/runtime/operation.h"
#include "core/base/status.h"
#include "core/runtime/stream_gate.h"
#include "core/runtime/wire_protocol.h"
#include "core/runtime/comm.h"

struct braidComm;

namespace braid {

// Collectives whose largest buffer is at most this many bytes use the express lane.
inline constexpr uint64_t kExpressBytes = 64 * 1024;
// Calls on a power of two of at most this many ranks may carry their call agreement in their
// data (wire_header.h, CallConflict); deciding it builds the call's schedule for every rank once
// per call shape.
inline constexpr int kCarriedAgreementMaxRanks = 64;
// Bytes one operation may move per pass of the progress loop. Without a bound, a large transfer
// whose peer keeps up would hold the loop until it ends, and a small operation issued meanwhile
// would wait for it (head-of-line blocking in time, though not on the wire).
inline constexpr int64_t kSweepBudgetBytes = 1 << 20;
// The least a local elementwise step (copy, reduce, scale, divide) moves when the operation's
// budget for the pass is spent, so that it always advances.
inline constexpr int64_t kMinLocalPieceBytes = 64 << 10;

// The request an algorithm is asked to build for collective `d` on `comm` (express-lane calls get
// one channel; a pre-multiplied sum runs out of place), and the algorithm that serves it (the
// tuner's choice, or "ordered" for reductions under BRAID_DETERMINISTIC). Shared by the engine
// and braidGroupSimulateEnd so that an estimate prices what would run.
CollArgs CollArgsFor(const braidComm& comm, const OpDesc& d);
const Algorithm* AlgorithmFor(const braidComm& comm, const OpDesc& d, const CollArgs& args);
// The algorithm and this rank's lowered schedule for `d` (its request `args`): from `comm`'s plan
// cache when the same call shape ran before, else built (and cached, if small). Only the
// engine's driver calls it (the cache is not locked).
Result<braidComm::CachedPlan> PlanFor(braidComm& comm, const OpDesc& d, const CollArgs& args);
// Whether collective `d`, run by `algo` with `args`, carries its call agreement in its data
// (wire_header.h, CallConflict) instead of running the agreement first: a verified, express-lane
// call (not a barrier) on two ranks whose schedule on both ranks, in place and out of place, has
// one channel whose first step is one send to the peer and one receive from it (plus local
// steps, which then wait for the peer's header); or on a larger power of two of ranks (at most
// kCarriedAgreementMaxRanks) whose schedule on every rank moves its data in the agreement's
// butterfly and nothing else. Decided alike on every rank whatever their placements.
bool CarriesAgreement(const braidComm& comm, const OpDesc& d, const Algorithm* algo,
                      const CollArgs& args);

// What an operation waits on when nothing can move (for the engine's poll()).
struct TransferWait {
  Endpoint* ep;
  bool send, recv;
};

class ActiveOp {
 public:
  // `op` is the caller's operation; `keep` owns it when the caller does not wait on the stack
  // (null for inline runs). `id` orders the operation in the StreamGate. `comm` is the
  // communicator the call was made on (a root, or a split view of the engine's communicator):
  // the operation works in its ranks; streams are looked up through it and the gate is keyed in
  // root ranks.
  ActiveOp(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id);
  // The same on an operation the engine recycles (its vectors keep their capacity, so a small
  // call's activation allocates nothing).
  void reset(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id);
  // Drops what a retired operation holds (its schedules, its caller's operation) before the
  // engine keeps it for reuse.
  void recycle();
  // A recycled operation that ran, to its end and without a conflict, the one-sided plan that
  // its communicator's memo (braidComm::planMemo) still holds takes the next call of that shape
  // with only what differs set: the operation, its id and number, the user's buffers. This is
  // reset() and prepare() for the common case of a repeated small non-blocking call, about 1 000
  // instructions less. `coll_seq` as prepare()'s. False when it does not apply (`keep` is then
  // untouched and the caller resets and prepares).
  bool rearm(braidComm* comm, Operation* op, std::shared_ptr<Operation>& keep, uint64_t id,
             uint64_t coll_seq);
  // rearm() without its test, for a caller that asked canTake() and changed nothing it reads
  // since (Engine::eagerBoardCall, which must not be refused once it started the call).
  void arm(braidComm* comm, Operation* op, std::shared_ptr<Operation> keep, uint64_t id,
           uint64_t coll_seq);

  // Builds the schedules and the stream claims. `coll_seq` is the communicator's collective
  // number (ignored for point-to-point); `p2p_send_seq` / `p2p_recv_seq` number the point-to-
  // point messages per peer and are advanced. Scratch buffers come from `scratch` (a buffer the
  // engine recycles; grown here as needed).
  Status prepare(uint64_t coll_seq, std::vector<uint64_t>& p2p_send_seq,
                 std::vector<uint64_t>& p2p_recv_seq);

  // Moves whatever the transports and the gate allow now; sets *moved when anything moved.
  // An error leaves the operation unfinished; cleanFailure() then tells whether the streams are
  // still at message boundaries (a call-agreement conflict) or torn.
  // Small sends may be corked (Endpoint::cork): their endpoints are added to `*corked`, which
  // the caller flushes at the end of its pass.
  Status advance(StreamGate& gate, bool* moved, std::vector<Endpoint*>* corked = nullptr);
  // Bytes the last advance() moved or computed on (transfers and local steps).
  int64_t bytesLastPass() const { return kSweepBudgetBytes - budget_; }
  bool finished() const { return stage_ == Stage::kFinished; }
  // Whether any byte of this operation went onto or came off a stream: until then it can be
  // dropped without putting the streams out of step (aborting one split view leaves the others).
  bool touchedStreams() const { return touched_; }
  bool cleanFailure() const { return clean_failure_; }

  void collectWaits(const StreamGate& gate, std::vector<TransferWait>& out) const;
  // "receiving from rank 3 (host h, pid 42) on lane 1, step 2/6; ..." for timeout messages.
  std::string pendingDescription(const StreamGate& gate) const;
  // Hang localisation (braidCommDebugState): the call, its stage, per lane the step it is at and
  // what it waits for, and the ranks it is waiting on, one line per lane.
  std::string progressReport(const StreamGate& gate) const;
  // Ranks this operation waits to hear from now (receives pending on streams it owns, or the
  // peer whose board counter it waits for), in its communicator's numbering.
  std::vector<int> waitingOn(const StreamGate& gate) const;
  // Whether what is left of this operation needs nothing from this rank that a peer waits for:
  // a one-sided schedule past its last post (it only reads, and consumes what it read). Such an
  // operation may wait for its caller's next call instead of the progress thread.
  bool quiet() const { return stage_ == Stage::kBoard && board_started_ && run().pastLastPost(); }
  // The board run this operation is blocked in (a board stage waiting for a peer), or null.
  const OneSidedRun* boardBlocked() const {
    return board_started_ && !run().finished() &&
                   (stage_ == Stage::kBoard || stage_ == Stage::kBoardAgreement)
               ? &run()
               : nullptr;
  }
  // Whether rearm() would take call `d` of `comm`, and the schedule it would run.
  bool canRearm(braidComm* comm, const OpDesc& d) const;
  // Whether arm() may take call `d` of `comm` that a caller planned itself, `schedule` being its
  // plan (Engine::eagerBoardRun): as canRearm, with that plan in place of the communicator's memo,
  // which holds the last shape prepared (calls of two shapes in flight by turns change it).
  bool canTake(braidComm* comm, const OpDesc& d,
               const std::shared_ptr<const RankSchedule>& schedule) const;
  const std::shared_ptr<const RankSchedule>& dataSchedule() const { return data_sched_; }
  // A call that rearm() took and that a caller started on the board itself (Engine's eager
  // board call, engine_board_calls.cc) goes on in `run`, which the engine keeps until the
  // operation retires: the operation is past its start, in its board stage.
  void adoptBoardRun(OneSidedRun* run) {
    adopted_ = run;
    board_started_ = true;
  }
  OneSidedRun* adoptedRun() const { return adopted_; }
  void dropAdoptedRun() { adopted_ = nullptr; }
  // "rank 0/4 on host h: allreduce(count=4, float, sum) #3 [ring]: " for error messages.
  std::string context() const;

  Operation& operation() { return *op_; }
  braidComm& owner() const { return *comm_; }
  std::shared_ptr<Operation> releaseKeep() { return std::move(keep_); }
  bool isCollective() const { return !is_p2p_; }
  uint64_t seq() const { return seq_; }
  uint64_t id() const { return id_; }
  const std::vector<std::pair<uint32_t, uint32_t>>& claims() const { return claims_; }
  // When it last moved (NowMicros), for the stall checks; -1: it moved (or was activated) since
  // the engine last looked, which stamps it then (Engine::failStalled). Progress costs a store,
  // not a clock read (a read is ~30 ns on a VM; a small call's passes moved several times).
  int64_t last_progress_us = -1;

  // Recycled by the engine between operations (they only grow).
  std::vector<std::byte> scratch;

 private:
  enum class Stage { kAgreement, kBoardAgreement, kBoard, kData, kFinished };
  struct ChannelState {
    const Channel* ch = nullptr;
    int lane = 0;
    size_t step = 0;
    std::vector<OpProgress> progress;
    bool finished() const { return step >= ch->steps.size(); }
    void enterStep() {
      if (!finished()) progress.assign(ch->steps[step].ops.size(), OpProgress{});
    }
  };
  // The schedule's buffer table bound to memory: a base and an element size per slot.
  struct Buffers {
    std::vector<std::byte*> base;
    std::vector<size_t> elsize;
    std::byte* at(const Slice& s) const { return base[s.buffer] + s.offset * elsize[s.buffer]; }
    uint64_t bytes(const Slice& s) const { return s.count * elsize[s.buffer]; }
  };

  // The data schedule of this call: from the communicator's plan cache when the same call
  // shape ran before, else built (and cached; point-to-point groups are built every time).
  Result<std::shared_ptr<const RankSchedule>> buildSchedule(CollArgs* args);
  // Points every slot of the data schedule's buffer table at memory (user buffers, scratch).
  Status bindBuffers();
  // Runs a local op (copy, reduce, scale, divide, the codecs).
  // `whole_bytes`: the size of the step op that `sop` is a piece of (a copy streams from
  // kStreamingCopyMinBytes of it, device/cpu/streaming_copy.h).
  Status runLocal(const StepOp& sop, uint64_t whole_bytes);
  static std::vector<ChannelState> StatesFor(const RankSchedule& s, int lane_base, bool one_lane);
  uint32_t streamOf(const StreamGate& gate, const ChannelState& cs, const StepOp& sop) const;
  // Runs the steps of `chans` as far as possible; true when every channel is finished.
  Result<bool> advanceStage(std::vector<ChannelState>& chans, StreamGate& gate, bool* moved);
  Status advanceAgreement(ChannelState& cs, size_t i, bool* moved);
  // Records that peer `peer`'s call (its header `h`) differs from this rank's, unless a conflict
  // is already recorded.
  void noteConflict(int peer, const WireHeader& h);
  // Reads past the payload and padding of the message whose header pr.hdr holds (a mismatched
  // call's data), without using them.
  Status dropPayload(Endpoint* ep, int peer, OpProgress& pr, bool* moved);
  // The clean failure of a call agreement that found a conflict.
  Status conflictError();
  // CarriesAgreement for this call, cached per call shape on the communicator.
  bool carriesAgreement();
  // Whether the data step `cs` is at carries the agreement: the first on two ranks, every one
  // beyond (a butterfly's rounds).
  bool carriedRound(const ChannelState& cs) const {
    return carried_agreement_ && (shadow_output_ || cs.step == 0);
  }
  // Receives the payload of a call-agreement message (a conflict record, or nothing) whose
  // header pr.hdr holds, and adopts the record if this rank has none.
  Status recvConflictRecord(Endpoint* ep, OpProgress& pr, bool* moved);
  // The board stages: the agreement of a call that runs on the streams, or a one-sided schedule.
  Status advanceBoard(bool* moved);
  // Whether the first step of this operation's data is complete as far as its transfers go.
  bool firstTransfersDone() const;
  // The error for a message of another communicator where this operation expected its own.
  Status OtherCommunicator(int peer, const WireHeader& h) const;
  // The peer's goodbye (kWireGoodbye) where this operation expected a message: it left the
  // communicator without making this call. Offers the cause it names.
  Status PeerLeft(int peer, const WireHeader& h) const;
  Status advanceData(ChannelState& cs, size_t i, bool* moved);
  const std::vector<ChannelState>& currentChannels() const {
    return stage_ == Stage::kAgreement ? agree_chans_ : data_chans_;
  }

  braidComm* comm_;
  Operation* op_;
  std::shared_ptr<Operation> keep_;
  uint64_t id_;
  OpDesc d_;  // the call; the prologue may redirect its input
  bool is_p2p_ = false;
  uint64_t seq_ = 0;
  const char* algo_name_ = "";       // the algorithm's name (static storage)
  const Algorithm* algo_ = nullptr;  // collectives: the algorithm of the data schedule
  CollArgs args_;
  WireHeader proto_;  // wire identity of this call
  Stage stage_ = Stage::kData;
  bool clean_failure_ = false;
  bool touched_ = false;

  // Shared with the communicator's plan cache, never modified (ChannelState points into them).
  std::shared_ptr<const RankSchedule> agree_sched_, data_sched_;
  std::vector<ChannelState> agree_chans_, data_chans_;
  Buffers bufs_;
  // What bindBuffers derives from the data schedule alone, kept while the (pooled) op runs the
  // same plan again: element sizes, scratch offsets, the decoder's slice (a small call spent
  // about 400 instructions deriving them).
  struct Layout {
    std::shared_ptr<const RankSchedule> of;
    Status unsupported;            // a buffer this build cannot move
    std::vector<uint64_t> offset;  // per buffer: scratch offset
    std::vector<size_t> elsize;    // per buffer
    uint64_t scratch_bytes = 0;    // without the shadow
    uint64_t codec_elems = 0;      // the largest dequantize-reduce
    int board_form = -1;           // a board schedule's form (PlanBoardCall), once asked
    std::vector<uint16_t> send_slots, recv_slots;  // the user's buffers' slots (rearm())
  };
  // Set by recycle() when rearm() may take this operation: the communicator it ran on (only
  // compared: rearm() then checks that its memo still holds this plan).
  bool rearmable_ = false;
  const braidComm* rearm_comm_ = nullptr;
  Layout layout_;
  std::vector<std::byte> codec_tmp_;  // one decoded slice of a dequantize-reduce
  std::vector<uint64_t> p2p_seq_;     // per op of the point-to-point step
  std::vector<std::pair<uint32_t, uint32_t>> claims_;

  // Call agreement state.
  CallConflict conflict_;
  bool have_conflict_ = false;
  // The first data step carries the agreement (kWireCarriesAgreement); no agreement stage.
  bool carried_agreement_ = false;
  // The peer's carried agreement matched: the first step's local steps may run.
  bool agreement_checked_ = false;
  // The butterfly of a carried agreement on more than two ranks: the data schedule writes a
  // shadow of the receive buffer (scratch, a copy of it in place; bufs_ binds the receive slot
  // to it), copied out once every round matched, so that a conflict found in a later round leaves
  // the user's buffers as they were.
  bool shadow_output_ = false;
  uint64_t shadow_bytes_ = 0;
  std::vector<CallConflict> sent_;  // per agreement step: the record its send carries
  CallConflict incoming_;
  // The board stages (one_sided_run.h): started once the board's clock gives the call its posts.
  OneSidedRun run_;
  OneSidedRun* adopted_ = nullptr;  // the run that goes on instead of run_ (adoptBoardRun)
  const OneSidedRun& run() const { return adopted_ ? *adopted_ : run_; }
  OneSidedRun& run() { return adopted_ ? *adopted_ : run_; }
  bool board_started_ = false;
  int64_t budget_ = 0;  // bytes left in this pass (kSweepBudgetBytes at the start of advance())
  std::vector<Endpoint*>* corked_ = nullptr;  // this pass's (advance())
};

}  // namespace braid
