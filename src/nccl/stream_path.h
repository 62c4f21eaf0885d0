// NCCL's stream semantics for device buffers (issue 39). A call whose buffers include device
// memory (classified by the process's device runtime, device/device_runtime.h) is ordered on the
// caller's stream through the communicator's stream agent (core/runtime/stream_agent.h) and
// returns at once; calls on host buffers keep braid's host semantics (the stream is ignored, the
// call has completed when it returns), after the communicator's stream-ordered calls are done,
// since calls on one communicator must not run beside each other.
//
// Inside a group, a communicator's device calls are collected until the outermost ncclGroupEnd.
// Collectives on one communicator and one stream then run as each would alone, in order (its
// device path or staged), so that grouping does not change what a rank runs; other groups (sends
// and receives, several streams or communicators) are ordered on every stream they named as one
// agent job per communicator that runs them as one braid group. A group may not mix host and
// device calls on one communicator (ncclInvalidUsage).
//
// Device memory never reaches host code here: only the agent's staged copies (or the runtime's
// own copies) touch it.
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "core/runtime/stream_agent.h"
#include "device/device_runtime.h"
#include "nccl/known_buffers.h"
#include "nccl/p2p_device.h"
#include "nccl/shim.h"

namespace braid::nccl {

struct BufferUse {
  const void* ptr;
  size_t bytes;
  bool read;     // the call reads it
  bool written;  // the call writes all of it
};

// A call on the stream path: runs on the agent's thread with the buffers' host addresses.
using StreamRun = std::function<braidResult_t(const HostPointers&)>;
// An element-wise collective (all-reduce, reduce, broadcast) on elements [first, first + n) of
// its buffers: the pieces a large staged call runs as (BRAID_STAGING_CHUNK_BYTES).
using PieceRun = std::function<braidResult_t(const HostPointers&, size_t first, size_t n)>;
struct PieceForm {
  size_t count = 0;                // elements of the whole call
  size_t elt_size = 0;             // bytes per element
  std::function<PieceRun()> make;  // empty: the call runs whole
};

// A collective's device path (nccl/peer_windows.h: true with *result when it took it). Inside
// a group the choice waits for ncclGroupEnd: a group of collectives on one communicator and one
// stream takes each call's path as the call alone would, so that a rank that wraps calls in a
// group and one that does not decide alike (other groups stage as one braid group). The form is
// kept, thread-locally, for the grouped call the stream path records next during this API call; the
// guard drops it at the end of the call whatever happened. Outside a group nothing is kept (no
// std::function per call).
using DeviceForm = std::function<bool(ncclResult_t*)>;
class GroupedDeviceForm {
 public:
  GroupedDeviceForm() = default;
  ~GroupedDeviceForm();
  GroupedDeviceForm(const GroupedDeviceForm&) = delete;
  GroupedDeviceForm& operator=(const GroupedDeviceForm&) = delete;
  // Outside a group: tries `path` now (true with *result when it took the call). Inside one:
  // keeps it for the stream path's record of the call, and returns false.
  template <typename Path>
  bool take(Path&& path, ncclResult_t* result) {
    if (GroupDepth() == 0) return path(result);
    keep(DeviceForm(std::forward<Path>(path)));
    return false;
  }

 private:
  void keep(DeviceForm form);
  DeviceForm form_;
};

// A send's or receive's device-path form (nccl/p2p_device.h), kept like a DeviceForm for the
// grouped call the stream path records next during this API call: a group whose device calls
// are all sends and receives on one communicator and one stream runs them on the device together.
class GroupedP2pForm {
 public:
  explicit GroupedP2pForm(const P2pCall& call);  // kept only inside a group
  ~GroupedP2pForm();
  GroupedP2pForm(const GroupedP2pForm&) = delete;
  GroupedP2pForm& operator=(const GroupedP2pForm&) = delete;

 private:
  P2pCall call_;
};

// The stream path itself (out of line). Sets *result and returns true when the call is a device
// call (submitted, or refused with an error); false for host buffers.
bool SubmitIfDevice(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                    const char* func, std::initializer_list<BufferUse> buffers,
                    const std::function<StreamRun()>& make_run, ncclResult_t* result,
                    const PieceForm& pieces = PieceForm{});
// A braid result on the agent's thread as a Status, with that thread's message.
Status FromResult(braidResult_t r);
// Submits a call whose data moves on the device (StreamAgent's DeviceWork) to `comm`'s stream
// agent, ordered on `stream`. Returns ncclSuccess or the error (nothing queued).
ncclResult_t SubmitDeviceWork(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                              const char* func, std::vector<StreamBuffer> buffers,
                              std::shared_ptr<DeviceWork> work);
// Before a host call on `comm`: waits for its stream-ordered calls (or refuses a host call in a
// group that holds device calls on `comm`). Returns ncclSuccess or the error to return.
ncclResult_t BeforeHostCall(ncclComm_t comm, const char* func);
// True when the active device runtime says `p` is device (or managed) memory.
inline bool IsDeviceBuffer(const void* p) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt || !p) return false;
  auto info = ClassifyBuffer(rt, p);
  return info.ok() && info->onDevice();
}

// A staged call's temporary host memory (an in-place all-to-all's copy of its input), for as long
// as braid may read it: inside a group's job on the agent, braid only records the call and runs it
// at the group's end, so the memory is kept until then; otherwise the call has run and it goes now.
void KeepUntilGroupRuns(std::unique_ptr<char[]> p);

// Set while any communicator has a stream agent: host calls then check for one.
bool AnyStreamAgent();

// Elements per piece of an element-wise call of `count` elements of `elt_size` bytes on `comm`
// (0: run it whole): the communicator's BRAID_STAGING_CHUNK_BYTES (rank 0's, agreed at init) in
// whole elements, when the call is larger. Every path cuts alike (the stream path, groups, host
// buffers), so that ranks whose buffers or grouping differ still run the same collectives.
size_t PieceElements(ncclComm_t comm, size_t count, size_t elt_size);

// `fn(first, n)` for each piece of `per` elements of `count` (the whole when `per` is 0), in
// order, up to the first error.
template <typename Fn>
braidResult_t RunPieces(size_t count, size_t per, Fn&& fn) {
  if (per == 0) return fn(size_t{0}, count);
  for (size_t first = 0; first < count; first += per) {
    const braidResult_t r = fn(first, std::min(per, count - first));
    if (r != braidSuccess) return r;
  }
  return braidSuccess;
}

// The map of a host-buffer call: every pointer is the host's already (HostPointers' interface).
struct OwnPointers {
  void* operator()(const void* p) const { return const_cast<void*>(p); }
};

// The staging figures of `comm`'s stream agent (tests); all zero before its first device call.
StreamAgent::StagingStats StagingStatsOf(ncclComm_t comm);

// Returns true (with *result) when the call was taken by the stream path. `run` is only turned
// into a StreamRun for a device call, so a host call costs one atomic load without a device
// runtime, and a classification per buffer with one.
// `piece` (optional): the call's PieceRun form, for element-wise collectives of `count` elements
// of `elt_size` bytes.
template <typename Run, typename Piece = std::nullptr_t>
bool TakeStreamPath(ncclComm_t comm, cudaStream_t stream, const char* func,
                    std::initializer_list<BufferUse> buffers, Run&& run, ncclResult_t* result,
                    size_t count = 0, size_t elt_size = 0, Piece&& piece = nullptr) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt) return false;
  PieceForm form;
  if constexpr (!std::is_same_v<std::decay_t<Piece>, std::nullptr_t>) {
    form.count = count;
    form.elt_size = elt_size;
    form.make = [&]() -> PieceRun { return PieceRun(std::forward<Piece>(piece)); };
  }
  if (SubmitIfDevice(
          rt, comm, stream, func, buffers,
          [&]() -> StreamRun { return StreamRun(std::forward<Run>(run)); }, result, form))
    return true;
  if (AnyStreamAgent() || GroupDepth() > 0) {
    *result = BeforeHostCall(comm, func);
    if (*result != ncclSuccess) return true;
  }
  return false;
}

// An element-wise collective (all-reduce, reduce, broadcast) written once: `call(map, first, n)`
// runs its elements [first, first + n) with every buffer pointer passed through `map`. On device
// buffers it takes the stream path (whole, or in pieces with copies of their own); otherwise it
// runs on the host buffers, cut as PieceElements says.
template <typename Call>
ncclResult_t RunElementWise(ncclComm_t comm, cudaStream_t stream, const char* func,
                            std::initializer_list<BufferUse> buffers, size_t count, size_t elt_size,
                            const Call& call) {
  ncclResult_t result;
  if (TakeStreamPath(
          comm, stream, func, buffers,
          [call, count](const HostPointers& h) { return call(h, size_t{0}, count); }, &result,
          count, elt_size,
          [call](const HostPointers& h, size_t first, size_t n) { return call(h, first, n); }))
    return result;
  return FromBraid(RunPieces(count, PieceElements(comm, count, elt_size),
                             [&](size_t first, size_t n) { return call(OwnPointers{}, first, n); }),
                   func);
}

// ncclGroupEnd's part: at the outermost level, submits the group's device calls (per
// communicator). Returns the first error.
ncclResult_t SubmitGroupStreamCalls();
// Drops the group's device calls (a group ended with an error before running them).
void DiscardGroupStreamCalls();

// Communicator life cycle. Finalize waits for the agent's calls; destroy takes the agent (its
// destructor waits for them); abort takes it, aborts it, aborts the communicator (so a call
// already running returns) and only then destroys it. GetAsyncError reports the agent's kept
// error.
ncclResult_t DrainStreamAgent(ncclComm_t comm);
// Aborts the agent (queued calls fail, their streams released) but keeps it: ncclCommRevoke.
void AbortStreamAgent(ncclComm_t comm, const char* why);
// Detaches the agent and stops it (StreamAgent::shutdown) whoever else holds a reference:
// destroy (abort = false: the queued calls run first) and abort.
void ShutdownStreamAgent(ncclComm_t comm, bool abort, const char* why);
// ncclRedOpDestroy of an operator that stream-ordered calls queued (or collected in the open
// group) may still use: destroyed on the agent's thread after them. False when no such call can
// exist (destroy it now).
bool DestroyRedOpAfterQueued(ncclComm_t comm, ncclRedOp_t op);
std::shared_ptr<StreamAgent> DetachStreamAgent(ncclComm_t comm);
// braidSuccess, or the status of the first stream-ordered call of `comm` that failed (its message
// into *message).
braidResult_t StreamAgentError(ncclComm_t comm, std::string* message);

}  // namespace braid::nccl
