/**
 * @file braid.h
 * @brief braid's native C API: communicators and collectives on host (and device) memory.
 *
 * Conventions
 * - Every function returns a ::braidResult_t. On failure, braidGetLastError() returns a message
 *   naming rank, peer, host, operation and a remedy.
 * - Blocking calls (braidAllReduce ...) have completed when they return: the receive buffer
 *   holds the result. Non-blocking calls (braidIallReduce ...) return a request at once; the
 *   buffers must stay valid and untouched until braidWait()/braidTest() reports completion.
 * - Collectives of one communicator execute in the order they were called, which must be the
 *   same on every rank. Mismatched calls (another collective, count, type, op or root) are
 *   detected and fail with ::braidErrInvalidUsage on every rank, naming both calls; they never
 *   hang, and the communicator stays usable. A call and its non-blocking twin (or the same call
 *   inside a group) are the same call: ranks may use different forms. A blocking send or
 *   receive that waits on a rank blocked in a collective this rank has not issued is a deadlock:
 *   it fails within seconds on every rank with ::braidErrInvalidUsage naming both calls, and the
 *   communicator enters an error state.
 * - Every wait has a deadline: an operation that makes no progress for BRAID_TIMEOUT seconds
 *   fails with ::braidErrTimeout and the communicator enters an error state.
 * - Counts are in elements of the given data type, never bytes; sizes are 64-bit.
 * - Thread safety: calls on different communicators may come from different threads at once;
 *   calls on one communicator must be serialised by the caller, except braidCommAbort() and
 *   braidCommGetAsyncError(), which are safe from any thread at any time.
 */
#ifndef BRAID_BRAID_H_
#define BRAID_BRAID_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libbraid.so (the library builds everything else hidden). */
#if defined(__GNUC__)
#define BRAID_API __attribute__((visibility("default")))
#else
#define BRAID_API
#endif

#define BRAID_VERSION_MAJOR 0
#define BRAID_VERSION_MINOR 1
#define BRAID_VERSION_PATCH 0
/** Single integer version: major * 10000 + minor * 100 + patch. */
#define BRAID_VERSION_CODE \
  (BRAID_VERSION_MAJOR * 10000 + BRAID_VERSION_MINOR * 100 + BRAID_VERSION_PATCH)

/** Size of a unique id in bytes (same as NCCL's). */
#define BRAID_UNIQUE_ID_BYTES 128

/**
 * A communicator's rendezvous ticket: root address and port plus a random 256-bit secret that
 * every connection must prove knowledge of. Treat it as a credential.
 */
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braidUniqueId;

/** Opaque communicator handle. */
typedef struct braidComm* braidComm_t;
/** Opaque handle of a non-blocking operation. */
typedef struct braidRequest* braidRequest_t;

/** Status codes. The first eight have the values of NCCL's ncclResult_t. */
typedef enum {
  braidSuccess = 0,
  braidErrSystem = 2,          /**< the OS refused something (socket, shm, memory): see message */
  braidErrInternal = 3,        /**< a bug in braid: please report the message */
  braidErrInvalidArgument = 4, /**< bad pointer, type, op, root or count */
  braidErrInvalidUsage = 5, /**< wrong call sequence, mismatch between ranks, use after destroy */
  braidErrRemote = 6,       /**< a peer failed, closed or sent something invalid */
  braidInProgress = 7,      /**< a non-blocking operation has not completed yet */
  braidErrTimeout = 8,      /**< no progress within the deadline */
  braidErrAborted = 9,      /**< the communicator was aborted */
} braidResult_t;

/** Element types. Values match NCCL's ncclDataType_t. */
typedef enum {
  braidInt8 = 0,
  braidUint8 = 1,
  braidInt32 = 2,
  braidUint32 = 3,
  braidInt64 = 4,
  braidUint64 = 5,
  braidFloat16 = 6,
  braidFloat32 = 7,
  braidFloat64 = 8,
  braidBfloat16 = 9,
  braidFloat8e4m3 = 10, /**< OCP FP8 E4M3 (finite-only, 0x7f/0xff are NaN), saturating */
  braidFloat8e5m2 = 11, /**< OCP FP8 E5M2 (IEEE-like with inf and NaN) */
  braidNumTypes = 12,
  /* Reserved, never valid: they make every int a value of the type, so that a bad value from
   * a caller is diagnosed (braidErrInvalidArgument) rather than undefined behaviour in C++. */
  braidDataTypeReservedMin_ = -0x7fffffff - 1,
  braidDataTypeReservedMax_ = 0x7fffffff
} braidDataType_t;

/**
 * Reduction operators. Values match NCCL's ncclRedOp_t. Values >= braidNumOps are
 * pre-multiplied sums created with braidRedOpCreatePreMulSum().
 */
typedef enum {
  braidSum = 0,
  braidProd = 1,
  braidMax = 2,
  braidMin = 3,
  braidAvg = 4, /**< sum, then divided by the number of ranks (integer division for integers) */
  braidNumOps = 5,
  braidMaxRedOp = 0x7fffffff,
  braidRedOpReservedMin_ = -0x7fffffff - 1 /* reserved, never valid: see braidDataType_t */
} braidRedOp_t;

/** Colour for braidCommSplit() that excludes the calling rank (it receives NULL). */
#define BRAID_SPLIT_NOCOLOR (-1)

/**
 * Communicator options. Initialise with BRAID_CONFIG_INITIALIZER; fields are only ever added at
 * the end, and `size` tells the library which fields the caller knows.
 */
typedef struct {
  size_t size;            /**< sizeof(braidConfig_t) as the caller compiled it */
  int blocking;           /**< 1 (default): init blocks; 0: init returns braidInProgress */
  int64_t timeout_ms;     /**< per-operation stall deadline; 0 = BRAID_TIMEOUT (default 300 s) */
  const char* transports; /**< e.g. "tcp" or "shm,tcp"; NULL = BRAID_TRANSPORTS or automatic */
  const char* algorithms; /**< tuner override, e.g. "allreduce:ring"; NULL = BRAID_ALGO */
  /** braidCommSplit only: 1 = the new communicator is a view on the parent's connections (no
   *  rendezvous, no new socket, segment or thread; the parent and its views must be called in
   *  the same order on every rank, and a failure of one stops all); 0 = a new, independent
   *  communicator; -1 (default) = BRAID_SPLIT_SHARE (default 1). */
  int splitShare;
} braidConfig_t;

#define BRAID_CONFIG_INITIALIZER \
  { sizeof(braidConfig_t), 1, 0, NULL, NULL, -1 }

/* ------------------------------------------------------------------ version and errors */

/** Writes BRAID_VERSION_CODE of the library (not of the header) to *version. */
BRAID_API braidResult_t braidGetVersion(int* version);
/** Short static name of a status code, e.g. "remote error". */
BRAID_API const char* braidGetErrorString(braidResult_t result);
/**
 * Message of the last error of `comm`, or of the calling thread's last error when `comm` is NULL
 * or the error happened before a communicator existed. Valid until the next call on that
 * communicator from this thread. Never NULL ("" when there was no error).
 */
BRAID_API const char* braidGetLastError(braidComm_t comm);

/* ------------------------------------------------------------------ communicators */

/**
 * Creates a fresh unique id and starts the rendezvous service for it in this process (a thread
 * that serves one communicator's init and then exits). The listener binds to the interface
 * chosen by BRAID_SOCKET_IFNAME (default: the first routable non-loopback interface).
 */
BRAID_API braidResult_t braidGetUniqueId(braidUniqueId* uniqueId);

/** Joins communicator `uniqueId` as `rank` of `nranks`. Collective over all ranks. */
BRAID_API braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId uniqueId,
                                          int rank);

/** As braidCommInitRank(), with options. `config` may be NULL. */
BRAID_API braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks,
                                                braidUniqueId uniqueId, int rank,
                                                const braidConfig_t* config);

/**
 * Initialises a communicator from the launcher's environment:
 * - braidrun: BRAID_RANK, BRAID_WORLD_SIZE, BRAID_UNIQUE_ID;
 * - Open MPI (mpirun): OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK;
 * - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
 * - torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
 * Without BRAID_UNIQUE_ID, rank 0 serves the rendezvous at BRAID_COMM_ID ("host:port"; for
 * torchrun MASTER_ADDR:MASTER_PORT+1), or, when every rank is on this host, through a file in
 * /tmp named after the launcher's job id. The secret then comes from BRAID_SECRET (all ranks
 * must set the same value); without it the handshake still runs but cannot keep strangers out,
 * and braid warns once.
 */
BRAID_API braidResult_t braidInitFromEnv(braidComm_t* comm);

/**
 * Splits `comm` by colour: ranks passing the same colour form a new communicator ordered by
 * (key, old rank). BRAID_SPLIT_NOCOLOR yields *newcomm = NULL. Collective over `comm`.
 */
BRAID_API braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm,
                                       const braidConfig_t* config);

/** Topology levels for braidCommSplitLevel(). */
typedef enum {
  braidLevelNode = 0,          /**< the ranks on this rank's node */
  braidLevelSameLocalRank = 1, /**< the ranks with this rank's local rank, one per node */
  braidLevelDeviceGroup = 2,   /**< the ranks of this rank's node bound to devices of its device
                                    group (a GCD pair, GPUs on one NVSwitch): local rank k is bound
                                    to the node's device k mod its device count; a rank on a node
                                    without devices is alone */
} braidLevel_t;

/**
 * A view of `comm` (docs/split-views.md) holding the ranks that share this rank's level: its
 * node, or its local rank across nodes (nodes as BRAID_HOSTID, else hostname + boot id + network
 * namespace, identify them), in `comm`'s rank order. Local: no communication, microseconds; every
 * rank of the new communicator must make it too before using it, and destroy it when done.
 */
BRAID_API braidResult_t braidCommSplitLevel(braidComm_t comm, braidLevel_t level,
                                            braidComm_t* newcomm);

/**
 * The fabric split (issue 9, the Holmes scheme): a view of `comm` holding the ranks whose nodes
 * prefer the same NIC type (their best RDMA type: InfiniBand, then Slingshot, then RoCE; else
 * Ethernet), so that, e.g., data-parallel groups run over one homogeneous RDMA fabric. NIC types
 * come from BRAID_TOPO_FILE (the node named by BRAID_HOSTID or the hostname) or from discovery.
 * `fabric` (may be NULL) receives the type's name ("ib", "roce", "slingshot", "ethernet"). Local
 * like braidCommSplitLevel.
 */
BRAID_API braidResult_t braidCommSplitByFabric(braidComm_t comm, braidComm_t* newcomm,
                                               const char** fabric);

/**
 * A view of `comm` (docs/split-views.md) holding the ranks `ranks[0 .. nranks)` of `comm`, the
 * view's rank i being `ranks[i]`: for frameworks that make a group on its members alone
 * (torch.distributed's new_group constructs the backend's group on the listed ranks only). Local
 * like braidCommSplitLevel: only the listed ranks call it, each with the same list and `tag`,
 * and nothing is sent. `tag` tells views of the same ranks apart on the wire (the framework's
 * group name or number): views with equal lists and tags are one group to the call check, so a
 * call on one matched by a call on the other is not caught. Errors: ::braidErrInvalidArgument
 * for NULL pointers, `nranks` < 1, a rank out of range or listed twice; ::braidErrInvalidUsage
 * when the calling rank is not listed (it must not call).
 */
BRAID_API braidResult_t braidCommSplitRanks(braidComm_t comm, const int* ranks, int nranks,
                                            uint32_t tag, braidComm_t* newcomm);

/**
 * Creates a communicator of the ranks of `comm` not listed in `excludeRanks` (ordered as in
 * `comm`), for recovery after ranks have died. Only the surviving ranks call it, all with the
 * same list; it works when `comm` is in an error state. `flags`: 0 = wait for pending
 * operations of `comm` first, 1 = abort them first (NCCL_SHRINK_ABORT).
 */
/**
 * Revokes `comm` (local, any thread, returns at once): operations in flight fail with
 * ::braidErrAborted, later ones fail at once, and peers blocked on this rank fail within
 * milliseconds. The communicator can still be shrunk (braidCommShrink) or destroyed.
 */
BRAID_API braidResult_t braidCommRevoke(braidComm_t comm);

BRAID_API braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int excludeCount,
                                        braidComm_t* newcomm, const braidConfig_t* config,
                                        int flags);

/** Waits (within the deadline) for all operations of `comm` to complete. */
BRAID_API braidResult_t braidCommFinalize(braidComm_t comm);
/** Releases `comm` (finalising first if needed). The handle is invalid afterwards. */
BRAID_API braidResult_t braidCommDestroy(braidComm_t comm);
/**
 * Stops all operations of `comm` at once, from any thread, without the other ranks, and releases
 * it. Pending operations complete with ::braidErrAborted. Returns within 2 seconds.
 */
BRAID_API braidResult_t braidCommAbort(braidComm_t comm);
/** Cheap, thread-safe: the communicator's sticky error (braidSuccess when healthy). */
BRAID_API braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError);

BRAID_API braidResult_t braidCommCount(braidComm_t comm, int* count);
BRAID_API braidResult_t braidCommUserRank(braidComm_t comm, int* rank);
/**
 * A one-line human-readable summary of the communicator for tools ("rank 0/4 host h1 pid 42
 * transports shm:3 tcp:0 channels 2"): writes at most `len` bytes including the NUL.
 */
BRAID_API braidResult_t braidCommDescribe(braidComm_t comm, char* buf, size_t len);
/**
 * Hang localisation: a multi-line report of what the communicator is doing (operations submitted,
 * completed and queued; the last collective issued and completed, by sequence number; for each
 * operation in flight its algorithm, stage, per-lane step and bytes, and the ranks it waits on).
 * Callable from any thread, also while other threads are blocked in calls on `comm`; returns
 * within about 2 seconds. Writes at most `len` bytes including the NUL. The same report goes to
 * the log for every live communicator when the process receives the signal named by
 * BRAID_DUMP_SIGNAL (e.g. USR1).
 */
BRAID_API braidResult_t braidCommDebugState(braidComm_t comm, char* buf, size_t len);
/**
 * Traffic counters, kept by the transports: the bytes this rank has sent to and received from
 * `peer` on `comm` since init (payload and message framing, every lane), and the name of the
 * transport that carries them ("shm", "tcp"; "self" when `peer` is this rank, with zero counts),
 * written to `transport` (at most `len` bytes including the NUL; `transport` may be NULL).
 * `sent` and `received` may be NULL. Shows, e.g., which traffic of a multi-node job crossed the
 * network. Calls run on the shared-memory board (one-sided: a rank reads its peers' posts) count
 * the bytes a peer read of this rank's posts as sent to it; the reader counts them when it reads,
 * so `received` is exact once this rank's calls completed, `sent` once the peers' did.
 */
BRAID_API braidResult_t braidCommPeerTraffic(braidComm_t comm, int peer, uint64_t* sent,
                                             uint64_t* received, char* transport, size_t len);

/* ------------------------------------------------------------------ reduction operators */

/**
 * Creates a pre-multiplied sum: each rank's input is multiplied by `*scalar` (of type
 * `datatype`, read now from host memory) before summation. The operator may be destroyed as soon
 * as the calls using it have been issued.
 */
BRAID_API braidResult_t braidRedOpCreatePreMulSum(braidRedOp_t* op, const void* scalar,
                                                  braidDataType_t datatype, braidComm_t comm);
BRAID_API braidResult_t braidRedOpDestroy(braidRedOp_t op, braidComm_t comm);

/* ------------------------------------------------------------------ quantized collectives */

/**
 * Block quantization of a quantized collective (docs/quantization.md, the ZeRO++ format): blocks
 * of `blockSize` consecutive elements, each encoded with its own fp32 scale (and, asymmetric, its
 * minimum) in `bits` (8 or 4) bits per element.
 */
typedef struct {
  int bits;      /**< 8 or 4 */
  int blockSize; /**< elements per block, 1 .. 2^20 (ZeRO++ uses 2048-8192 for weights) */
  int symmetric; /**< 1: absmax scale; 0: min/max */
} braidQuantConfig_t;

/**
 * qwZ: an all-gather whose data travels block-quantized. Each rank encodes its shard once, the
 * encodings are all-gathered, and every rank decodes all of them (its own included), so every
 * rank's result is bit-identical. float32, float16, bfloat16; any count (a short last block).
 * In place as braidAllGather.
 */
BRAID_API braidResult_t braidAllGatherQuantized(const void* sendbuff, void* recvbuff,
                                                size_t sendcount, braidDataType_t datatype,
                                                const braidQuantConfig_t* quant, braidComm_t comm);
/**
 * qgZ: a reduce-scatter whose contributions travel block-quantized and are summed after decoding
 * (never re-encoded hop by hop as in a ring). On nodes of equal size it takes two all-to-all hops,
 * within the node first, so each block crosses the network once, quantized; otherwise one.
 * `op`: braidSum, or braidAvg (the sum divided by the number of ranks). Hop sums are in fp32.
 */
BRAID_API braidResult_t braidReduceScatterQuantized(const void* sendbuff, void* recvbuff,
                                                    size_t recvcount, braidDataType_t datatype,
                                                    braidRedOp_t op,
                                                    const braidQuantConfig_t* quant,
                                                    braidComm_t comm);
BRAID_API braidResult_t braidIallGatherQuantized(const void* sendbuff, void* recvbuff,
                                                 size_t sendcount, braidDataType_t datatype,
                                                 const braidQuantConfig_t* quant, braidComm_t comm,
                                                 braidRequest_t* request);
BRAID_API braidResult_t braidIreduceScatterQuantized(const void* sendbuff, void* recvbuff,
                                                     size_t recvcount, braidDataType_t datatype,
                                                     braidRedOp_t op,
                                                     const braidQuantConfig_t* quant,
                                                     braidComm_t comm, braidRequest_t* request);

/**
 * The block codec of the quantized collectives as a local operation on host memory, for callers
 * that keep data quantized between collectives (the sharding layer's INT8 secondary parameter
 * copy, a framework's compressed checkpoints). braidQuantize() writes exactly the bytes the
 * collectives put on the wire (docs/quantization.md, "Encoded layout"), so an encoding made here
 * may be all-gathered as bytes and decoded with braidDequantize() by any rank. float32, float16,
 * bfloat16; any count. An invalid configuration or type gives braidErrInvalidArgument and writes
 * nothing.
 */
BRAID_API braidResult_t braidQuantizedSize(size_t count, const braidQuantConfig_t* quant,
                                           size_t* bytes);
BRAID_API braidResult_t braidQuantize(const void* src, size_t count, braidDataType_t datatype,
                                      const braidQuantConfig_t* quant, void* dst);
BRAID_API braidResult_t braidDequantize(const void* src, size_t count, braidDataType_t datatype,
                                        const braidQuantConfig_t* quant, void* dst);

/* ------------------------------------------------------------------ collectives
 * In-place forms: all-reduce, reduce, broadcast: sendbuff == recvbuff;
 * all-gather: sendbuff == recvbuff + rank * sendcount; reduce-scatter:
 * recvbuff == sendbuff + rank * recvcount; all-to-all: not supported in place.
 * count == 0 is a no-op that still checks its arguments.
 */

BRAID_API braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, braidRedOp_t op, braidComm_t comm);
/** recvbuff holds recvcount elements; sendbuff holds nranks * recvcount. */
BRAID_API braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           braidDataType_t datatype, braidRedOp_t op,
                                           braidComm_t comm);
/** sendbuff holds sendcount elements; recvbuff holds nranks * sendcount. */
BRAID_API braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       braidDataType_t datatype, braidComm_t comm);
/** sendbuff is read on the root only. */
BRAID_API braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, int root, braidComm_t comm);
/** recvbuff is written on the root only. */
BRAID_API braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    braidDataType_t datatype, braidRedOp_t op, int root,
                                    braidComm_t comm);
/** `count` elements go to each peer: sendbuff and recvbuff hold nranks * count. */
BRAID_API braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                      braidDataType_t datatype, braidComm_t comm);
/** Point-to-point; `peer` may be the caller itself (then it must be inside a group). */
BRAID_API braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype,
                                  int peer, braidComm_t comm);
BRAID_API braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                                  braidComm_t comm);
BRAID_API braidResult_t braidBarrier(braidComm_t comm);

/* Non-blocking twins: same arguments plus the request written to *request. A call may complete
 * before it returns (a call of no element; a small call whose peers have all posted): its request
 * is then one shared, completed handle. Requests are tokens for braidTest() and braidWait(), each
 * waited for once, not identities: do not key a table on them. */
BRAID_API braidResult_t braidIallReduce(const void* sendbuff, void* recvbuff, size_t count,
                                        braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                        braidRequest_t* request);
BRAID_API braidResult_t braidIreduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            braidDataType_t datatype, braidRedOp_t op,
                                            braidComm_t comm, braidRequest_t* request);
BRAID_API braidResult_t braidIallGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        braidDataType_t datatype, braidComm_t comm,
                                        braidRequest_t* request);
BRAID_API braidResult_t braidIbroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        braidDataType_t datatype, int root, braidComm_t comm,
                                        braidRequest_t* request);
BRAID_API braidResult_t braidIreduce(const void* sendbuff, void* recvbuff, size_t count,
                                     braidDataType_t datatype, braidRedOp_t op, int root,
                                     braidComm_t comm, braidRequest_t* request);
BRAID_API braidResult_t braidIallToAll(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, braidComm_t comm,
                                       braidRequest_t* request);
BRAID_API braidResult_t braidIsend(const void* sendbuff, size_t count, braidDataType_t datatype,
                                   int peer, braidComm_t comm, braidRequest_t* request);
BRAID_API braidResult_t braidIrecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                                   braidComm_t comm, braidRequest_t* request);
BRAID_API braidResult_t braidIbarrier(braidComm_t comm, braidRequest_t* request);

/**
 * Checks a request without blocking. When the operation has completed, *done = 1, the
 * operation's status is returned and *request is released and set to NULL; otherwise *done = 0
 * and braidSuccess is returned.
 */
BRAID_API braidResult_t braidTest(braidRequest_t* request, int* done);
/**
 * Waits up to `timeout_ms` (< 0: no limit beyond the operation's own deadline) for a request.
 * On completion returns the operation's status and releases the request (*request = NULL). If
 * the wait times out first, returns ::braidErrTimeout and the request stays valid.
 */
BRAID_API braidResult_t braidWait(braidRequest_t* request, int64_t timeout_ms);

/* ------------------------------------------------------------------ groups
 * Between braidGroupStart() and braidGroupEnd() (per thread, nestable), calls are recorded, not
 * run. At the outermost braidGroupEnd() the sends and receives of each communicator are fused
 * into one operation (so any pattern of matching sends and receives completes without
 * deadlock), collectives run in call order before them, and communicator inits issued in the
 * group run concurrently (so one thread may initialise several ranks). Blocking calls in a
 * group have completed when braidGroupEnd() returns. As in NCCL, the calls of a group may run
 * at the same time: one must not read a buffer that an earlier call of the same group writes
 * (e.g. an all-reduce of what a broadcast of the group receives).
 */
BRAID_API braidResult_t braidGroupStart(void);
BRAID_API braidResult_t braidGroupEnd(void);
/**
 * Ends the group like braidGroupEnd(), but runs none of its calls: *seconds receives the time
 * the group's calls on this rank would take by braid's cost model, and they are discarded (no
 * data moves, no buffer is read or written, and a request of a discarded call completes with
 * ::braidErrInvalidUsage). Each collective is costed by the simulator for the algorithm the
 * communicator's tuner would choose, on the tuner's link model (plus the call agreement when
 * BRAID_VERIFY_CALLS is on); each communicator's sends and receives by alpha + bytes / beta per
 * message on the link class to the peer, messages on different ports (send or receive, per link
 * class) overlapping. The estimates are summed. Communicator inits in the group do run. An inner
 * braidGroupSimulateEnd() of a nested group only closes its level and sets *seconds to 0.
 * Errors: ::braidErrInvalidArgument when `seconds` is NULL (the group stays open),
 * ::braidErrInvalidUsage without a matching braidGroupStart().
 */
BRAID_API braidResult_t braidGroupSimulateEnd(double* seconds);

/* ------------------------------------------------------------------ cost model
 * The alpha-beta cost model the tuner ranks algorithms with (spec/algorithms.md section 4),
 * for callers that plan without a communicator: the sharding planner (shard.h) costs every
 * collective of a candidate configuration here, so planner and tuner share one model.
 */

/** Collectives the estimate knows. */
typedef enum {
  braidCollAllReduce = 0,
  braidCollReduceScatter = 1,
  braidCollAllGather = 2,
  braidCollBroadcast = 3
} braidCollective_t;

/** Alpha-beta parameters of the two link levels. `interBandwidth` is one node's link (its NICs
 *  together), per direction, shared by the node's ranks, as in the simulator. */
typedef struct {
  double intraLatency;   /**< seconds per message inside a node */
  double intraBandwidth; /**< bytes per second per rank and direction inside a node */
  double interLatency;   /**< seconds per message between nodes */
  double interBandwidth; /**< bytes per second per node and direction between nodes */
  /** NICs that make up the node's link (0 or 1: one): local rank r crosses through NIC
   *  r mod nicsPerNode at interBandwidth / nicsPerNode, NICs side by side. */
  int nicsPerNode;
} braidLinkParams_t;

/**
 * Predicted seconds of one collective over a group of `ranksPerNode` x `nodes` ranks (node-major)
 * moving `bytes` (the whole buffer: the gathered result of an all-gather, the input of a
 * reduce-scatter, the buffer of an all-reduce or broadcast) of `datatype`, by the cost model of
 * the algorithm the tuner would pick (the cheapest flat or hierarchical one that serves it).
 * `nicSharing` >= 1 is the number of such groups that run at once on the same nodes and so share
 * each node's inter-node link (e.g. the R groups of one rank per node of a replica all-reduce);
 * the groups are taken to be blocks of consecutive local ranks, so with several NICs a group of
 * fewer ranks per node than NICs uses only its ranks' NICs.
 * `quantBits` 8 or 4 costs the quantized form (braidAllGatherQuantized /
 * braidReduceScatterQuantized, blocks of 2048 with one fp32 scale) as that algorithm moving the
 * encoded bytes; 0 = not quantized. Writes the seconds to *seconds and, when `algorithm` is not
 * NULL, the algorithm's name. Pure and thread-safe; microseconds per call. Invalid arguments give
 * braidErrInvalidArgument with a message (braidGetLastError(NULL)).
 */
BRAID_API braidResult_t braidEstimateCollective(braidCollective_t collective, uint64_t bytes,
                                                braidDataType_t datatype, int quantBits,
                                                int ranksPerNode, int nodes, int nicSharing,
                                                const braidLinkParams_t* link, double* seconds,
                                                char* algorithm, size_t algorithmLen);

/**
 * Predicted seconds of one named algorithm (BRAID_ALGO's names: "ring", "rail_ring", "ho_ring",
 * ...; docs/algorithms.md) for the collective braidEstimateCollective describes, with the same
 * arguments: what a tuner restricted to that algorithm would predict (e.g. the planner's Lins
 * model prices NCCL's rings with it). An unknown name, or an algorithm that does not serve the
 * collective on that group, gives braidErrInvalidArgument with a message. One rank costs 0.
 */
BRAID_API braidResult_t braidEstimateAlgorithm(const char* algorithm, braidCollective_t collective,
                                               uint64_t bytes, braidDataType_t datatype,
                                               int quantBits, int ranksPerNode, int nodes,
                                               int nicSharing, const braidLinkParams_t* link,
                                               double* seconds);

/**
 * The link model `comm`'s tuner uses (measured at init by link calibration, read from
 * BRAID_LINK_PROFILE, or the defaults; docs/topology.md), in the form braidEstimateCollective
 * takes, so that a caller can cost collectives on this communicator's links.
 */
BRAID_API braidResult_t braidCommLinkParams(braidComm_t comm, braidLinkParams_t* link);

/**
 * Reads a link profile (the BRAID_LINK_PROFILE file a calibrated job writes: `version 1`, then
 * `intra.alpha_s`, `intra.beta_bytes_s`, `inter.alpha_s`, `inter.beta_bytes_s`; docs/topology.md)
 * into *link. A level the file does not hold keeps the value *link had. A missing, unreadable or
 * malformed file gives braidErrInvalidArgument naming the file and the line.
 */
BRAID_API braidResult_t braidLinkProfileLoad(const char* path, braidLinkParams_t* link);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // BRAID_BRAID_H_
