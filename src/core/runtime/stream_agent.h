// Stream-ordered calls (issue 39; DESIGN.md 2.5): a collective on device buffers, called with a
// device stream, returns at once; it starts only after the work queued on the stream before it,
// and the work queued after it sees its result, with no host synchronisation by the caller.
//
// One agent per communicator: a thread that runs the communicator's stream-ordered calls in
// submission order (the same on every rank, as every collective's order). submit() takes a flag
// pair from the StreamFlagPool and queues on each of the call's streams a write of `ready` and a
// wait for `done`, then queues the call for the agent. The agent sleeps until `ready` (the
// stream's earlier work is done), runs the call with braid's blocking API on host-accessible
// buffers, and writes `done`, which releases the stream.
//
// Host access: where device memory is not host memory (a GPU, the emulated device's default), the
// call's device buffers are staged through a pinned host buffer with copies queued on the call's
// own (first) stream when it is submitted: the regions the call reads are copied in before its
// `ready`, the regions it writes are copied out after its `done`, then the buffer's own flag says
// it is free again. The agent itself queues no device work: on a GPU with one hardware queue
// (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-LM sets it) a copy the agent queued on a stream of
// its own would wait behind the user's stream's wait for `done`, which waits for the agent. Each
// call in flight holds its own staging buffer (reused once its flag says the copies out ran). A
// call in pieces (StreamCall::pieces: large element-wise collectives) is staged piece by piece,
// each piece with flags of its own, so that its copies overlap the collective (the staging
// pipeline). A call on several streams copies on the first, which
// first waits for the others' `ready`; the others then wait for the staging buffer's flag (the
// copies out), not for `done`. A staged call's copies in also wait for the previous staged call's
// flag, so that calls on different streams keep their order for the data (as NCCL serialises a
// communicator's kernels).
//
// Failures never hang a stream: a call that fails, or that cannot run (the communicator failed
// earlier, the agent is aborted), still writes `done`. The first failure is kept (error()) and
// returned by every later submit(): the stream's later calls did not run, as after an NCCL
// asynchronous error. As with NCCL, the output buffers of a failed call and of the calls not run
// after it are undefined (the staging copies out still run).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/stream_flag_pool.h"
#include "device/device_runtime.h"

namespace braid {

// One buffer of a call, as the call uses it.
struct StreamBuffer {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool read = false;     // the call reads it
  bool written = false;  // the call writes all of it when it succeeds
  device::PointerInfo info;
};

// Where each user pointer of a call is for the host while the call runs: the staging copy of a
// device buffer, or the pointer itself. Pointers inside a buffer map with the same offset.
class HostPointers {
 public:
  void* operator()(const void* user) const;

 private:
  friend class StreamAgent;
  struct Range {
    uintptr_t start, end;
    char* host;
  };
  std::vector<Range> ranges_;
};

// A call whose data moves on the device, between the ranks' buffers that this rank can address
// (peer windows, nccl/peer_windows.h), instead of through the host. On its stream: `ready`, a wait
// for `go`, the device work, a write that says the work ended, the wait for `done`. The agent,
// once `ready`: agree(), then `go` (with the work told to skip when they disagreed), then the
// work's end, then finish(), then `done`. Nothing is staged; the agent still queues no device
// work (the call's own stream carries it, so one hardware queue cannot deadlock it).
struct DeviceWork {
  // At submit: queues the device work on `s`; it must do nothing when the host-mapped word
  // `skip` holds `skip_value` as it runs.
  std::function<Status(device::StreamHandle s, const uint32_t* skip, uint32_t skip_value)> queue;
  // On the agent, once the stream is `ready`: whether every rank runs its device work (a host
  // exchange among the ranks, the same answer on every one). On an error no rank's work runs
  // and the call fails with it.
  std::function<Status()> agree;
  // On the agent, after this rank's device work ended: waits until every rank's has (each writes
  // into the others' buffers, so no rank's `done` may come before the last writer's end).
  std::function<Status()> finish;
  // Optional, at submit, on the stream before its `ready`: device work the call needs done on
  // this rank before the ranks agree, so before any peer touches this rank's buffers (an
  // in-place all-to-all's copy of its input to scratch). It runs whatever the agreement says.
  std::function<Status(device::StreamHandle s)> prepare;
  // Optional, on the agent once the call is over: `work_ended` when the agent saw the device
  // work end (what it read may be reused), false when it may still run (an abort, or a submit
  // that failed after queue() was called). A submit that fails before queue() calls it with true
  // (nothing of the call can run), on the submitting thread.
  std::function<void(bool work_ended)> released;
};

struct StreamCall {
  std::string what;                           // "ncclAllReduce", for messages
  std::vector<device::StreamHandle> streams;  // the streams it is ordered on (at least one)
  std::vector<StreamBuffer> buffers;
  std::function<Status(const HostPointers&)> run;
  // Optional, for element-wise collectives (all-reduce, reduce, broadcast): the call as `pieces`
  // (>= 2) calls on consecutive slices, run in order by run_piece(map, k) instead of `run`. Piece
  // k covers bytes [k * piece_bytes, (k + 1) * piece_bytes) of every buffer (the last piece
  // less). Staged on one stream, each piece has its own `ready` and `done`: its copies in come
  // before its `ready`, its copies out after its `done`, so that the copies of one piece overlap
  // the collective of its neighbours and the collective starts after the first piece's copy,
  // not the whole buffer's. Otherwise the pieces run back to back after the call's `ready`.
  size_t pieces = 0;
  size_t piece_bytes = 0;
  std::function<Status(const HostPointers&, size_t piece)> run_piece;
  // Optional: the call's data moves on the device (DeviceWork; one stream; `run` unused).
  std::shared_ptr<DeviceWork> device_work;
};

class StreamAgent {
 public:
  // `name` tells the agent's messages apart ("rank 1/4"). The runtime outlives every agent.
  // `pool`: where its flags come from; null = the process's pool for `runtime` (tests that make
  // and destroy runtimes bring their own).
  StreamAgent(device::DeviceRuntime* runtime, std::string name, StreamFlagPool* pool = nullptr);
  // Waits for the queued calls (drain()) unless abort() was called, then stops the thread.
  ~StreamAgent();
  StreamAgent(const StreamAgent&) = delete;
  StreamAgent& operator=(const StreamAgent&) = delete;

  // Checks the call (streams, buffer ranges), orders it on its streams and queues it. Returns at
  // once. Errors: the argument's (InvalidArgument, nothing queued, the agent usable), the agent's
  // kept error, or one of the device while the call was being ordered (streams released; kept
  // as the agent's error, and setOnDroppedCall's callback called: the call's peers would wait
  // for it).
  Status submit(StreamCall call);
  // Several calls, each for its agent (a group over several communicators), ordered on their
  // streams together: every call's write of `ready` on every stream is queued before any wait for
  // `done`, so ranks that list the communicators in different orders cannot deadlock (one stream
  // waiting for A's `done` before it wrote B's `ready`, while a peer does the opposite). All or
  // nothing: on an error no call is queued (streams already ordered are released).
  static Status submitGroup(std::vector<std::pair<StreamAgent*, StreamCall>> calls);
  // Runs `job` on the agent's thread after every call queued before it, whatever their outcome
  // (also after an abort or a failure). For what must outlive the queued calls but not the
  // communicator (ncclRedOpDestroy of an operator they use). Runs it at once when stopped.
  void runAfterQueued(std::function<void()> job);
  // Waits until every submitted call has completed (their streams must make progress); returns
  // the kept error.
  Status drain();
  // From now on no call starts: the queued ones fail at once (their `done` written), a call
  // waiting for `ready` stops waiting. A call already running returns when the communicator is
  // aborted (the caller's next step). The destructor then joins without draining.
  void abort(const std::string& why);
  // The first failure (ok while none).
  Status error();
  // Called once, the first time a call is not run because of a kept failure (queued behind it,
  // or refused at submit) or of a submit that failed part way (a device error, kept): the peers
  // wait for this rank's part of that call, which will never come, and after an asymmetric
  // failure (a send or receive fails on its pair only) they would wait for BRAID_TIMEOUT. The NCCL
  // shim revokes the communicator here, so they fail at once. Not after an abort (the aborting
  // caller handles the communicator). Set before any submit.
  void setOnDroppedCall(std::function<void()> f) { on_dropped_ = std::move(f); }
  // Pinned staging memory this agent's calls in flight may hold (0, the default: no cap; the
  // NCCL shim sets BRAID_STAGING_MAX_BYTES). A call whose buffer would take the bytes held by
  // calls in flight past it waits for the oldest call in flight to have its results copied back
  // (calls complete in submission order) and looks again; an abort or a destroy ends the wait
  // (the call fails). The wait is bounded by `wait`: one that does not end may be one that
  // cannot (ranks calling two communicators in different orders, which NCCL's queues absorb),
  // so past it the call allocates past the cap (a warning, counted). Buffers come in powers of
  // two and are kept for reuse by any call they fit: memory allocated may exceed the cap, memory
  // in flight does only past a bounded wait or for one call larger than the cap.
  static constexpr std::chrono::milliseconds kStagingCapWait{1000};
  void setStagingCap(uint64_t bytes, std::chrono::milliseconds wait = kStagingCapWait);
  // Staging buffers allocated, their bytes, how many submits waited for one, how many
  // allocated past the cap after the bounded wait, the cap itself, and the pieces of split calls
  // run, of which how many started before the call's last piece was copied in (tests).
  struct StagingStats {
    size_t buffers = 0;
    uint64_t bytes = 0, waits = 0, past_cap = 0, cap = 0;
    uint64_t pieces = 0, pieces_early = 0;
  };
  StagingStats stagingStats();
  // Waits until the device work of every call submitted so far has ended on its stream (or was
  // told to skip and passed), until `deadline`; false when some may still run. After an abort,
  // before the memory that work uses (peer windows) is unmapped: the agent stops waiting for a
  // kernel that an abort interrupts, the kernel does not stop.
  bool waitDeviceWork(std::chrono::steady_clock::time_point deadline);
  // Stops the agent whatever the number of references to it (a thread polling the
  // communicator's error may hold one during ncclCommDestroy): without `abort`, waits for the
  // queued calls first (drain()); with it, abort(why) first. Then joins the thread. Idempotent;
  // later submits fail. Destroy, finalize and abort call it; the destructor calls shutdown(false).
  void shutdown(bool abort, const std::string& why = "");

 private:
  // A pinned, host-mapped staging buffer and its flag, which the stream sets to `value` once the
  // copies out of the call using it have run. The flag is a word of the process-lifetime flag
  // pool (a slot's `done`), not part of the buffer: a call's other streams wait for it, and such
  // a wait may still be queued when the buffer is freed (its copies are all done by then).
  struct Staging {
    char* base = nullptr;
    size_t bytes = 0;       // data bytes
    StreamFlagSlot word;    // flag(): word.done; back to the pool once the flag is seen at `value`
    uint32_t value = 0;     // the flag's value when free
    bool held = false;      // taken by a submit not yet queued (or done failing)
    bool lost = false;      // a submit failed with copies queued into it: never reused
    uint64_t last_use = 0;  // when a call last took it (past the cap, the oldest is waited for)
    uint32_t* flag() const { return word.done; }
    char* data() const { return base; }
  };
  struct Pending {
    StreamCall call;
    std::vector<StreamFlagSlot> slots;  // one per stream
    void* context = nullptr;
    std::function<void()> host_job;  // runAfterQueued's (no call, no slots)
    HostPointers map;                // where the call's buffers are for the host (staged or not)
    Staging* staging = nullptr;      // its staging buffer, if it has device buffers to stage
    uint32_t staging_value = 0;      // the staging flag's value once this call's copies out ran
    bool staging_queued = false;     // a copy into or a wait on the staging buffer was queued
    // Copies in (staged copy, device region, bytes), queued before `ready` on streams[0], and
    // copies out (device buffer, staged copy, bytes), queued after `done` on streams[0].
    std::vector<std::tuple<char*, const void*, size_t>> in;
    std::vector<std::tuple<void*, const char*, size_t>> out;
    // A call in pieces, staged on one stream (StreamCall::pieces): each piece's copies and flags
    // of their own. piece_slots[k - 1] is piece k's pair (piece 0's is slots[0]). A region in
    // `in` that is one buffer exactly is copied piece by piece; one merged from overlapping
    // buffers is copied whole before piece 0 (in_sliced[j] says which).
    bool split = false;
    std::vector<StreamFlagSlot> piece_slots;
    std::vector<bool> in_sliced;
    const StreamFlagSlot& pieceSlot(size_t k) const {
      return k == 0 ? slots[0] : piece_slots[k - 1];
    }
    // A call with device work: `go` (its ready: the agent's go; its done: the work's end, which
    // the stream writes) and `skip` (its ready: written before `go` when the ranks disagreed).
    std::vector<StreamFlagSlot> device_slots;
    bool device_ended = false;  // the agent saw the device work's end
    bool work_queued = false;   // DeviceWork::queue was called (its work may run)
  };

  void loop();
  void execute(Pending& p);
  // execute() of a call with device work (StreamCall::device_work).
  void executeDeviceWork(Pending& p);
  // At submit, on streams[0] after `ready`: the wait for `go`, the work, the write of its end.
  Status queueDeviceWork(Pending& p);
  // Sleeps until `slot`'s `ready`; false after an abort (the error kept, naming the pieces that
  // ran, and `p` released).
  bool waitReady(Pending& p, const StreamFlagSlot& slot, size_t pieces_run = 0);
  // Queues a split call's pieces on streams[0]: piece k's copies in, then its `ready` (the
  // slots taken here); then, for each piece, the wait for its `done` and its copies out.
  Status queuePiecesIn(Pending& p);
  Status queuePiecesOut(Pending& p);
  // On the submitting thread: the call's staging buffer and map (nothing queued yet).
  Status planStaging(Pending& p);
  // A free staging buffer of at least `bytes` data bytes, held for the caller (past the cap,
  // after waiting for one; fails only on an abort or an allocation failure).
  Result<Staging*> acquireStaging(size_t bytes, const std::string& what);
  // Gives back the staging buffer of a call that is not queued: reusable as it was when nothing
  // was queued into it, else its flag is written (a stream may wait for it) and it is never
  // reused (copies into it may still run).
  void dropStaging(Pending& p, bool queued_into);
  // Writes `done` for every slot; slots whose `ready` was seen go back to the pool.
  void release(Pending& p, bool ready_seen);
  void fail(Status s);
  // on_dropped_, once (not under mu_).
  void tellDropped();

  device::DeviceRuntime* const runtime_;
  StreamFlagPool& pool_;  // process lifetime, or the test's
  const std::string name_;

  std::mutex mu_;
  std::condition_variable cv_;       // work queued, stop or abort
  std::condition_variable drained_;  // a call completed
  std::deque<Pending> queue_;
  uint64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  bool joined_ = false;  // shutdown() joined the thread (under join_mu_)
  std::mutex join_mu_;
  bool aborted_ = false;
  std::string abort_reason_;
  Status error_;
  std::function<void()> on_dropped_;
  std::atomic<bool> dropped_told_{false};

  // Staging buffers, reused; freed when the agent's thread ends (freeing pinned memory,
  // cuMemFreeHost, synchronises the device: not while a user's stream may wait for `done`).
  std::mutex staging_mu_;
  std::vector<std::unique_ptr<Staging>> staging_;
  uint64_t staging_cap_ = 0;       // 0: none
  uint64_t staging_bytes_ = 0;     // allocated (lost ones included)
  uint64_t staging_uses_ = 0;      // calls that took a buffer
  uint64_t staging_waits_ = 0;     // submits that waited for one past the cap
  uint64_t staging_past_cap_ = 0;  // submits that allocated past it after the bounded wait
  std::chrono::milliseconds staging_cap_wait_ = kStagingCapWait;
  uint64_t pieces_run_ = 0, pieces_early_ = 0;  // split calls' pieces (StagingStats)
  // The last staged call's flag and value: the next staged call's copies in wait for it, so that
  // calls of one communicator on different streams stay in submission order for the data too (as
  // NCCL serialises a communicator's kernels): a call's copies in see the previous call's copies
  // out.
  uint32_t* last_flag_ = nullptr;
  uint32_t last_value_ = 0;
  // The last call with device work: its end word and value (go's `done`), under mu_.
  uint32_t* last_work_end_ = nullptr;
  uint32_t last_work_value_ = 0;

  std::thread thread_;
};

}  // namespace braid
