// Collectives on peer windows (nccl/peer_windows.h): the intra-node GPU path of issue 39, where
// each rank reads and writes its peers' device buffers directly (CUDA IPC mappings made at window
// registration) instead of staging through the host. All-reduce, all-gather, reduce-scatter,
// broadcast and reduce, each one peer-reduce kernel per rank (device::PeerReduce: sources reduced
// in rank order, written to every destination):
//   all-gather      rank r pushes its block into block r of every rank's output (one source;
//                   the output must be in a window on every rank);
//   reduce-scatter  rank r pulls block r of every rank's input, reduced, into its output (the
//                   input must be in a window on every rank);
//   broadcast       the root pushes its input into every rank's output (in windows);
//   reduce          the root pulls every rank's input (in windows), reduced, into its output;
//   all-reduce      as below.
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
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/comm_registry.h"
#include "nccl/known_buffers.h"
#include "nccl/peer_windows.h"
#include "nccl/stream_path.h"

namespace braid::nccl {

namespace {

std::atomic<uint64_t> g_calls{0};

enum class WindowKind : int32_t {
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kBroadcast = 4,
  kReduce = 5
};
const char* KindName(int32_t k) {
  switch (static_cast<WindowKind>(k)) {
    case WindowKind::kAllReduce:
      return "all-reduce";
    case WindowKind::kAllGather:
      return "all-gather";
    case WindowKind::kReduceScatter:
      return "reduce-scatter";
    case WindowKind::kBroadcast:
      return "broadcast";
    case WindowKind::kReduce:
      return "reduce";
  }
  return "?";
}

// What every rank must agree on (a buffer not in a window, which only its rank touches: 0, 0).
struct CallRecord {
  int32_t kind = 0, type = 0, op = 0, root = 0;
  uint64_t send_window = 0, send_offset = 0;
  uint64_t recv_window = 0, recv_offset = 0;
  uint64_t count = 0;
  bool operator==(const CallRecord&) const = default;
};

std::string Describe(const CallRecord& c) {
  std::string s = KindName(c.kind);
  if (c.send_window)
    s += ", send at offset " + std::to_string(c.send_offset) + " of window " +
         std::to_string(c.send_window);
  if (c.recv_window)
    s += ", receive at offset " + std::to_string(c.recv_offset) + " of window " +
         std::to_string(c.recv_window);
  return s + ", count " + std::to_string(c.count) + ", type " + std::to_string(c.type) + ", op " +
         std::to_string(c.op) + ", root " + std::to_string(c.root);
}

// The record of a call: `send` and `recv` are its windowed buffers (null: one only its rank
// touches, not agreed on).
CallRecord Record(WindowKind kind, ncclDataType_t type, int op, int root, const WindowSpan* send,
                  const WindowSpan* recv, uint64_t count) {
  CallRecord c;
  c.kind = static_cast<int32_t>(kind);
  c.type = static_cast<int32_t>(type);
  c.op = op;
  c.root = root;
  if (send) {
    c.send_window = send->id;
    c.send_offset = send->offset;
  }
  if (recv) {
    c.recv_window = recv->id;
    c.recv_offset = recv->offset;
  }
  c.count = count;
  return c;
}

// The runtime when a call may take a window path at all, else null.
device::DeviceRuntime* WindowRuntime(size_t count) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt || !rt->peerReduceAvailable() || GroupDepth() > 0 || count == 0) return nullptr;
  return rt;
}

// Sum, prod, max, min and avg (pre-multiplied sums stage).
bool BuiltInOp(ncclRedOp_t op) {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < static_cast<int>(ncclNumOps);
}

// The call's buffers as the agent checks them, when both are device memory (a window of host
// memory on one rank maps "every peer" too); false otherwise (the staged path takes the call).
bool DeviceBuffers(device::DeviceRuntime* rt, const void* send, size_t send_bytes, const void* recv,
                   size_t recv_bytes, std::vector<StreamBuffer>* out) {
  for (const auto& [p, bytes, rd, wr] :
       {std::tuple<const void*, size_t, bool, bool>{send, send_bytes, true, false},
        std::tuple<const void*, size_t, bool, bool>{recv, recv_bytes, false, true}}) {
    if (!p) continue;  // a buffer this rank does not use (a broadcast's input off the root)
    auto info = ClassifyBuffer(rt, p);
    if (!info.ok() || !info->onDevice()) return false;
    out->push_back(StreamBuffer{p, bytes, rd, wr, *info});
  }
  return true;
}

// The ranks, when `span` covers them all (one node, every window mapped).
bool Shape(ncclComm_t comm, const WindowSpan& span, int* rank, int* nranks) {
  CommShape(comm, rank, nranks);
  return *rank >= 0 && span.everyPeerMapped() && static_cast<size_t>(*nranks) == span.peer.size();
}

void SetOp(device::PeerReduce* r, ncclRedOp_t op, int nranks) {
  r->op = op == ncclAvg ? ReduceOp::kSum : static_cast<ReduceOp>(op);
  r->divide_by = op == ncclAvg ? static_cast<uint64_t>(nranks) : 0;
}

// Submits `r` as this rank's device work of the call `mine` (StreamAgent's DeviceWork): every
// rank agrees on the call before any touches another's memory, and waits for every rank's work
// to end before its `done`.
ncclResult_t SubmitWindowCall(device::DeviceRuntime* rt, ncclComm_t comm, cudaStream_t stream,
                              const char* func, device::PeerReduce r, CallRecord mine, int nranks,
                              std::vector<StreamBuffer> buffers) {
  auto work = std::make_shared<DeviceWork>();
  work->queue = [rt, r](device::StreamHandle s, const uint32_t* skip, uint32_t value) mutable {
    if (r.count == 0) return Status::Ok();  // a rank with nothing to move (not the root)
    r.skip = skip;
    r.skip_value = value;
    return rt->launchPeerReduce(r, s);
  };
  work->agree = [comm, mine, nranks]() -> Status {
    std::vector<CallRecord> all(static_cast<size_t>(nranks));
    BRAID_RETURN_IF_ERROR(
        FromResult(braidAllGather(&mine, all.data(), sizeof(CallRecord), braidUint8, B(comm)))
            .prepend("exchanging the call's windows: "));
    for (int k = 1; k < nranks; ++k)
      if (!(all[k] == all[0]))
        return InvalidUsage(
            "on symmetric windows every rank must make the same call with its "
            "buffers at the same offsets of the same windows: rank 0 has " +
            Describe(all[0]) + "; rank " + std::to_string(k) + " has " + Describe(all[k]));
    return Status::Ok();
  };
  work->finish = [comm]() -> Status {
    return FromResult(braidBarrier(B(comm))).prepend("waiting for every rank's device work: ");
  };
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return SubmitDeviceWork(rt, comm, stream, func, std::move(buffers), std::move(work));
}

}  // namespace

bool WindowAllReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                     ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(count);
  if (!rt || !BuiltInOp(op)) return false;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  WindowSpan send, recv;
  int rank = -1, nranks = -1;
  std::vector<StreamBuffer> buffers;
  if (!FindWindow(comm, sendbuff, bytes, &send) || !FindWindow(comm, recvbuff, bytes, &recv) ||
      !Shape(comm, send, &rank, &nranks) || !Shape(comm, recv, &rank, &nranks) ||
      !DeviceBuffers(rt, sendbuff, bytes, recvbuff, bytes, &buffers))
    return false;
  // This rank's segment: whole 64-byte groups of elements.
  const size_t group = 64 / elt;
  const size_t per = ((count + nranks - 1) / nranks + group - 1) / group * group;
  const size_t lo = std::min(count, per * static_cast<size_t>(rank));
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  SetOp(&r, op, nranks);
  r.count = std::min(count, lo + per) - lo;
  for (int k = 0; k < nranks; ++k) {
    r.src.push_back(static_cast<const char*>(send.peer[k]) + send.offset + lo * elt);
    r.dst.push_back(static_cast<char*>(recv.peer[k]) + recv.offset + lo * elt);
  }
  const CallRecord mine = Record(WindowKind::kAllReduce, datatype, op, 0, &send, &recv, count);
  *result = SubmitWindowCall(rt, comm, stream, "ncclAllReduce", std::move(r), mine, nranks,
                             std::move(buffers));
  return true;
}

bool WindowAllGather(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                     ncclDataType_t datatype, cudaStream_t stream, ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(sendcount);
  if (!rt) return false;
  const size_t bytes = sendcount * TypeSize(datatype);
  WindowSpan recv;
  int rank = -1, nranks = -1;
  CommShape(comm, &rank, &nranks);
  std::vector<StreamBuffer> buffers;
  if (nranks < 1 || !FindWindow(comm, recvbuff, bytes * nranks, &recv) ||
      !Shape(comm, recv, &rank, &nranks) ||
      !DeviceBuffers(rt, sendbuff, bytes, recvbuff, bytes * nranks, &buffers))
    return false;
  // Push: this rank's block into block `rank` of every rank's output.
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  r.count = sendcount;
  r.src.push_back(sendbuff);
  for (int k = 0; k < nranks; ++k)
    r.dst.push_back(static_cast<char*>(recv.peer[k]) + recv.offset + bytes * rank);
  const CallRecord mine = Record(WindowKind::kAllGather, datatype, 0, 0, nullptr, &recv, sendcount);
  *result = SubmitWindowCall(rt, comm, stream, "ncclAllGather", std::move(r), mine, nranks,
                             std::move(buffers));
  return true;
}

bool WindowReduceScatter(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                         ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                         ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(recvcount);
  if (!rt || !BuiltInOp(op)) return false;
  const size_t bytes = recvcount * TypeSize(datatype);
  WindowSpan send;
  int rank = -1, nranks = -1;
  CommShape(comm, &rank, &nranks);
  std::vector<StreamBuffer> buffers;
  if (nranks < 1 || !FindWindow(comm, sendbuff, bytes * nranks, &send) ||
      !Shape(comm, send, &rank, &nranks) ||
      !DeviceBuffers(rt, sendbuff, bytes * nranks, recvbuff, bytes, &buffers))
    return false;
  // Pull: block `rank` of every rank's input, reduced in rank order, into this rank's output.
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  SetOp(&r, op, nranks);
  r.count = recvcount;
  for (int k = 0; k < nranks; ++k)
    r.src.push_back(static_cast<const char*>(send.peer[k]) + send.offset + bytes * rank);
  r.dst.push_back(recvbuff);
  const CallRecord mine =
      Record(WindowKind::kReduceScatter, datatype, op, 0, &send, nullptr, recvcount);
  *result = SubmitWindowCall(rt, comm, stream, "ncclReduceScatter", std::move(r), mine, nranks,
                             std::move(buffers));
  return true;
}

bool WindowBroadcast(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(count);
  if (!rt) return false;
  const size_t bytes = count * TypeSize(datatype);
  WindowSpan recv;
  int rank = -1, nranks = -1;
  std::vector<StreamBuffer> buffers;
  if (!FindWindow(comm, recvbuff, bytes, &recv) || !Shape(comm, recv, &rank, &nranks) ||
      !DeviceBuffers(rt, rank == root ? sendbuff : nullptr, bytes, recvbuff, bytes, &buffers))
    return false;
  // The root pushes its input into every rank's output; the others move nothing (the input of a
  // rank off the root is not read, and may be anything, so its place cannot be agreed on).
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  if (rank == root) {
    r.count = count;
    r.src.push_back(sendbuff);
    for (int k = 0; k < nranks; ++k)
      r.dst.push_back(static_cast<char*>(recv.peer[k]) + recv.offset);
  }
  const CallRecord mine = Record(WindowKind::kBroadcast, datatype, 0, root, nullptr, &recv, count);
  *result = SubmitWindowCall(rt, comm, stream, "ncclBroadcast", std::move(r), mine, nranks,
                             std::move(buffers));
  return true;
}

bool WindowReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, ncclRedOp_t op, int root, cudaStream_t stream,
                  ncclResult_t* result) {
  device::DeviceRuntime* rt = WindowRuntime(count);
  if (!rt || !BuiltInOp(op)) return false;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  WindowSpan send;
  int rank = -1, nranks = -1;
  std::vector<StreamBuffer> buffers;
  if (!FindWindow(comm, sendbuff, bytes, &send) || !Shape(comm, send, &rank, &nranks) ||
      !DeviceBuffers(rt, sendbuff, bytes, rank == root ? recvbuff : nullptr, bytes, &buffers))
    return false;
  // The root pulls every rank's input, reduced in rank order, into its output.
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  SetOp(&r, op, nranks);
  if (rank == root) {
    r.count = count;
    for (int k = 0; k < nranks; ++k)
      r.src.push_back(static_cast<const char*>(send.peer[k]) + send.offset);
    r.dst.push_back(recvbuff);
  }
  const CallRecord mine = Record(WindowKind::kReduce, datatype, op, root, &send, nullptr, count);
  *result = SubmitWindowCall(rt, comm, stream, "ncclReduce", std::move(r), mine, nranks,
                             std::move(buffers));
  return true;
}

uint64_t WindowCalls() {
  return g_calls.load(std::memory_order_relaxed);
}

}  // namespace braid::nccl
