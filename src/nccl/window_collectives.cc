// Collectives on peer windows (nccl/peer_windows.h): the intra-node GPU path of issue 39, where
// each rank reads and writes its peers' device buffers directly (CUDA IPC mappings made at window
// registration) instead of staging through the host. Only ncclAllReduce so far.
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

// What every rank must agree on.
struct CallRecord {
  uint64_t send_window = 0, send_offset = 0;
  uint64_t recv_window = 0, recv_offset = 0;
  uint64_t count = 0;
  int32_t type = 0, op = 0;
  bool operator==(const CallRecord&) const = default;
};

Status AgentStatus(braidResult_t r, const char* what) {
  if (r == braidSuccess) return Status::Ok();
  const char* m = braidGetLastError(nullptr);
  return Status::Error(static_cast<ErrorClass>(r),
                       std::string(what) + ": " + (m && *m ? m : braidGetErrorString(r)));
}

std::string Describe(const CallRecord& c) {
  return "send at offset " + std::to_string(c.send_offset) + " of window " +
         std::to_string(c.send_window) + ", receive at offset " + std::to_string(c.recv_offset) +
         " of window " + std::to_string(c.recv_window) + ", count " + std::to_string(c.count) +
         ", type " + std::to_string(c.type) + ", op " + std::to_string(c.op);
}

}  // namespace

bool WindowAllReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                     ncclResult_t* result) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (!rt || !rt->peerReduceAvailable() || GroupDepth() > 0 || count == 0) return false;
  // Sum, prod, max, min and avg (pre-multiplied sums stage).
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= static_cast<int>(ncclNumOps))
    return false;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  WindowSpan send, recv;
  if (!FindWindow(comm, sendbuff, bytes, &send) || !FindWindow(comm, recvbuff, bytes, &recv) ||
      !send.everyPeerMapped() || !recv.everyPeerMapped() || send.peer.size() != recv.peer.size())
    return false;
  // Device memory only (a one-rank window of host memory maps "every peer" too).
  std::vector<StreamBuffer> buffers;
  for (const auto& [p, rd, wr] : {std::tuple<const void*, bool, bool>{sendbuff, true, false},
                                  std::tuple<const void*, bool, bool>{recvbuff, false, true}}) {
    auto info = ClassifyBuffer(rt, p);
    if (!info.ok() || !info->onDevice()) return false;  // the staged path reports an error
    buffers.push_back(StreamBuffer{p, bytes, rd, wr, *info});
  }
  int rank = -1, nranks = -1;
  CommShape(comm, &rank, &nranks);
  if (rank < 0 || static_cast<size_t>(nranks) != send.peer.size()) return false;

  // This rank's segment: whole 64-byte groups of elements.
  const size_t group = 64 / elt;
  const size_t per = ((count + nranks - 1) / nranks + group - 1) / group * group;
  const size_t lo = std::min(count, per * static_cast<size_t>(rank));
  const size_t n = std::min(count, lo + per) - lo;
  device::PeerReduce r;
  r.type = static_cast<DataType>(datatype);
  r.op = op == ncclAvg ? ReduceOp::kSum : static_cast<ReduceOp>(op);
  r.divide_by = op == ncclAvg ? static_cast<uint64_t>(nranks) : 0;
  r.count = n;
  for (int k = 0; k < nranks; ++k) {
    r.src.push_back(static_cast<const char*>(send.peer[k]) + send.offset + lo * elt);
    r.dst.push_back(static_cast<char*>(recv.peer[k]) + recv.offset + lo * elt);
  }
  CallRecord mine{send.id,
                  send.offset,
                  recv.id,
                  recv.offset,
                  count,
                  static_cast<int32_t>(datatype),
                  static_cast<int32_t>(op)};

  auto work = std::make_shared<DeviceWork>();
  work->queue = [rt, r](device::StreamHandle s, const uint32_t* skip, uint32_t value) mutable {
    r.skip = skip;
    r.skip_value = value;
    return rt->launchPeerReduce(r, s);
  };
  work->agree = [comm, mine, nranks]() -> Status {
    std::vector<CallRecord> all(static_cast<size_t>(nranks));
    BRAID_RETURN_IF_ERROR(
        AgentStatus(braidAllGather(&mine, all.data(), sizeof(CallRecord), braidUint8, B(comm)),
                    "exchanging the call's windows"));
    for (int k = 1; k < nranks; ++k)
      if (!(all[k] == all[0]))
        return InvalidUsage(
            "on symmetric windows every rank must make the same call with its "
            "buffers at the same offsets of the same windows: rank 0 has " +
            Describe(all[0]) + "; rank " + std::to_string(k) + " has " + Describe(all[k]));
    return Status::Ok();
  };
  work->finish = [comm]() -> Status {
    return AgentStatus(braidBarrier(B(comm)), "waiting for every rank's device work");
  };
  g_calls.fetch_add(1, std::memory_order_relaxed);
  *result =
      SubmitDeviceWork(rt, comm, stream, "ncclAllReduce", std::move(buffers), std::move(work));
  return true;
}

uint64_t WindowAllReduceCalls() {
  return g_calls.load(std::memory_order_relaxed);
}

}  // namespace braid::nccl
