// Collectives and point-to-point calls of the NCCL API. Most map 1:1 onto braid's; gather and
// scatter, which braid has no collective for, are groups of braid sends and receives.
//
// Host buffers: the stream is ignored and the call has completed when it returns (inside a
// group, at the outermost ncclGroupEnd). Device buffers: the work already queued on the stream
// is waited for first, so the inputs are ready (see cuda_driver.h).
#include <cstdlib>
#include <cstring>
#include <string>

#include "nccl/cuda_driver.h"
#include "nccl/shim.h"

using namespace braid::nccl;

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
  OrderOnStream(stream, sendbuff, recvbuff);
  return FromBraid(braidAllReduce(sendbuff, recvbuff, count, B(datatype), B(op), B(comm)), func);
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
  OrderOnStream(stream, sendbuff, recvbuff);
  return FromBraid(braidReduce(sendbuff, recvbuff, count, B(datatype), B(op), root, B(comm)), func);
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
  OrderOnStream(stream, sendbuff, recvbuff);
  return FromBraid(braidBroadcast(sendbuff, recvbuff, count, B(datatype), root, B(comm)), func);
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
  OrderOnStream(stream, buff, buff);
  return FromBraid(braidBroadcast(buff, buff, count, B(datatype), root, B(comm)), func);
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
  OrderOnStream(stream, sendbuff, recvbuff);
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
  OrderOnStream(stream, sendbuff, recvbuff);
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
  OrderOnStream(stream, sendbuff, recvbuff);
  const void* src = sendbuff;
  if (sendbuff == recvbuff && count > 0 && nranks == 1) return ncclSuccess;  // already in place
  if (sendbuff == recvbuff && count > 0 && nranks > 1) {
    // braid's all-to-all is out of place only; NCCL programs (nccl-tests) also run it in place.
    // Host memory: send from a copy. Device memory: no copy engine here, so refuse.
    if (IsDeviceMemory(recvbuff))
      return Fail(ncclInvalidArgument,
                  std::string(func) +
                      ": in-place all-to-all on device memory is not supported "
                      "by braid; use separate send and receive buffers");
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
  OrderOnStream(stream, sendbuff, recvbuff);
  const size_t elt = TypeSize(datatype);
  const braidDataType_t t = B(datatype);
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return FromBraid(r, func);
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
  return FromBraid(EndGroup(r), func);
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
  OrderOnStream(stream, sendbuff, recvbuff);
  const size_t elt = TypeSize(datatype);
  const braidDataType_t t = B(datatype);
  braidResult_t r = braidGroupStart();
  if (r != braidSuccess) return FromBraid(r, func);
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
  return FromBraid(EndGroup(r), func);
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
  OrderOnStream(stream, sendbuff, nullptr);
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
  OrderOnStream(stream, nullptr, recvbuff);
  return FromBraid(braidRecv(recvbuff, count, B(datatype), peer, B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclRecv,
                (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream))
