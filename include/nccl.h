/**
 * @file nccl.h
 * @brief braid's NCCL-compatible C API (the host API of NCCL 2.28), implemented by braid's
 *        libnccl.so.2 (src/nccl/).
 *
 * Every name, signature, enum value and struct layout here equals NVIDIA's nccl.h 2.28.9, so a
 * program may be compiled against either header and linked against either library. Differences
 * in behaviour from NVIDIA's library:
 * - Host buffers are accepted by every call. A call on host buffers has completed when it returns
 *   (inside a group: when the outermost ncclGroupEnd() returns). The stream is then ignored.
 * - Several ranks may share one GPU, and one process may host several ranks.
 * - Errors come with a message (ncclGetLastError()) naming rank, peer, host, operation and a
 *   remedy. braid's timeout becomes ::ncclRemoteError, an aborted communicator
 *   ::ncclInvalidUsage.
 * - The device API (nccl_device.h: ncclDevComm*, ncclTeam*, LSA/GIN requirements) is exported
 *   but returns ::ncclInvalidUsage.
 *
 * This header compiles without CUDA: when <cuda_runtime.h> is not on the include path,
 * cudaStream_t is an opaque pointer type (the same struct tag CUDA uses, so the two agree).
 */
#ifndef NCCL_H_
#define NCCL_H_

#if defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define BRAID_NCCL_HAVE_CUDA_HEADERS 1
#endif
#endif

#ifdef BRAID_NCCL_HAVE_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#else
/** A CUDA stream; opaque here because no CUDA headers were found. */
typedef struct CUstream_st* cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

/** The NCCL version this API implements. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
/** Version code as NCCL encodes it (the encoding changed after 2.8). */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

/** Defined by braid's header only, so a program can tell which header it was compiled with. */
#define NCCL_BRAID 1

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque communicator handle. */
typedef struct ncclComm* ncclComm_t;
/** Opaque handle of a registered memory window. */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/** Rendezvous ticket of a communicator; treat it as a credential (it holds a secret). */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/** Status codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Window registration flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* CTA policies (accepted, no effect in braid). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink() flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /**< wait for the parent's pending operations, then shrink */
#define NCCL_SHRINK_ABORT 0x01   /**< abort the parent's pending operations, then shrink */

/* ncclCommRevoke() flags. */
#define NCCL_REVOKE_DEFAULT 0x00

/**
 * Communicator options. Initialise with NCCL_CONFIG_INITIALIZER: the library reads `size` bytes
 * at most, checks `magic`, and ignores fields newer than `version`. braid honours `blocking`;
 * the other fields are validated as NCCL does and otherwise have no effect.
 */
typedef struct ncclConfig_v22800 {
  size_t size;          /**< sizeof(ncclConfig_t) as the caller compiled it */
  unsigned int magic;   /**< 0xcafebeef */
  unsigned int version; /**< NCCL_VERSION of the caller's header */
  int blocking;         /**< 0: init and split return ncclInProgress; poll ncclCommGetAsyncError */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                    \
  }

/** Result of ncclGroupSimulateEnd(). Initialise with NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic; /**< 0x74685283 */
  unsigned int version;
  float estimatedTime; /**< microseconds */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                        \
  {                                                                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_UNDEF_FLOAT                                                                 \
  }

/* ------------------------------------------------------------------ memory */

/** Allocates `size` bytes usable by every call (host memory, 4096-byte aligned, in braid). */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
/** Frees memory from ncclMemAlloc(). */
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* ------------------------------------------------------------------ version and errors */

/** Writes the library's NCCL_VERSION_CODE (22809) to *version. */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

/** Short description of a status code. */
const char* ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);

/** Message of the calling thread's last error (of `comm`'s, if the thread has none). */
const char* ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);

/** Kept for ABI compatibility; does nothing. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("ncclResetDebugInit is not part of the NCCL API")))
#endif
void ncclResetDebugInit(void);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("pncclResetDebugInit is not part of the NCCL API")))
#endif
void pncclResetDebugInit(void);

/* ------------------------------------------------------------------ communicators */

/** Creates a unique id and serves its rendezvous from this process until the init completes. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/** Joins communicator `commId` as `rank` of `nranks`, with options (`config` may be NULL). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);

/**
 * Joins communicator `commId` as `rank` of `nranks`. Collective over all ranks: one thread may
 * initialise several ranks by calling it between ncclGroupStart() and ncclGroupEnd().
 */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/** Creates all `ndev` ranks of a new communicator in this process (`devlist` is not used). */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/** Waits for every operation of `comm` to complete. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/** Releases `comm` (finalising first if needed). NULL is accepted. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/** Stops `comm`'s operations at once (any thread) and releases it. NULL is accepted. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/**
 * Revokes `comm` (`revokeFlags` must be NCCL_REVOKE_DEFAULT): operations in flight fail, later
 * ones fail at once, and peers blocked on this rank fail within milliseconds; the communicator can
 * still be shrunk or destroyed (see braidCommRevoke).
 */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/**
 * Splits `comm`: ranks with the same `color` form a new communicator ordered by (`key`, old
 * rank); NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. `config` NULL inherits `comm`'s options.
 */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);

/**
 * Creates a communicator of the ranks of `comm` not in `excludeRanksList`; called by the
 * remaining ranks only, all with the same list. `shrinkFlags`: NCCL_SHRINK_DEFAULT or
 * NCCL_SHRINK_ABORT.
 */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/** As ncclCommInitRankConfig(); of the `nId` ids (same on every rank) braid uses the first. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);

/** Cheap and thread-safe: the communicator's sticky error (ncclInProgress while initialising). */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);

/** The CUDA device current when `comm` was used (0 where no CUDA is in use). */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/** Registers a buffer; braid needs no registration, so this only returns a handle. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/** Registers a memory window; as ncclCommRegister(), this only returns a handle. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ------------------------------------------------------------------ reduction operators */

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
/** Reduction operators. Values >= ncclNumOps are created by ncclRedOpCreatePreMulSum(). */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4, /**< sum divided by the number of ranks */
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/** Element types. */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/** Where the scalar of ncclRedOpCreatePreMulSum() lives. */
typedef enum {
  ncclScalarDevice = 0,       /**< device-visible memory (braid reads it when the op is created) */
  ncclScalarHostImmediate = 1 /**< host memory, read before the call returns */
} ncclScalarResidence_t;

/**
 * Creates an operator that multiplies each rank's input by `*scalar` (of type `datatype`) and
 * sums. The value is captured now; the operator may be destroyed as soon as the calls using it
 * have returned, even inside a group before ncclGroupEnd().
 */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ------------------------------------------------------------------ collectives
 * Counts are in elements. count == 0 is a no-op. In-place forms:
 *   all-reduce, reduce, broadcast: sendbuff == recvbuff;
 *   reduce-scatter: recvbuff == sendbuff + rank * recvcount;
 *   all-gather: sendbuff == recvbuff + rank * sendcount;
 *   gather: sendbuff == recvbuff + root * count (on the root);
 *   scatter: recvbuff == sendbuff + root * count (on the root).
 */

/** Reduces `count` elements of every rank's sendbuff into the root's recvbuff (NULL elsewhere). */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);

/** In-place broadcast of `buff` from `root` (deprecated form of ncclBroadcast). */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);

/** Copies the root's sendbuff into every rank's recvbuff. */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

/** Reduces every rank's sendbuff and leaves the result in every rank's recvbuff. */
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);

/** Reduces nranks * recvcount elements; rank i receives block i. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/** Rank i's sendcount elements land at recvbuff + i * sendcount on every rank. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/** Block j of sendbuff goes to rank j; block i of recvbuff comes from rank i. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/** Rank i's count elements land at the root's recvbuff + i * count. */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/** Block i of the root's sendbuff lands in rank i's recvbuff. */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/**
 * Point-to-point. The peer posts the matching call with the same count and type. Several sends
 * and receives that must progress together (a ring, a send to self) go in one group.
 */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* ------------------------------------------------------------------ groups
 * Calls between ncclGroupStart() and ncclGroupEnd() (per thread, nestable) are recorded and run
 * at the outermost ncclGroupEnd(): sends and receives are fused (any matching pattern completes),
 * and communicator inits run concurrently, so one thread can initialise several ranks.
 */

ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
/**
 * Ends the group without running it: simInfo->estimatedTime receives braid's cost-model estimate
 * of the group's calls in microseconds (see braidGroupSimulateEnd); the calls are discarded.
 */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // NCCL_H_
