// Collectives and point-to-point calls of the NCCL API. Most map 1:1 onto braid's; gather and
// scatter, which braid has no collective for, are groups of braid sends and receives.
//
// Host buffers: the stream is ignored and the call has completed when it returns (inside a
// group, at the outermost ncclGroupEnd). Device buffers: the call is ordered on the stream and
// returns at once (nccl/stream_path.h); each call lists its buffers, what it reads and writes,
// and how to run it on the buffers' host addresses.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/runtime/api_errors.h"
#include "nccl/peer_windows.h"
#include "nccl/shim.h"
#include "nccl/stream_path.h"

using namespace braid::nccl;
using braid::HostPointers;

namespace {

// Checks shared by every call: communicator and data type.
ncclResult_t CheckCommon(ncclComm_t comm, ncclDataType_t datatype, const char* func) {
  NCCL_CHECK(CheckComm(comm, func));
  return CheckType(datatype, func);
}

const char* At(const void* base, size_t index, size_t elt) {
  return static_cast<const char*>(base) + index * elt;
}
char* At(void* base, size_t index, size_t elt) {
  return static_cast<char*>(base) + index * elt;
}

// Ends a group opened by this file, keeping the first failure.
braidResult_t EndGroup(braidResult_t recorded) {
  braidResult_t r = braidGroupEnd();
  return recorded != braidSuccess ? recorded : r;
}

// Gather and scatter as groups of sends and receives (braid has no such collectives), on either
// path.
braidResult_t RunGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, int rank, int nranks) {
  const size_t elt = TypeSize(datatype);
  const braidDataType_t t = B(datatype);
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return r;
  if (rank == root) {
    for (int p = 0; p < nranks && r == braidSuccess; ++p) {
      char* dst = At(recvbuff, static_cast<size_t>(p) * count, elt);
      if (p != root) {
        r = braidRecv(dst, count, t, p, B(comm));
      } else if (dst != sendbuff) {  // in place when sendbuff == recvbuff + root * count
        r = braidSend(sendbuff, count, t, root, B(comm));
        if (r == braidSuccess) r = braidRecv(dst, count, t, root, B(comm));
      }
    }
  } else {
    r = braidSend(sendbuff, count, t, root, B(comm));
  }
  return EndGroup(r);
}

braidResult_t RunScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, int rank, int nranks) {
  const size_t elt = TypeSize(datatype);
  const braidDataType_t t = B(datatype);
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return r;
  if (rank == root) {
    for (int p = 0; p < nranks && r == braidSuccess; ++p) {
      const char* src = At(sendbuff, static_cast<size_t>(p) * count, elt);
      if (p != root) {
        r = braidSend(src, count, t, p, B(comm));
      } else if (src != recvbuff) {  // in place when recvbuff == sendbuff + root * count
        r = braidSend(src, count, t, root, B(comm));
        if (r == braidSuccess) r = braidRecv(recvbuff, count, t, root, B(comm));
      }
    }
  } else {
    r = braidRecv(recvbuff, count, t, root, B(comm));
  }
  return EndGroup(r);
}

// `p` + `bytes`, or null for a null buffer (a non-root's unused one): a piece's pointer.
inline void* At(const void* p, size_t bytes) {
  return p ? static_cast<char*>(const_cast<void*>(p)) + bytes : nullptr;
}

}  // namespace

NCCL_API_EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream) {
  const char* func = "ncclAllReduce";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  NCCL_CHECK(CheckOp(op, func));
  if (count > 0) {
    NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
    NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  }
  // Buffers in peer windows of one node's ranks: reduced on the device, no host staging.
  ncclResult_t on_windows;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowAllReduce(comm, sendbuff, recvbuff, count, datatype, op, stream, r);
          },
          &on_windows))
    return on_windows;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  return RunElementWise(
      comm, stream, func, {{sendbuff, bytes, true, false}, {recvbuff, bytes, false, true}}, count,
      elt, [=](const auto& h, size_t first, size_t n) {
        return braidAllReduce(h(At(sendbuff, first * elt)), h(At(recvbuff, first * elt)), n,
                              B(datatype), B(op), B(comm));
      });
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclAllReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                                         ncclComm_t comm, cudaStream_t stream) {
  const char* func = "ncclReduce";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  NCCL_CHECK(CheckOp(op, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  NCCL_CHECK(CheckRank(root, nranks, "root", func));
  if (count > 0) {
    NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
    // recvbuff may be NULL except on the root.
    if (rank == root) NCCL_CHECK(CheckPtr(recvbuff, "recvbuff (on the root)", func));
  }
  // The input in peer windows of one node's ranks: the root reduces it on the device.
  ncclResult_t on_windows;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowReduce(comm, sendbuff, recvbuff, count, datatype, op, root, stream, r);
          },
          &on_windows))
    return on_windows;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  return RunElementWise(
      comm, stream, func,
      {{sendbuff, bytes, true, false}, {rank == root ? recvbuff : nullptr, bytes, false, true}},
      count, elt, [=](const auto& h, size_t first, size_t n) {
        return braidReduce(h(At(sendbuff, first * elt)), h(At(recvbuff, first * elt)), n,
                           B(datatype), B(op), root, B(comm));
      });
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, int root, ncclComm_t comm,
                                            cudaStream_t stream) {
  const char* func = "ncclBroadcast";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  NCCL_CHECK(CheckRank(root, nranks, "root", func));
  if (count > 0) {
    NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
    // sendbuff is only read on the root.
    if (rank == root) NCCL_CHECK(CheckPtr(sendbuff, "sendbuff (on the root)", func));
  }
  // The output in peer windows of one node's ranks: the root writes it on the device.
  ncclResult_t on_windows;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowBroadcast(comm, sendbuff, recvbuff, count, datatype, root, stream, r);
          },
          &on_windows))
    return on_windows;
  const size_t elt = TypeSize(datatype), bytes = count * elt;
  return RunElementWise(
      comm, stream, func,
      {{rank == root ? sendbuff : nullptr, bytes, true, false}, {recvbuff, bytes, false, true}},
      count, elt, [=](const auto& h, size_t first, size_t n) {
        return braidBroadcast(h(At(sendbuff, first * elt)), h(At(recvbuff, first * elt)), n,
                              B(datatype), root, B(comm));
      });
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclBroadcast,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                        ncclComm_t comm, cudaStream_t stream) {
  const char* func = "ncclBcast";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  NCCL_CHECK(CheckRank(root, nranks, "root", func));
  if (count > 0) NCCL_CHECK(CheckPtr(buff, "buff", func));
  ncclResult_t on_windows;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowBroadcast(comm, buff, buff, count, datatype, root, stream, r);
          },
          &on_windows))
    return on_windows;
  const size_t elt = TypeSize(datatype);
  return RunElementWise(comm, stream, func, {{buff, count * elt, rank == root, rank != root}},
                        count, elt, [=](const auto& h, size_t first, size_t n) {
                          void* p = h(At(buff, first * elt));
                          return braidBroadcast(p, p, n, B(datatype), root, B(comm));
                        });
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclBcast,
                (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                 cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                size_t recvcount, ncclDataType_t datatype,
                                                ncclRedOp_t op, ncclComm_t comm,
                                                cudaStream_t stream) {
  const char* func = "ncclReduceScatter";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  NCCL_CHECK(CheckOp(op, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  if (nranks > 0) NCCL_CHECK(CheckBytes(recvcount, nranks, datatype, func));
  if (recvcount > 0) {
    NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
    NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  }
  const size_t bytes = recvcount * TypeSize(datatype);
  ncclResult_t res;
  // The input in peer windows of one node's ranks: reduced on the device, no host staging.
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowReduceScatter(comm, sendbuff, recvbuff, recvcount, datatype, op, stream,
                                       r);
          },
          &res))
    return res;
  if (nranks > 0 && TakeStreamPath(
                        comm, stream, func,
                        {{sendbuff, bytes * nranks, true, false}, {recvbuff, bytes, false, true}},
                        [=](const HostPointers& h) {
                          return braidReduceScatter(h(sendbuff), h(recvbuff), recvcount,
                                                    B(datatype), B(op), B(comm));
                        },
                        &res))
    return res;
  return FromBraid(braidReduceScatter(sendbuff, recvbuff, recvcount, B(datatype), B(op), B(comm)),
                   func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclReduceScatter,
                (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                            ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream) {
  const char* func = "ncclAllGather";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  if (nranks > 0) NCCL_CHECK(CheckBytes(sendcount, nranks, datatype, func));
  if (sendcount > 0) {
    NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
    NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  }
  const size_t bytes = sendcount * TypeSize(datatype);
  ncclResult_t res;
  // The output in peer windows of one node's ranks: copied on the device, no host staging.
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowAllGather(comm, sendbuff, recvbuff, sendcount, datatype, stream, r);
          },
          &res))
    return res;
  if (nranks > 0 && TakeStreamPath(
                        comm, stream, func,
                        {{sendbuff, bytes, true, false}, {recvbuff, bytes * nranks, false, true}},
                        [=](const HostPointers& h) {
                          return braidAllGather(h(sendbuff), h(recvbuff), sendcount, B(datatype),
                                                B(comm));
                        },
                        &res))
    return res;
  return FromBraid(braidAllGather(sendbuff, recvbuff, sendcount, B(datatype), B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclAllGather,
                (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, ncclComm_t comm,
                                           cudaStream_t stream) {
  const char* func = "ncclAlltoAll";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  if (nranks > 0) NCCL_CHECK(CheckBytes(count, nranks, datatype, func));
  if (count > 0) {
    NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
    NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  }
  const void* src = sendbuff;
  if (sendbuff == recvbuff && count > 0 && nranks == 1) return ncclSuccess;  // already in place
  // braid's all-to-all is out of place only; NCCL programs (nccl-tests) also run it in place,
  // which sends from a copy of the input: on the device path a copy in device scratch, staged
  // or on host memory a host copy.
  const size_t bytes = nranks > 0 ? count * nranks * TypeSize(datatype) : 0;
  ncclResult_t res;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowAllToAll(comm, sendbuff, recvbuff, count, datatype, stream, r);
          },
          &res))
    return res;
  if (TakeStreamPath(
          comm, stream, func, {{sendbuff, bytes, true, false}, {recvbuff, bytes, false, true}},
          [=](const HostPointers& h) {
            void* out = h(recvbuff);
            if (h(sendbuff) != out)
              return braidAllToAll(h(sendbuff), out, count, B(datatype), B(comm));
            // Staged: the input's host copy is the staging buffer itself, so it is copied once
            // more (on the agent's thread, which must not throw).
            std::unique_ptr<char[]> copy(new (std::nothrow) char[bytes]);
            if (!copy)
              return braid::Fail(braid::SystemError(std::string(func) + ": cannot allocate " +
                                                    std::to_string(bytes) +
                                                    " bytes for an in-place copy"));
            std::memcpy(copy.get(), out, bytes);
            const braidResult_t r = braidAllToAll(copy.get(), out, count, B(datatype), B(comm));
            KeepUntilGroupRuns(std::move(copy));
            return r;
          },
          &res))
    return res;
  if (sendbuff == recvbuff && count > 0 && nranks > 1) {
    size_t bytes = count * nranks * TypeSize(datatype);
    void* copy = std::malloc(bytes);
    if (!copy)
      return Fail(ncclSystemError, std::string(func) + ": cannot allocate " +
                                       std::to_string(bytes) + " bytes for an in-place copy");
    std::memcpy(copy, sendbuff, bytes);
    src = copy;
  }
  braidResult_t r = braidAllToAll(src, recvbuff, count, B(datatype), B(comm));
  if (src != sendbuff) FreeAfterGroup(const_cast<void*>(src));
  return FromBraid(r, func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclAlltoAll,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream))

// The checks gather and scatter share: communicator, type, root and size; fills the shape.
static ncclResult_t CheckRooted(ncclComm_t comm, ncclDataType_t datatype, int root, size_t count,
                                const char* func, int* rank, int* nranks) {
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  CommShape(comm, rank, nranks);
  if (*nranks < 0)
    return Fail(ncclInvalidUsage,
                std::string(func) + ": communicator is not ready (init in progress or failed)");
  NCCL_CHECK(CheckRank(root, *nranks, "root", func));
  NCCL_CHECK(CheckBytes(count, *nranks, datatype, func));
  return ncclSuccess;
}

NCCL_API_EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
  const char* func = "ncclGather";
  int rank, nranks;
  NCCL_CHECK(CheckRooted(comm, datatype, root, count, func, &rank, &nranks));
  if (count == 0) return ncclSuccess;
  NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
  if (rank == root) NCCL_CHECK(CheckPtr(recvbuff, "recvbuff (on the root)", func));
  const size_t bytes = count * TypeSize(datatype);
  ncclResult_t res;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowGather(comm, sendbuff, recvbuff, count, datatype, root, stream, r);
          },
          &res))
    return res;
  if (TakeStreamPath(
          comm, stream, func,
          {{sendbuff, bytes, true, false},
           {rank == root ? recvbuff : nullptr, bytes * nranks, false, true}},
          [=](const HostPointers& h) {
            return RunGather(h(sendbuff), h(recvbuff), count, datatype, root, comm, rank, nranks);
          },
          &res))
    return res;
  return FromBraid(RunGather(sendbuff, recvbuff, count, datatype, root, comm, rank, nranks), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGather,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  const char* func = "ncclScatter";
  int rank, nranks;
  NCCL_CHECK(CheckRooted(comm, datatype, root, count, func, &rank, &nranks));
  if (count == 0) return ncclSuccess;
  NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  if (rank == root) NCCL_CHECK(CheckPtr(sendbuff, "sendbuff (on the root)", func));
  const size_t bytes = count * TypeSize(datatype);
  ncclResult_t res;
  GroupedDeviceForm device;
  if (device.take(
          [=](ncclResult_t* r) {
            return WindowScatter(comm, sendbuff, recvbuff, count, datatype, root, stream, r);
          },
          &res))
    return res;
  if (TakeStreamPath(
          comm, stream, func,
          {{rank == root ? sendbuff : nullptr, bytes * nranks, true, false},
           {recvbuff, bytes, false, true}},
          [=](const HostPointers& h) {
            return RunScatter(h(sendbuff), h(recvbuff), count, datatype, root, comm, rank, nranks);
          },
          &res))
    return res;
  return FromBraid(RunScatter(sendbuff, recvbuff, count, datatype, root, comm, rank, nranks), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclScatter,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                       int peer, ncclComm_t comm, cudaStream_t stream) {
  const char* func = "ncclSend";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  NCCL_CHECK(CheckRank(peer, nranks, "peer", func));
  if (count > 0) NCCL_CHECK(CheckPtr(sendbuff, "sendbuff", func));
  ncclResult_t res;
  const P2pCall p2p{true, const_cast<void*>(sendbuff), count, datatype, peer};
  if (GroupDepth() == 0 && P2pOnDevice(comm, stream, {p2p}, &res)) return res;
  GroupedP2pForm grouped(p2p);
  if (TakeStreamPath(
          comm, stream, func, {{sendbuff, count * TypeSize(datatype), true, false}},
          [=](const HostPointers& h) {
            return braidSend(h(sendbuff), count, B(datatype), peer, B(comm));
          },
          &res))
    return res;
  return FromBraid(braidSend(sendbuff, count, B(datatype), peer, B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclSend,
                (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream))

NCCL_API_EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int peer, ncclComm_t comm, cudaStream_t stream) {
  const char* func = "ncclRecv";
  NCCL_CHECK(CheckCommon(comm, datatype, func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  NCCL_CHECK(CheckRank(peer, nranks, "peer", func));
  if (count > 0) NCCL_CHECK(CheckPtr(recvbuff, "recvbuff", func));
  ncclResult_t res;
  const P2pCall p2p{false, recvbuff, count, datatype, peer};
  if (GroupDepth() == 0 && P2pOnDevice(comm, stream, {p2p}, &res)) return res;
  GroupedP2pForm grouped(p2p);
  if (TakeStreamPath(
          comm, stream, func, {{recvbuff, count * TypeSize(datatype), false, true}},
          [=](const HostPointers& h) {
            return braidRecv(h(recvbuff), count, B(datatype), peer, B(comm));
          },
          &res))
    return res;
  return FromBraid(braidRecv(recvbuff, count, B(datatype), peer, B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclRecv,
                (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream))
