// Communicator life cycle of the NCCL API: version, unique ids, init, split, shrink, finalize,
// destroy, abort, and the queries.
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "nccl/cuda_driver.h"
#include "nccl/device_scratch.h"
#include "nccl/p2p_device.h"
#include "nccl/shim.h"
#include "nccl/stream_path.h"

using namespace braid::nccl;

static_assert(sizeof(ncclUniqueId) == sizeof(braidUniqueId), "unique ids must have one size");
static_assert(NCCL_SPLIT_NOCOLOR == BRAID_SPLIT_NOCOLOR, "NOCOLOR must be the same value");
static_assert(ncclInProgress == static_cast<int>(braidInProgress), "status codes must match");
static_assert(ncclNumTypes == static_cast<int>(braidNumTypes), "data types must match");
static_assert(ncclNumOps == static_cast<int>(braidNumOps), "reduction ops must match");
static_assert(NCCL_SHRINK_ABORT == 1, "braidCommShrink takes flag 1 for abort");

namespace {

braidUniqueId ToBraid(const ncclUniqueId& id) {
  braidUniqueId b;
  std::memcpy(b.internal, id.internal, sizeof(b.internal));
  return b;
}

// What every communicator creation does first.
void BeforeCommCreation() {
  ApplyNcclEnvironment();
  ProbeCudaDriver();
}

ncclResult_t InitRank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                      const ncclConfig_t* config, const char* func) {
  NCCL_CHECK(CheckPtr(comm, "comm (the output pointer)", func));
  if (nranks < 1)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid nranks " +
                                         std::to_string(nranks) + " (must be >= 1)");
  if (rank < 0 || rank >= nranks)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid rank " + std::to_string(rank) +
                                         " (nranks is " + std::to_string(nranks) + ")");
  braidConfig_t bc;
  NCCL_CHECK(TranslateConfig(config, func, &bc));
  BeforeCommCreation();
  *comm = nullptr;
  return FromBraid(braidCommInitRankConfig(B(comm), nranks, ToBraid(id), rank, &bc), func);
}

}  // namespace

NCCL_API_EXPORT ncclResult_t pncclGetVersion(int* version) {
  NCCL_CHECK(CheckPtr(version, "version", "ncclGetVersion"));
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGetVersion, (int* version))

NCCL_API_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  NCCL_CHECK(CheckPtr(uniqueId, "uniqueId", "ncclGetUniqueId"));
  BeforeCommCreation();
  braidUniqueId b;
  braidResult_t r = braidGetUniqueId(&b);
  if (r == braidSuccess) std::memcpy(uniqueId->internal, b.internal, sizeof(b.internal));
  return FromBraid(r, "ncclGetUniqueId");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))

NCCL_API_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                               int rank) {
  return InitRank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommInitRank,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))

NCCL_API_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config) {
  return InitRank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                 ncclConfig_t* config))

NCCL_API_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                       int nId, ncclUniqueId* commIds,
                                                       ncclConfig_t* config) {
  const char* func = "ncclCommInitRankScalable";
  NCCL_CHECK(CheckPtr(commIds, "commIds", func));
  if (nId < 1 || (nranks >= 1 && nId > nranks))
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid nId " + std::to_string(nId) +
                                         " (must be 1..nranks)");
  // braid's rendezvous is one root serving every rank; the other ids only spread NCCL's
  // bootstrap load, so the first one (the same on every rank) is enough.
  return InitRank(newcomm, nranks, commIds[0], myrank, config, func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommInitRankScalable,
                (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                 ncclConfig_t* config))

NCCL_API_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* func = "ncclCommInitAll";
  NCCL_CHECK(CheckPtr(comms, "comms", func));
  if (ndev < 0)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid ndev " + std::to_string(ndev));
  if (devlist)
    for (int i = 0; i < ndev; ++i)
      if (devlist[i] < 0)
        return Fail(ncclInvalidArgument,
                    std::string(func) + ": invalid device " + std::to_string(devlist[i]));
  if (ndev == 0) return ncclSuccess;
  BeforeCommCreation();
  braidUniqueId id;
  braidResult_t r = braidGetUniqueId(&id);
  if (r != braidSuccess) return FromBraid(r, func);
  // One thread initialises every rank: inits inside a group run concurrently at its end.
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  r = braidGroupStart();
  if (r != braidSuccess) return FromBraid(r, func);
  braidResult_t first = braidSuccess;
  for (int i = 0; i < ndev && first == braidSuccess; ++i)
    first = braidCommInitRank(B(&comms[i]), ndev, id, i);
  r = braidGroupEnd();
  return FromBraid(first != braidSuccess ? first : r, func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

NCCL_API_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* func = "ncclCommSplit";
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(newcomm, "newcomm", func));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid color " +
                                         std::to_string(color) +
                                         " (must be >= 0 or NCCL_SPLIT_NOCOLOR)");
  braidConfig_t bc;
  const braidConfig_t* pbc = nullptr;  // NULL: the new communicator inherits comm's options
  if (config) {
    NCCL_CHECK(TranslateConfig(config, func, &bc));
    pbc = &bc;
  }
  *newcomm = nullptr;
  // The split's all-gather runs on this thread: the stream-ordered calls queued before it must be
  // over, or ranks could match it with a queued collective (every rank's order is the program's).
  NCCL_CHECK(DrainStreamAgent(comm));
  return FromBraid(braidCommSplit(B(comm), color, key, B(newcomm), pbc), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

NCCL_API_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                             int excludeRanksCount, ncclComm_t* newcomm,
                                             ncclConfig_t* config, int shrinkFlags) {
  const char* func = "ncclCommShrink";
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(newcomm, "newcomm", func));
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid shrinkFlags " +
                                         std::to_string(shrinkFlags) +
                                         " (NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)");
  if (excludeRanksCount < 0)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid excludeRanksCount " +
                                         std::to_string(excludeRanksCount));
  if (excludeRanksCount > 0) NCCL_CHECK(CheckPtr(excludeRanksList, "excludeRanksList", func));
  int rank, nranks;
  CommShape(comm, &rank, &nranks);
  for (int i = 0; i < excludeRanksCount; ++i)
    NCCL_CHECK(CheckRank(excludeRanksList[i], nranks, "excluded rank", func));
  braidConfig_t bc;
  const braidConfig_t* pbc = nullptr;
  if (config) {
    NCCL_CHECK(TranslateConfig(config, func, &bc));
    pbc = &bc;
  }
  *newcomm = nullptr;
  // As split: the queued stream-ordered calls first; with NCCL_SHRINK_ABORT they are aborted.
  if (shrinkFlags == NCCL_SHRINK_ABORT)
    AbortStreamAgent(comm, "ncclCommShrink with NCCL_SHRINK_ABORT");
  else
    NCCL_CHECK(DrainStreamAgent(comm));
  return FromBraid(
      braidCommShrink(B(comm), excludeRanksList, excludeRanksCount, B(newcomm), pbc, shrinkFlags),
      func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommShrink,
                (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                 ncclConfig_t* config, int shrinkFlags))

NCCL_API_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  NCCL_CHECK(CheckComm(comm, "ncclCommFinalize"));
  // Stream-ordered calls first (their streams must progress); the agent stops here, whoever
  // holds a reference.
  ShutdownStreamAgent(comm, false, "");
  return FromBraid(braidCommFinalize(B(comm)), "ncclCommFinalize");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

NCCL_API_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL
  // The stream agent finishes the calls queued on it first (NCCL's destroy also waits for them),
  // and stops even when another thread holds a reference to it.
  ShutdownStreamAgent(comm, false, "");
  // As NCCL, a destroy releases the communicator's registrations (and the classifications they
  // kept: the buffers may be freed next).
  DropRegistrations(comm);
  DropDeviceScratch(comm, /*keep=*/false);
  DropP2pDevice(comm, /*keep_mappings=*/false);
  return FromBraid(braidCommDestroy(B(comm)), "ncclCommDestroy");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

NCCL_API_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL
  // Queued stream-ordered calls fail (their streams released), the communicator's abort returns
  // the one running, and only then does the agent's thread end.
  std::shared_ptr<braid::StreamAgent> agent = DetachStreamAgent(comm);
  if (agent) agent->abort("ncclCommAbort");
  ncclResult_t r = FromBraid(braidCommAbort(B(comm)), "ncclCommAbort");
  if (agent) agent->shutdown(true, "ncclCommAbort");  // joins whoever else holds a reference
  // A kernel on peer windows that the abort interrupted may still run on its stream (briefly: it
  // waits for nothing): the windows' mappings are closed after it, or left open if it does not
  // end, rather than unmapped under it.
  const bool device_work_ended =
      !agent || agent->waitDeviceWork(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (!device_work_ended)
    (void)Fail(ncclSuccess,
               "ncclCommAbort: device work on peer windows still runs after 2 s; their "
               "mappings are left open");
  DropRegistrations(comm, /*keep_mappings=*/!device_work_ended);
  DropDeviceScratch(comm, /*keep=*/!device_work_ended);
  DropP2pDevice(comm, /*keep_mappings=*/!device_work_ended);
  return r;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

NCCL_API_EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const char* func = "ncclCommRevoke";
  NCCL_CHECK(CheckComm(comm, func));
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return Fail(ncclInvalidArgument, std::string(func) + ": invalid revokeFlags " +
                                         std::to_string(revokeFlags) +
                                         " (must be NCCL_REVOKE_DEFAULT)");
  // Queued stream-ordered calls fail (their streams released) and the running one returns.
  AbortStreamAgent(comm, "ncclCommRevoke");
  return FromBraid(braidCommRevoke(B(comm)), func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

NCCL_API_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const char* func = "ncclCommGetAsyncError";
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(asyncError, "asyncError", func));
  braidResult_t e = braidSuccess;
  braidResult_t r = braidCommGetAsyncError(B(comm), &e);
  if (r != braidSuccess) return FromBraid(r, func);
  // A stream-ordered call that failed is the communicator's asynchronous error too, and its
  // first: a communicator the shim revoked after it (StreamAgent::setOnDroppedCall) or that a
  // peer's notice failed reports the call's reason, not "aborted" or "remote error".
  std::string stream_message;
  if (e != braidInProgress) {
    braidResult_t s = StreamAgentError(comm, &stream_message);
    if (s != braidSuccess) {
      LastError() = std::string(func) + ": " + stream_message;
      *asyncError = MapStatus(s);
      return ncclSuccess;
    }
  }
  if (e == braidSuccess || e == braidInProgress) {
    *asyncError = e == braidSuccess ? ncclSuccess : ncclInProgress;
    return ncclSuccess;
  }
  // The error belongs to the communicator, so its message is the communicator's.
  const char* m = braidGetLastError(B(comm));
  LastError() = std::string(func) + ": " + (m && *m ? m : braidGetErrorString(e));
  *asyncError = MapStatus(e);
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))

NCCL_API_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  NCCL_CHECK(CheckComm(comm, "ncclCommCount"));
  NCCL_CHECK(CheckPtr(count, "count", "ncclCommCount"));
  return FromBraid(braidCommCount(B(comm), count), "ncclCommCount");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))

NCCL_API_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  NCCL_CHECK(CheckComm(comm, "ncclCommUserRank"));
  NCCL_CHECK(CheckPtr(rank, "rank", "ncclCommUserRank"));
  return FromBraid(braidCommUserRank(B(comm), rank), "ncclCommUserRank");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

NCCL_API_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  NCCL_CHECK(CheckComm(comm, "ncclCommCuDevice"));
  NCCL_CHECK(CheckPtr(device, "device", "ncclCommCuDevice"));
  // braid does not bind a communicator to a device (ranks may share one); report the device
  // current in this thread, which is the one NCCL programs select before using the comm.
  *device = CurrentCudaDevice();
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))
