// Peer windows (issue 39's intra-node GPU path): ncclCommWindowRegister is collective, so it is
// where the ranks of a node exchange the IPC handles of their windows' device allocations and map
// each other's windows, once, instead of at every call (NCCL's symmetric windows: every rank's
// buffer at the same offset of its window, so a call on window memory knows where its peers'
// buffers are). A rank's window is reachable from another rank on the same node: through the
// device runtime's IPC (another process; counted in device::ProcessPeerMemory, so each peer
// allocation is opened once) or by its own address (a rank of the same process). Ranks on other
// nodes, and host-memory windows, are not mapped (null).
//
// Failures are collective: a rank whose window is bad (outside its allocation) or that cannot map
// a peer's says so in the exchange, and every rank fails the registration with that rank's
// reason, nothing left mapped. Only the argument checks that NCCL makes before any exchange (a
// bad communicator or pointer, a zero size) fail locally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/device_runtime.h"
#include "nccl/shim.h"

namespace braid::nccl {

struct PeerWindows {
  std::vector<void*> peer;                  // per rank: its window here (own rank: buff)
  std::vector<device::IpcHandle> acquired;  // peer allocations held in ProcessPeerMemory
};

// Collective over `comm` (after its stream-ordered calls): exchanges the windows' records and
// maps the reachable ones into *out. ncclSuccess, or every rank's error naming the failing rank.
ncclResult_t MapPeerWindows(ncclComm_t comm, void* buff, size_t size, PeerWindows* out,
                            const char* func);
// Releases what MapPeerWindows acquired (local).
void UnmapPeerWindows(PeerWindows* w);

// Where rank `peer`'s part of window `win` is in this process: null where it is not reachable
// (another node, host memory, or an invalid window or rank).
void* WindowPeerPointer(ncclWindow_t win, int peer);

// A buffer inside a window of its communicator.
struct WindowSpan {
  uint64_t id = 0;          // the window's number on its communicator (the same on every rank)
  size_t offset = 0;        // the buffer's offset in the window
  std::vector<void*> peer;  // every rank's window here (null: not reachable)
  bool everyPeerMapped() const;
};
// The window of `comm` that holds [p, p + bytes), if any.
bool FindWindow(ncclComm_t comm, const void* p, size_t bytes, WindowSpan* out);

// The collectives below take the device path on windows when their shared buffers are in windows
// mapped on every rank, else on peer buffers (nccl/peer_buffers.h) where the communicator allows
// it, else they stage (false).
// ncclAllReduce on buffers in peer windows mapped on every rank (one node, device memory, a
// runtime with the peer-reduce kernel), outside a group: each rank reduces its segment of every
// rank's input on the device and writes it into every rank's output (DeviceWork on the stream
// agent), with no staging through the host. True (with *result) when the call took this path.
bool WindowAllReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                     ncclResult_t* result);
// The same for ncclAllGather (the output in windows: each rank pushes its block into every
// rank's output) and ncclReduceScatter (the input in windows: each rank pulls its block of every
// rank's input, reduced).
bool WindowAllGather(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                     ncclDataType_t datatype, cudaStream_t stream, ncclResult_t* result);
bool WindowReduceScatter(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t recvcount,
                         ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                         ncclResult_t* result);
// ncclBroadcast and ncclBcast (the output in windows: the root pushes its input into every
// rank's output) and ncclReduce (the input in windows: the root pulls every rank's, reduced).
bool WindowBroadcast(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                     ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result);
bool WindowReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, ncclRedOp_t op, int root, cudaStream_t stream,
                  ncclResult_t* result);
// ncclAlltoAll (the output in windows, out of place: each rank pushes block j of its input into
// block `rank` of rank j's output, one pairwise kernel), ncclGather (each rank pushes its input
// into its block of the root's output) and ncclScatter (each rank pulls its block of the root's
// input). Gather and scatter always take the peer-buffer path (only the root passes the shared
// buffer, so the ranks learn where it is in the call's exchange).
bool WindowAllToAll(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t datatype, cudaStream_t stream, ncclResult_t* result);
bool WindowGather(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                  ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result);
bool WindowScatter(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                   ncclDataType_t datatype, int root, cudaStream_t stream, ncclResult_t* result);
// Calls that took a window path in this process (tests).
uint64_t WindowCalls();
// Tests: while on, every call of this process stages (the reference the device paths are
// compared with in one run). Every rank must set it alike, before the same calls.
void StageDeviceCallsForTesting(bool on);
bool StagingDeviceCallsForTesting();

}  // namespace braid::nccl
