// Collectives on the device over peers' buffers: the intra-node GPU path of issue 39, where each
// rank reads and writes its peers' device buffers directly instead of staging through the host.
// The buffers are reached through peer windows (nccl/peer_windows.h: CUDA IPC mappings made at
// window registration, pointers known when the call is made) or, for buffers outside windows,
// through peer buffers (nccl/peer_buffers.h: mappings made per call and cached, pointers bound
// late, once the ranks have exchanged them). All-reduce, all-gather, reduce-scatter,
// broadcast, reduce, all-to-all, gather and scatter, each one peer-reduce kernel per rank
// (device::PeerReduce: sources reduced in rank order, written to every destination; pairwise for
// all-to-all, each source copied to its destination):
//   all-gather      rank r pushes its block into block r of every rank's output (one source;
//                   the output must be in a window on every rank);
//   reduce-scatter  rank r pulls block r of every rank's input, reduced, into its output (the
//                   input must be in a window on every rank);
//   broadcast       the root pushes its input into every rank's output (in windows);
//   reduce          the root pulls every rank's input (in windows), reduced, into its output;
//   all-to-all      rank r pushes block j of its input into block r of rank j's output, one
//                   pairwise kernel (the output in a window on every rank; in place, the input
//                   is first copied to device scratch, nccl/device_scratch.h);
//   gather          rank r pushes its input into block r of the root's output;
//   scatter         rank r pulls block r of the root's input into its output;
//   all-reduce      as below.
// Gather and scatter share one rank's buffer (the root's), which the other ranks do not pass, so
// they take the peer-buffer path even on windows: the exchange tells every rank where the root's
// buffer is (a window's allocation is already mapped, and the map counts one more user).
// A rank that stages instead (its buffers host memory, say) runs a staged gather or scatter as
// sends and receives: against this path's exchange (a collective) the two are in a deadlock,
// which the core finds within about a second and fails on every rank as a call mismatch
// (Engine::p2pDeadlock), or, where the staged rank's send leaves at once, which the root's
// exchange fails on; never a hang.
//
// All-reduce: rank r takes segment r of the buffer (whole 64-byte groups of elements, so a GPU
// kernel's vector loads stay aligned), reduces it over every rank's input in rank order and writes
// the result into every rank's output: one pass over the data per rank, 2 x bytes of device
// memory traffic per rank (a staged path moves every byte over PCIe twice and reduces on the CPU).
// Segments are disjoint, so in place is safe: a segment is read and written by one rank only.
//
// The ranks must agree before any of them touches another's memory: the call's device work
// waits for `go`, which each rank's agent writes after an exchange (the ranks' windows, offsets,
// count, type and op; symmetric windows require every rank's buffers at the same offsets, as in
// NCCL) has shown that every rank makes the same call. Otherwise every rank's work is told to
// skip and the call fails on every rank (ncclInvalidUsage). After its work, each agent waits at a
// barrier for every rank's work to end before it writes `done`, since the others write into its
// output.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "nccl/device_scratch.h"
#include "nccl/known_buffers.h"
#include "nccl/peer_buffers.h"
#include "nccl/peer_reduce_plan.h"
#include "nccl/peer_windows.h"
#include "nccl/stream_path.h"

namespace braid::nccl {

namespace {

std::atomic<uint64_t> g_calls{0};
std::atomic<bool> g_stage_all{false};

// How a call reaches its peers' buffers.
enum class PeerPath : int32_t { kWindows = 1, kPeerBuffers = 2 };

// What every rank must agree on (a buffer not in a window, which only its rank touches: 0, 0).
struct CallRecord {
  int32_t kind = 0, type = 0, op = 0, root = 0;
  int32_t path = 0, pad = 0;
  uint64_t send_window = 0, send_offset = 0;
  uint64_t recv_window = 0, recv_offset = 0;
  uint64_t count = 0;
  bool operator==(const CallRecord&) const = default;
};

// One rank's part of the agreement: the call, and on the peer-buffer path where its shared
// buffers are. One all-gather of bytes carries it.
struct Exchanged {
  CallRecord call;
  PeerBufferRecord send, recv;
  int32_t pid = 0, pad = 0;
};

// After the peer-buffer path's mappings: whether each rank mapped what it had to.
struct MapOutcome {
  int32_t ok = 1;
  char reason[188] = {};
};

std::string Describe(const CallRecord& c) {
  std::string s = KindName(c.kind);
  s += c.path == static_cast<int32_t>(PeerPath::kWindows) ? " on windows"
                                                          : " on buffers outside windows";
  if (c.send_window)
    s += ", send at offset " + std::to_string(c.send_offset) + " of window " +
         std::to_string(c.send_window);
  if (c.recv_window)
    s += ", receive at offset " + std::to_string(c.recv_offset) + " of window " +
         std::to_string(c.recv_window);
  return s + ", count " + std::to_string(c.count) + ", type " + std::to_string(c.type) + ", op " +
         std::to_string(c.op) + ", root " + std::to_string(c.root);
}

// The runtime when a call may take a device path at all, else null.
device::DeviceRuntime* WindowRuntime(size_t count) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt || !rt->peerReduceAvailable() || GroupDepth() > 0 || count == 0) return nullptr;
  return rt;
}

// Sum, prod, max, min and avg (pre-multiplied sums stage).
bool BuiltInOp(ncclRedOp_t op) {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < static_cast<int>(ncclNumOps);
}

// The call's buffers as the agent checks them, when every buffer this rank uses is device memory
// (a window of host memory on one rank maps "every peer" too); false otherwise (the staged path
// takes the call).
bool DeviceBuffers(device::DeviceRuntime* rt, const Plan& c, std::vector<StreamBuffer>* out) {
  for (const auto& [p, bytes, rd, wr] :
       {std::tuple<const void*, size_t, bool, bool>{c.usesSend() ? c.send : nullptr, c.sendBytes(),
                                                    true, false},
        std::tuple<const void*, size_t, bool, bool>{c.usesRecv() ? c.recv : nullptr, c.recvBytes(),
                                                    false, true}}) {
    if (!p) continue;
    auto info = ClassifyBuffer(rt, p);
    if (!info.ok() || !info->onDevice()) return false;
    out->push_back(StreamBuffer{p, bytes, rd, wr, *info});
  }
  return true;
}

// The shared buffer `p` in a window mapped on every rank.
bool InWindow(ncclComm_t comm, const void* p, size_t bytes, int nranks, WindowSpan* out) {
  return FindWindow(comm, p, bytes, out) && out->everyPeerMapped() &&
         static_cast<size_t>(nranks) == out->peer.size();
}

template <size_t N>
void SetReason(char (&dst)[N], const std::string& s) {
  std::snprintf(dst, N, "%s", s.c_str());
}

// The agreement both paths share: one all-gather of every rank's part; every rank must make the
// same call.
Status ExchangeCall(ncclComm_t comm, const Exchanged& mine, int nranks,
                    std::vector<Exchanged>* all) {
  all->assign(static_cast<size_t>(nranks), Exchanged{});
  BRAID_RETURN_IF_ERROR(
      FromResult(braidAllGather(&mine, all->data(), sizeof(Exchanged), braidUint8, B(comm)))
          .prepend("exchanging the call's buffers: "));
  for (int k = 1; k < nranks; ++k)
    if (!((*all)[k].call == (*all)[0].call))
      return InvalidUsage(
          "call mismatch on the device: every rank must make the same call (on symmetric "
          "windows with its "
          "buffers at the same offsets of the same windows): rank 0 has " +
          Describe((*all)[0].call) + "; rank " + std::to_string(k) + " has " +
          Describe((*all)[k].call));
  return Status::Ok();
}

Status Barrier(ncclComm_t comm) {
  return FromResult(braidBarrier(B(comm))).prepend("waiting for every rank's device work: ");
}

// A refusal on this rank alone after it chose the device path, as every rank did (each decides
// alike): the peers' calls may be queued, waiting for this rank's part. The communicator is
// revoked, so that they fail within milliseconds instead of at BRAID_TIMEOUT or, worse, taking
// this rank's next call for this one.
ncclResult_t RefuseChosen(ncclComm_t comm, ncclResult_t code, const std::string& why) {
  (void)braidCommRevoke(B(comm));
  return Fail(code, why);
}

// The copy of an in-place all-to-all's input into its scratch (Plan::copy_from), else nothing.
std::function<Status(device::StreamHandle)> CopyInput(device::DeviceRuntime* rt, const Plan& c) {
  if (!c.copy_from) return nullptr;
  return [rt, dst = const_cast<void*>(c.send), src = c.copy_from,
          bytes = c.sendBytes()](device::StreamHandle s) {
    return rt->copyAsync(dst, src, bytes, s).prepend("copying an in-place all-to-all's input: ");
  };
}

// An in-place all-to-all sends from a copy of its input (each rank's pushes would overwrite
// blocks its peers have not sent yet): the communicator's device scratch becomes the input, which
// only this rank reads (an all-to-all's input is not shared). False (with *result, the
// communicator revoked) when the scratch cannot be allocated.
bool SendFromScratch(device::DeviceRuntime* rt, ncclComm_t comm, Plan* c,
                     std::vector<StreamBuffer>* buffers, const char* func, ncclResult_t* result) {
  if (c->kind != WindowKind::kAllToAll || c->send != c->recv) return true;
  auto scratch = DeviceScratch(comm, rt, c->sendBytes());
  auto info =
      scratch.ok() ? ClassifyBuffer(rt, *scratch) : Result<device::PointerInfo>(scratch.status());
  if (!info.ok()) {
    *result = RefuseChosen(comm, ncclUnhandledCudaError,
                           std::string(func) + ": " + info.status().message());
    return false;
  }
  c->copy_from = c->send;
  c->send = *scratch;
  for (StreamBuffer& b : *buffers)
    if (b.read) b = StreamBuffer{*scratch, c->sendBytes(), true, false, *info};
  return true;
}

// Windows: the pointers are known now; `r` is queued as it is.
ncclResult_t SubmitWindowCall(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                              const char* func, device::PeerReduce r, CallRecord call,
                              const Plan& plan, std::vector<StreamBuffer> buffers) {
  const int nranks = plan.nranks;
  auto work = std::make_shared<DeviceWork>();
  work->prepare = CopyInput(rt, plan);
  work->queue = [rt, r](device::StreamHandle s, const uint32_t* skip, uint32_t value) mutable {
    if (r.count == 0) return Status::Ok();  // a rank with nothing to move (not the root)
    r.skip = skip;
    r.skip_value = value;
    return rt->launchPeerReduce(r, s);
  };
  Exchanged mine;
  mine.call = call;
  mine.pid = static_cast<int32_t>(getpid());
  work->agree = [comm, mine, nranks]() -> Status {
    std::vector<Exchanged> all;
    return ExchangeCall(comm, mine, nranks, &all);
  };
  work->finish = [comm]() { return Barrier(comm); };
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return SubmitDeviceWork(rt, comm, stream, func, std::move(buffers), std::move(work));
}

// Peer buffers: the kernel is queued now with a host-mapped table its pointers will be in; the
// agent fills it once the ranks have exchanged where their buffers are and mapped what is new.
ncclResult_t SubmitPeerBufferCall(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                                  const char* func, const Plan& plan, Exchanged mine,
                                  std::vector<StreamBuffer> buffers) {
  PeerPointerPool& pool = PeerPointerPool::For(rt);
  auto table = pool.acquire();
  if (!table.ok())
    return RefuseChosen(comm, ncclUnhandledCudaError,
                        std::string(func) + ": " + table.status().message());
  device::PeerPointers* t = *table;
  // The shape of this rank's work (how many sources and destinations), from stand-in pointers.
  char stand_in = 0;
  const PeerAt any = [&](int) { return &stand_in; };
  const device::PeerReduce shape = Build(plan, any, any);
  device::PeerReduce r = shape;
  r.late = t;
  r.late_src = static_cast<int>(shape.src.size());
  r.late_dst = static_cast<int>(shape.dst.size());
  r.src.clear();
  r.dst.clear();
  std::shared_ptr<PeerAllocationCache> cache = PeerCacheFor(comm, rt, plan.rank);
  auto work = std::make_shared<DeviceWork>();
  work->prepare = CopyInput(rt, plan);
  work->queue = [rt, r](device::StreamHandle s, const uint32_t* skip, uint32_t value) mutable {
    if (r.count == 0) return Status::Ok();
    r.skip = skip;
    r.skip_value = value;
    return rt->launchPeerReduce(r, s);
  };
  work->agree = [comm, mine, plan, cache, t]() -> Status {
    std::vector<Exchanged> all;
    BRAID_RETURN_IF_ERROR(ExchangeCall(comm, mine, plan.nranks, &all));
    std::vector<std::vector<PeerBufferRecord>> records(all.size());
    std::vector<int32_t> pids(all.size());
    for (size_t k = 0; k < all.size(); ++k) {
      records[k] = {all[k].send, all[k].recv};
      pids[k] = all[k].pid;
    }
    // Replicated: every rank learns alike whether some rank has something new to map.
    if (cache->note(records, pids)) {
      MapOutcome outcome;
      Status st = cache->mapNew();
      if (!st.ok()) {
        outcome.ok = 0;
        SetReason(outcome.reason, st.message());
      }
      std::vector<MapOutcome> outcomes(all.size());
      Status ex = FromResult(
          braidAllGather(&outcome, outcomes.data(), sizeof(MapOutcome), braidUint8, B(comm)));
      bool everyone = ex.ok();
      std::string why = ex.ok() ? "" : ex.message();
      for (size_t k = 0; k < outcomes.size() && everyone; ++k)
        if (!outcomes[k].ok) {
          everyone = false;
          why = "rank " + std::to_string(k) + " " +
                std::string(outcomes[k].reason,
                            strnlen(outcomes[k].reason, sizeof(outcomes[k].reason)));
        }
      cache->settle(everyone);
      if (!everyone) return SystemError(why);
    }
    const auto at = [&](bool send) {
      return [&, send](int k) -> char* {
        const Exchanged& e = all[static_cast<size_t>(k)];
        void* own = send ? const_cast<void*>(plan.send) : plan.recv;
        return static_cast<char*>(cache->where(k, send ? e.send : e.recv, e.pid, own));
      };
    };
    device::PeerReduce bound = Build(plan, at(true), at(false));
    for (size_t k = 0; k < bound.src.size(); ++k) {
      if (!bound.src[k]) return InternalError("a peer's input is not mapped");
      t->src[k] = bound.src[k];
    }
    for (size_t k = 0; k < bound.dst.size(); ++k) {
      if (!bound.dst[k]) return InternalError("a peer's output is not mapped");
      t->dst[k] = bound.dst[k];
    }
    // Published by the agent's release of `go` (hostWriteFlag), which the kernel waits for.
    return Status::Ok();
  };
  work->finish = [comm]() { return Barrier(comm); };
  work->released = [&pool, t](bool ended) {
    if (ended) pool.release(t);  // else a kernel may still read it: never reused
  };
  CountPeerBufferCall();
  return SubmitDeviceWork(rt, comm, stream, func, std::move(buffers), std::move(work));
}

// Every collective's way onto the device: true (with *result) when the call took a device path,
// false when it stages.
bool OnDevice(ncclComm_t comm, Plan c, cudaStream_t stream, const char* func,
              ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(c.count);
  if (!rt || (c.reduces() && !BuiltInOp(c.op)) || g_stage_all.load(std::memory_order_relaxed))
    return false;
  CommShape(comm, &c.rank, &c.nranks);
  if (c.rank < 0 || c.nranks < 1 || c.nranks > device::kMaxPeerRanks) return false;
  std::vector<StreamBuffer> buffers;
  if (!DeviceBuffers(rt, c, &buffers)) return false;
  CallRecord call;
  call.kind = static_cast<int32_t>(c.kind);
  call.type = static_cast<int32_t>(c.type);
  call.op = c.reduces() ? static_cast<int32_t>(c.op) : 0;
  call.root = c.kind == WindowKind::kBroadcast || c.kind == WindowKind::kReduce || c.rootOnly()
                  ? c.root
                  : 0;
  call.count = c.count;

  // Windows: every shared buffer in a window mapped on every rank.
  WindowSpan send, recv;
  if (!c.rootOnly() &&
      (!c.sharesSend() || InWindow(comm, c.send, c.sendBytes(), c.nranks, &send)) &&
      (!c.sharesRecv() || InWindow(comm, c.recv, c.recvBytes(), c.nranks, &recv))) {
    call.path = static_cast<int32_t>(PeerPath::kWindows);
    if (c.sharesSend()) {
      call.send_window = send.id;
      call.send_offset = send.offset;
    }
    if (c.sharesRecv()) {
      call.recv_window = recv.id;
      call.recv_offset = recv.offset;
    }
    const PeerAt send_of = [&](int k) {
      return static_cast<char*>(send.peer[static_cast<size_t>(k)]) + send.offset;
    };
    const PeerAt recv_of = [&](int k) {
      return static_cast<char*>(recv.peer[static_cast<size_t>(k)]) + recv.offset;
    };
    if (SendFromScratch(rt, comm, &c, &buffers, func, result))
      *result = SubmitWindowCall(rt, comm, stream, func, Build(c, send_of, recv_of), call, c,
                                 std::move(buffers));
    return true;
  }

  // Peer buffers: a one-node communicator whose ranks could map each other's device memory at
  // init, and shared buffers this rank can export.
  {
    CommRef ref = LookupComm(B(comm));
    if (!ref || !ref->deviceIpc() || ref->layout().nnodes != 1) return false;
  }
  Exchanged mine;
  mine.call = call;
  mine.call.path = static_cast<int32_t>(PeerPath::kPeerBuffers);
  mine.pid = static_cast<int32_t>(getpid());
  // The buffers this rank uses (DeviceBuffers: its input, which it reads, then its output): a
  // shared one goes into the exchange. Gather and scatter share the root's buffer alone, but
  // every rank decides alike, on whether every buffer it uses could be shared (the root's input
  // of a gather, its output of a scatter, each other rank's one buffer): ranks on one kind of
  // allocation (managed memory, cuMem/VMM, which export nothing) then all stage, as for the other
  // collectives, instead of the others taking this path against a staged root (which the core
  // fails as a deadlock). Those records are not sent: nothing more is mapped.
  for (const StreamBuffer& b : buffers) {
    PeerBufferRecord* rec =
        b.read ? (c.sendShared() ? &mine.send : nullptr) : (c.recvShared() ? &mine.recv : nullptr);
    PeerBufferRecord unsent;
    if (!rec && !c.rootOnly()) continue;
    if (!MakePeerBufferRecord(rt, b.ptr, b.info, rec ? rec : &unsent)) return false;
  }
  if (SendFromScratch(rt, comm, &c, &buffers, func, result))
    *result = SubmitPeerBufferCall(rt, comm, stream, func, c, mine, std::move(buffers));
  return true;
}

Plan MakePlan(WindowKind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
              ncclRedOp_t op, int root) {
  Plan c;
  c.kind = kind;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.type = type;
  c.op = op;
  c.root = root;
  return c;
}

}  // namespace

bool WindowAllReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                     ncclResult_t* result) {
  return OnDevice(comm,
                  MakePlan(WindowKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0),
                  stream, "ncclAllReduce", result);
}

bool WindowAllGather(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                     ncclDataType_t datatype, cudaStream_t stream, ncclResult_t* result) {
  return OnDevice(
      comm, MakePlan(WindowKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0),
      stream, "ncclAllGather", result);
}

bool WindowReduceScatter(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                         ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                         ncclResult_t* result) {
  return OnDevice(
      comm, MakePlan(WindowKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0),
      stream, "ncclReduceScatter", result);
}

bool WindowBroadcast(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result) {
  return OnDevice(
      comm, MakePlan(WindowKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root),
      stream, "ncclBroadcast", result);
}

bool WindowReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, ncclRedOp_t op, int root, cudaStream_t stream,
                  ncclResult_t* result) {
  return OnDevice(comm,
                  MakePlan(WindowKind::kReduce, sendbuff, recvbuff, count, datatype, op, root),
                  stream, "ncclReduce", result);
}

bool WindowAllToAll(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t datatype, cudaStream_t stream, ncclResult_t* result) {
  // In place, the input is copied to scratch first (SendFromScratch), on the device path as on
  // the staged one: a rank in place and one out of place decide alike.
  return OnDevice(comm,
                  MakePlan(WindowKind::kAllToAll, sendbuff, recvbuff, count, datatype, ncclSum, 0),
                  stream, "ncclAlltoAll", result);
}

bool WindowGather(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result) {
  return OnDevice(comm,
                  MakePlan(WindowKind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root),
                  stream, "ncclGather", result);
}

bool WindowScatter(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                   ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result) {
  return OnDevice(
      comm, MakePlan(WindowKind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root),
      stream, "ncclScatter", result);
}

void StageDeviceCallsForTesting(bool on) {
  g_stage_all.store(on, std::memory_order_relaxed);
}

bool StagingDeviceCallsForTesting() {
  return g_stage_all.load(std::memory_order_relaxed);
}

uint64_t WindowCalls() {
  return g_calls.load(std::memory_order_relaxed);
}

}  // namespace braid::nccl
