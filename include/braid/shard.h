/*
 * braid sharded-step C API (spec/sharding.md): the partitioned data-parallel trainer step.
 *
 * Parameters (P), gradients (G) and optimizer states (OS) each have a sharding factor
 * s_X = s_X^intra x s_X^inter over a job of R ranks per node and n nodes (rank = node * R +
 * local). A configuration is a plain value (braidShardConfig_t): fill it by hand, resolve a named
 * preset with braidShardPresetForShape(), or take it from the planner. braidShardConfigValidate()
 * checks it; braidShardReport() explains it. braidShardCreate() then owns the shards of the
 * trainer's buckets and runs the step: per micro-batch braidShardGather() / braidShardRelease()
 * and braidShardReduceGrad(), at the accumulation boundary braidShardStep().
 *
 * Parameters (and the gradients handed over) are fp32, bf16 or fp16; the OS shard keeps fp32
 * master weights and the optimizer state (AdamW or SGD with momentum). braidShardStepEx() adds
 * fp16 loss scaling (static or dynamic) with an overflow check, and gradient-norm clipping across
 * shards; braidShardPrepareStep() / braidShardFinishStep() let a framework-owned optimizer update
 * braid's shards. braidShardSave() / braidShardLoad() checkpoint the shards with a manifest and
 * reload them under another configuration or rank count. hpZ, qwZ and qgZ are part of the
 * configuration (the presets set them) but braidShardCreate() refuses them until they are built.
 * See docs/sharding.md for what is left.
 *
 * Every function returns a braidResult_t; the message of the last failure is read with
 * braidShardGetLastError(). No call aborts the process.
 */
#ifndef BRAID_SHARD_H_
#define BRAID_SHARD_H_

#include <stddef.h>
#include <stdint.h>

#include "braid/braid.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One state's sharding factor: sharded over `intra` ranks inside a node and `inter` nodes. */
typedef struct {
  int intra;
  int inter;
} braidShardFactor_t;

/**
 * A sharding configuration: a plain value (no pointers), so that a planner can produce it and a
 * checkpoint manifest can store it. Initialise with BRAID_SHARD_CONFIG_INITIALIZER (plain DDP on
 * one rank); fields are only ever added at the end.
 */
typedef struct {
  size_t size;           /**< sizeof(braidShardConfig_t) as the caller compiled it */
  int ranksPerNode;      /**< R: ranks per node in the data-parallel group */
  int nodes;             /**< n: nodes in the data-parallel group */
  braidShardFactor_t p;  /**< parameters */
  braidShardFactor_t g;  /**< gradients */
  braidShardFactor_t os; /**< optimizer states (fp32 master, first and second moments) */
  /** 1: all-reduce gradient shards across replicas every micro-batch (FSDP HYBRID_SHARD);
   *  0: only at the accumulation boundary (MiCS, ZeRO). */
  int replicaEveryMicrobatch;
  /** 1: allow s_X^intra < R while s_X^inter > 1 (sharding.md section 1: "unless the caller
   *  insists"); 0: sharding across nodes must use the whole node first. */
  int allowPartialNode;
  /** hpZ: a secondary copy of the parameters over this many consecutive ranks of a node (it
   *  divides R); 0 = none. Built from the first gather of each bucket after an update (at its
   *  release), used by every later gather of that bucket in the micro-batch (the backward pass),
   *  which then stays inside the node; dropped when the parameters change. Kept only where it
   *  differs from the primary P shard (s_p > 1, and the P group spans nodes, or the copy is INT8,
   *  or hpz != s_p^intra). */
  int hpz;
  /** 1: the secondary copy is INT8 (zero-topo): blocks of 2048 with an fp32 scale, so the
   *  gathers from it return parameters within one INT8 step of the forward's */
  int hpzInt8;
  /** 1: gathers from the primary P shard travel INT8-quantized (ZeRO++ qwZ,
   *  braidAllGatherQuantized, blocks of 2048): the gathered parameters are the decoded ones,
   *  identical on every rank; the master weights stay exact */
  int qwz;
  /** 1: gradient reduce-scatters travel INT4-quantized (ZeRO++ qgZ,
   *  braidReduceScatterQuantized, blocks of 2048, two hops on nodes of equal size) */
  int qgz;
  char preset[24]; /**< the preset's name, or "" for a hand-made configuration */
  char note[256];  /**< how a preset degraded to fit the shape, or "" */
} braidShardConfig_t;

#define BRAID_SHARD_CONFIG_INITIALIZER \
  { sizeof(braidShardConfig_t), 1, 1, {1, 1}, {1, 1}, {1, 1}, 0, 0, 0, 0, 0, 0, "", "" }

/**
 * Checks a configuration against sharding.md section 1: every factor >= 1; the dependency rule
 * s_p <= s_g <= s_os per level (a rank never holds gradients or optimizer states for parameters
 * it does not hold); each factor divides R (intra) or n (inter); nesting (s_p | s_g | s_os per
 * level, so that an OS shard is a sub-slice of its G shard and that of its P shard); whole node
 * first (s^inter > 1 needs s^intra = R unless allowPartialNode). On failure returns
 * braidErrInvalidArgument and writes a message naming the rule and the numbers to `err`.
 * `err` may be NULL.
 */
BRAID_API braidResult_t braidShardConfigValidate(const braidShardConfig_t* cfg, char* err,
                                                 size_t errlen);

/**
 * Resolves a named preset of sharding.md section 3 (`ddp`, `zero1`, `zero2`, `zero3`,
 * `fsdp-hybrid`, `mics`, `zero++`, `paro-nig`, `paro-iig`, `paro-igg`, `zero-topo`) for a job of
 * `ranksPerNode` x `nodes` ranks. Where the preset does not fit the shape it degrades to the
 * nearest valid configuration and says so in cfg->note. `lins` (the planner) and unknown names
 * give braidErrInvalidArgument (message from braidShardGetLastError(NULL)).
 */
BRAID_API braidResult_t braidShardPresetForShape(const char* name, int ranksPerNode, int nodes,
                                                 braidShardConfig_t* cfg);

/**
 * braidShardPresetForShape() with the shape of `comm`: R = the ranks of this rank's node
 * (braidCommSplitLevel; nodes from BRAID_HOSTID or the host), n = nranks / R. Local, no
 * communication. Fails if the nodes hold different numbers of ranks.
 */
BRAID_API braidResult_t braidShardPreset(const char* name, braidComm_t comm,
                                         braidShardConfig_t* cfg);

/** Bytes per rank of each model state. */
typedef struct {
  uint64_t params;    /**< P shard and the hpZ secondary copy (not the gathered full buckets) */
  uint64_t grads;     /**< G shard accumulator */
  uint64_t optimizer; /**< fp32 master + first + second moment of the OS shard */
  uint64_t total;     /**< params + grads + optimizer */
} braidShardMemory_t;

/**
 * The formula of sharding.md section 1 for a model of `phi` parameters:
 * params = e * phi / s_p, grads = e * phi / s_g, optimizer = 12 * phi / s_os, with e =
 * `paramBytes` (2 for bf16/fp16, as in the spec's tables; 4 for fp32). Integer division rounds
 * up (a shard is padded, never short). With an hpZ secondary copy, params adds e * phi / hpz, or
 * for an INT8 copy the encoding of phi / hpz elements (braidQuantizedSize: one byte each and a
 * 4-byte scale per 2048, rounded up to 16 bytes; the step encodes each bucket on its own).
 */
BRAID_API braidResult_t braidShardMemoryFormula(const braidShardConfig_t* cfg, uint64_t phi,
                                                int paramBytes, braidShardMemory_t* mem);

/**
 * Writes a human-readable plan for `rank` of the job to buf (truncated to len, always
 * NUL-terminated): the factors, which shards the rank holds, the collectives that run per
 * micro-batch and per step with the group each runs over (its ranks), and the memory per state
 * for `phi` parameters in bf16 (formula above). Returns braidErrInvalidArgument for an invalid
 * configuration (the message says why).
 */
BRAID_API braidResult_t braidShardReport(const braidShardConfig_t* cfg, int rank, uint64_t phi,
                                         char* buf, size_t len);

/** Opaque handle of a sharded model. */
typedef struct braidShard* braidShard_t;

/**
 * Registers `nbuckets` buckets of parameters (bucket b holds bucketNumel[b] elements of
 * `paramType`: braidFloat32, braidBfloat16 or braidFloat16) and takes `initParams[b]` (full
 * bucket in `paramType`, identical on every rank) as the initial values; the fp32 master weights
 * start as their exact fp32 values. Gradients are handed over, reduced and accumulated in
 * `paramType` too (the 2 bytes per element of the spec's memory formula for bf16/fp16); the
 * update runs in fp32 and its result is rounded (to nearest even) to `paramType`. Collective over
 * `comm`, whose ranks must be node-major (rank = node * R + local) with cfg->ranksPerNode ranks on
 * each node. All ranks must pass the same configuration and the same buckets: a mismatch fails on
 * every rank with braidErrInvalidUsage. Sub-communicators are views of `comm` (braidCommSplit);
 * `comm` must outlive the handle.
 */
BRAID_API braidResult_t braidShardCreate(braidComm_t comm, const braidShardConfig_t* cfg,
                                         int nbuckets, const size_t* bucketNumel,
                                         braidDataType_t paramType, const void* const* initParams,
                                         braidShard_t* shard);

/**
 * Makes the full parameters of `bucket` available and writes their address to *params (valid
 * until braidShardRelease). With s_p > 1 this all-gathers the bucket over its p-group and starts
 * the gather of the next bucket in the direction of the last two gathers (forward or backward),
 * so that it runs while the caller computes. Collective over the p-group: every rank gathers the
 * same buckets in the same order. An unknown bucket gives braidErrInvalidArgument.
 */
BRAID_API braidResult_t braidShardGather(braidShard_t shard, int bucket, const void** params);

/**
 * Turns the prefetch of braidShardGather on (1, the default) or off (0): off, each gather is
 * issued when the caller asks for it, so none of it overlaps the caller's compute (for measuring
 * what the overlap hides, perf/shard_step.cc --overlap). The results are the same either way.
 * Collective over the shard's communicator: the prefetch changes the order in which the shard's
 * collectives are issued, so every rank must pass the same value; different values give
 * braidErrInvalidUsage on every rank and leave the setting unchanged.
 */
BRAID_API braidResult_t braidShardSetPrefetch(braidShard_t shard, int enable);

/** Ends the use of a gathered bucket; with s_p > 1 its full copy is freed. */
BRAID_API braidResult_t braidShardRelease(braidShard_t shard, int bucket);

/**
 * Hands over the full gradient of `bucket` for one micro-batch (bucketNumel[bucket] elements of
 * the parameter type; copied before the call returns, so the buffer may be reused at once).
 * With s_g > 1 it is reduce-scattered over the g-group without blocking; the call finishes the
 * previous hand-over's reduction, so one is in flight while the caller computes the next
 * gradient, and braidShardStep() finishes the last. The shard (or, with s_g = 1, the whole
 * gradient) is accumulated. Collective over the g-group: every rank hands over the same buckets
 * in the same order, each bucket once per micro-batch.
 */
BRAID_API braidResult_t braidShardReduceGrad(braidShard_t shard, int bucket, const void* grad);

/** AdamW hyper-parameters (PyTorch's AdamW, decoupled weight decay). */
typedef struct {
  size_t size; /**< sizeof(braidShardAdamW_t) as the caller compiled it */
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weightDecay;
  /** The accumulated gradient sum is multiplied by 1/gradDivisor before the update;
   *  0 = data-parallel ranks x micro-batches (the mean). */
  double gradDivisor;
} braidShardAdamW_t;

#define BRAID_SHARD_ADAMW_INITIALIZER \
  { sizeof(braidShardAdamW_t), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0 }

/**
 * The accumulation boundary: reduces each gradient shard across replicas, keeps the slice of
 * the local OS shard, runs AdamW on it in fp32 (step count t incremented first), rounds the
 * master weights to the parameter dtype and all-gathers them so that every rank holds its P
 * shard. Collective over the whole comm. Every bucket must have been reduced the same number of
 * times (>= 1) on every rank and no bucket may be gathered; otherwise every rank returns
 * braidErrInvalidUsage and the step does nothing. This is braidShardStepEx() with AdamW, no
 * clipping and the dynamic scaler's loss scale if one is set (1 otherwise); a step skipped for
 * an overflow also returns braidSuccess here: use braidShardStepEx() to learn of it.
 */
BRAID_API braidResult_t braidShardStep(braidShard_t shard, const braidShardAdamW_t* adamw);

/** SGD hyper-parameters (PyTorch's SGD: weight decay added to the gradient, momentum buffer
 *  set to the first gradient on the first step, then momentum * buf + (1 - dampening) * g). */
typedef struct {
  size_t size; /**< sizeof(braidShardSGD_t) as the caller compiled it */
  float lr;
  float momentum; /**< 0: plain SGD */
  float dampening;
  float weightDecay;
  int nesterov; /**< 1: g + momentum * buf instead of buf */
} braidShardSGD_t;

#define BRAID_SHARD_SGD_INITIALIZER \
  { sizeof(braidShardSGD_t), 1e-2f, 0.9f, 0.0f, 0.0f, 0 }

/** Which built-in optimizer braidShardStepEx() runs on the OS shard. */
typedef enum { braidShardOptAdamW = 0, braidShardOptSGD = 1 } braidShardOptimizer_t;

/** Options of braidShardStepEx() and braidShardPrepareStep(). */
typedef struct {
  size_t size;             /**< sizeof(braidShardStepOptions_t) as the caller compiled it */
  int optimizer;           /**< braidShardOptimizer_t (ignored by braidShardPrepareStep) */
  braidShardAdamW_t adamw; /**< its gradDivisor is ignored: see gradDivisor below */
  braidShardSGD_t sgd;
  /** The accumulated gradient sum is divided by gradDivisor x the loss scale before the
   *  update; 0 = data-parallel ranks x micro-batches (the mean). */
  double gradDivisor;
  /** > 0: clip the global L2 norm of the (unscaled, divided) gradient to this value, PyTorch's
   *  clip_grad_norm_ (coefficient maxGradNorm / (norm + 1e-6), applied when below 1). */
  float maxGradNorm;
  /** The factor the caller multiplied its loss by (the gradients are divided by it). 0: the
   *  dynamic scaler's current scale (braidShardSetLossScaler), or 1 without one. */
  float lossScale;
} braidShardStepOptions_t;

#define BRAID_SHARD_STEP_OPTIONS_INITIALIZER                                            \
  {                                                                                     \
    sizeof(braidShardStepOptions_t), braidShardOptAdamW, BRAID_SHARD_ADAMW_INITIALIZER, \
        BRAID_SHARD_SGD_INITIALIZER, 0.0, 0.0f, 0.0f                                    \
  }

/** What a step did. */
typedef struct {
  size_t size;         /**< sizeof(braidShardStepInfo_t) as the caller compiled it */
  int skipped;         /**< 1: a gradient held inf or NaN (fp16 overflow): nothing was updated */
  int clipped;         /**< 1: the gradient was scaled down to maxGradNorm */
  double gradNorm;     /**< global L2 norm of the unscaled gradient before clipping (inf or NaN
                            when skipped), identical on every rank */
  float lossScale;     /**< the loss scale this step divided by */
  float nextLossScale; /**< the scale to use for the next step (dynamic scaler), else lossScale */
  int64_t step;        /**< optimizer steps applied so far (skipped steps do not count) */
} braidShardStepInfo_t;

/** Dynamic loss scaling (PyTorch's GradScaler): on overflow the step is skipped and the scale
 *  multiplied by backoffFactor; after growthInterval steps in a row without overflow it is
 *  multiplied by growthFactor. */
typedef struct {
  size_t size; /**< sizeof(braidShardLossScaler_t) as the caller compiled it */
  float initScale;
  float growthFactor;
  float backoffFactor;
  int growthInterval;
} braidShardLossScaler_t;

#define BRAID_SHARD_LOSS_SCALER_INITIALIZER \
  { sizeof(braidShardLossScaler_t), 65536.0f, 2.0f, 0.5f, 2000 }

/** Turns the dynamic scaler on (NULL: off). Local; every rank must pass the same values. */
BRAID_API braidResult_t braidShardSetLossScaler(braidShard_t shard,
                                                const braidShardLossScaler_t* scaler);
/** The scale the caller should multiply its next loss by (1 without a dynamic scaler). */
BRAID_API braidResult_t braidShardGetLossScale(braidShard_t shard, float* scale);

/**
 * braidShardStep() with options: AdamW or SGD with momentum, loss scale, clipping. The boundary
 * work is that of braidShardStep(); in addition every rank checks its OS slice of the reduced
 * gradient for inf/NaN and sums its squares (in double, over the ranks of one full OS replica
 * only, so that each element counts once), and one all-reduce over the comm gives every rank the
 * same overflow flag and norm. On overflow the accumulated gradients are dropped, nothing is
 * updated, the call returns braidSuccess with info->skipped = 1 (and the dynamic scaler backs
 * off). `info` may be NULL. Collective over the whole comm.
 */
BRAID_API braidResult_t braidShardStepEx(braidShard_t shard, const braidShardStepOptions_t* opts,
                                         braidShardStepInfo_t* info);

/**
 * Optimizer escape hatch, part 1: the boundary work of braidShardStepEx() (replica reduction,
 * overflow check, norm and clipping) without an update. Afterwards, unless info->skipped, each
 * bucket's fp32 gradient shard (divided, unscaled, clipped) and the OS shard are available
 * through braidShardOptimizerShard() for the framework's own optimizer, which updates `master`
 * in place. Gather, ReduceGrad and Step are refused until braidShardFinishStep(). Collective.
 */
BRAID_API braidResult_t braidShardPrepareStep(braidShard_t shard,
                                              const braidShardStepOptions_t* opts,
                                              braidShardStepInfo_t* info);

/** This rank's OS shard of one bucket between PrepareStep and FinishStep. */
typedef struct {
  size_t size;       /**< sizeof(braidShardOsShard_t) as the caller compiled it */
  size_t offset;     /**< index in the bucket of the shard's first element */
  size_t count;      /**< elements of the shard inside the bucket (the padding after it is left
                          out; writing it is harmless, it is never redistributed) */
  float* master;     /**< fp32 master weights: update these */
  const float* grad; /**< fp32 gradient: sum / (gradDivisor x lossScale), clipped */
  float* m;          /**< braid's first moment / momentum buffer (free for the caller's use) */
  float* v;          /**< braid's second moment (free for the caller's use) */
} braidShardOsShard_t;

BRAID_API braidResult_t braidShardOptimizerShard(braidShard_t shard, int bucket,
                                                 braidShardOsShard_t* view);

/** Optimizer escape hatch, part 2: redistributes the updated master weights in the parameter
 *  dtype (nothing on a skipped step) and ends the step. Collective over the whole comm. */
BRAID_API braidResult_t braidShardFinishStep(braidShard_t shard);

/**
 * Checkpoint: writes `dir`/rank-NNNNN.bin on every rank (its OS shards: fp32 master, m, v per
 * bucket) and `dir`/manifest.txt on rank 0 (format, configuration, rank count, parameter type,
 * buckets and their sizes, step count, loss-scaler state, each rank's element range per bucket).
 * `dir` must exist and be visible to every rank (a shared file system for several hosts). No
 * bucket may be gathered and no gradient pending. Collective; returns once every rank's file is
 * complete; an I/O failure on any rank fails every rank.
 */
BRAID_API braidResult_t braidShardSave(braidShard_t shard, const char* dir);

/**
 * Loads a checkpoint written by braidShardSave() into `shard`, which may have another
 * configuration and rank count (resharding): each rank reads the element ranges of its P and OS
 * shards from the files that hold them. The buckets (count and sizes) and the parameter type must
 * be those of the checkpoint, else every rank returns braidErrInvalidUsage naming the difference.
 * Accumulated gradients are dropped; the step count and the loss scaler are restored. Collective.
 */
BRAID_API braidResult_t braidShardLoad(braidShard_t shard, const char* dir);

/** The bytes this rank allocated per state (shards with their padding). */
BRAID_API braidResult_t braidShardMemory(braidShard_t shard, braidShardMemory_t* mem);

/** What the sharding layer's communication is for: the indexes of braidShardTraffic_t's arrays. */
typedef enum {
  braidShardTrafficGather = 0,       /**< parameter all-gathers over the P group (braidShardGather
                                          and its prefetches) */
  braidShardTrafficGradReduce = 1,   /**< gradient reduce-scatters over the G group
                                          (braidShardReduceGrad) */
  braidShardTrafficReplica = 2,      /**< all-reduce of the G shards across replicas, per
                                          micro-batch (fsdp-hybrid) or at the boundary (DDP's
                                          all-reduce, mics, paro-*) */
  braidShardTrafficRedistribute = 3, /**< all-gather of the updated parameters over the
                                          s_os / s_p ranks whose OS shards tile a P shard */
  braidShardTrafficControl = 4,      /**< the step's readiness agreement, gradient norm and
                                          overflow flag (one all-reduce each over all ranks) */
} braidShardTrafficPurpose_t;
#define BRAID_SHARD_TRAFFIC_PURPOSES 5

/**
 * Payload bytes this rank sent, counted by the sharding layer from what it asks each collective
 * to move (element counts x dtype size), not from the transports. Per collective over a group
 * of k ranks, the bytes one rank sends under the ring (NCCL) definition, whatever algorithm
 * braid picks: all-gather and reduce-scatter (k - 1) x the per-rank count; all-reduce
 * floor(2 (k - 1) x count / k) (count in bytes); groups of one rank send nothing.
 * Level: a collective counts `intra` when every rank of its group is on this rank's node, else
 * `inter` (all of it: an upper bound on the bytes that cross nodes; a ring over 2 nodes x 2 ranks
 * sends half of them inside the node). Counted when issued: a prefetch the caller never uses
 * still moved its bytes. Covers braidShardGather, ReduceGrad and the step (Step, StepEx,
 * PrepareStep, FinishStep); Create, Save and Load are not counted. The per-step formulas for
 * each preset are in docs/sharding.md ("Traffic"). The transports' counters
 * (braidCommPeerTraffic) are slightly larger: they add message framing.
 */
typedef struct {
  uint64_t intra[BRAID_SHARD_TRAFFIC_PURPOSES]; /**< by braidShardTrafficPurpose_t */
  uint64_t inter[BRAID_SHARD_TRAFFIC_PURPOSES];
  uint64_t intraTotal, interTotal; /**< sums of the arrays */
  uint64_t collectives;            /**< collectives counted (groups of one rank excluded) */
  /**
   * Timeline of the same collectives, in seconds of this rank's wall clock. `exposedSeconds`:
   * time the layer's calls (Gather, ReduceGrad, the step) spent blocked on communication: in
   * blocking collectives, and in waits for a prefetched gather or a reduce-scatter in flight.
   * `hiddenSeconds`: for each non-blocking collective, the time from its issue to the moment the
   * layer first waited for it, during which the caller computed. The layer cannot see when a
   * collective finished before that wait, so hiddenSeconds is an upper bound on the communication
   * time hidden; hiddenSeconds + exposedSeconds bounds the time communication was in flight.
   */
  double exposedSeconds;
  double hiddenSeconds;
} braidShardTraffic_t;

/** The bytes sent since braidShardCreate or the last braidShardTrafficReset. Local. */
BRAID_API braidResult_t braidShardTraffic(braidShard_t shard, braidShardTraffic_t* out);

/** Sets the counters of braidShardTraffic to zero (e.g. to measure one step). Local. */
BRAID_API braidResult_t braidShardTrafficReset(braidShard_t shard);

/**
 * The analytic per-step traffic of one rank (docs/sharding.md, "Traffic"): the bytes
 * braidShardTraffic counts over one step of `microbatches` micro-batches in which the caller
 * gathers every bucket `gathersPerMicrobatch` times (2: forward and backward), for a model of
 * `phi` parameters of `paramBytes` bytes, by purpose and level; the step's control all-reduces
 * included (not the escape hatch's extra agreement). Exact when phi is a multiple of the ranks
 * (else rounded down per collective; real buckets add their padding). Quantized gathers and
 * reduce-scatters count (group - 1) x the encoding of the per-rank elements; with an hpZ copy the
 * first gather of each micro-batch is from the P shard and the others from the copy (intra-node).
 * The step encodes each bucket on its own, so with several buckets the counters exceed this by
 * up to 20 bytes per bucket and collective. `collectives` and the timeline are 0. Pure, no
 * communication: the planner's and a trainer's estimate.
 */
BRAID_API braidResult_t braidShardTrafficFormula(const braidShardConfig_t* cfg, uint64_t phi,
                                                 int paramBytes, int microbatches,
                                                 int gathersPerMicrobatch,
                                                 braidShardTraffic_t* out);

/** Frees the shards and the sub-communicators (waits for prefetches still in flight). */
BRAID_API braidResult_t braidShardDestroy(braidShard_t shard);

/** The message of `shard`'s last failure; with NULL, of this thread's last failure outside a
 *  handle (validation, presets, create). Never NULL. */
BRAID_API const char* braidShardGetLastError(braidShard_t shard);

/* ------------------------------------------------------------------ the planner (Lins)
 * sharding.md section 4: enumerate every valid factor choice for a model and a cluster, drop
 * those over the device memory, predict each one's communication time per step with braid's
 * cost model (braidEstimateCollective, the tuner's model) and return them ranked. Formulas:
 * docs/sharding.md, "The planner". braidShardCostLins instead prices Lins' own executor
 * (sharding.md section 4.1), to reproduce the paper's choices.
 */

/** The model to plan for. Initialise with BRAID_SHARD_MODEL_INITIALIZER. */
typedef struct {
  size_t size;   /**< sizeof(braidShardModel_t) as the caller compiled it */
  double params; /**< Phi, parameters (used when nbuckets == 0) */
  int nbuckets;  /**< > 0: the model is these buckets (one per transformer block, say) */
  const uint64_t* bucketNumel; /**< nbuckets sizes in parameters, or NULL */
  int layers;       /**< transformer layers (buckets when nbuckets == 0: Phi / layers each) */
  int hidden;       /**< hidden size h (activation estimate) */
  int seq;          /**< sequence length s */
  int microBatch;   /**< micro-batch size b (sequences) */
  int microBatches; /**< M: micro-batches per step (gradient accumulation) */
  int paramBytes;   /**< bytes per parameter and gradient element (2: bf16/fp16, 4: fp32) */
  int recompute;    /**< 1: full activation recomputation (only layer inputs kept) */
} braidShardModel_t;

#define BRAID_SHARD_MODEL_INITIALIZER \
  { sizeof(braidShardModel_t), 0.0, 0, NULL, 1, 0, 0, 1, 1, 2, 0 }

/** The cluster. Initialise with BRAID_SHARD_CLUSTER_INITIALIZER (latencies 2 us intra-node and
 *  5 us inter-node, NVLink and InfiniBand as NCCL sees them; set the bandwidths). */
typedef struct {
  size_t size;            /**< sizeof(braidShardCluster_t) as the caller compiled it */
  int ranksPerNode;       /**< R */
  int nodes;              /**< n */
  double deviceMemory;    /**< bytes per device */
  braidLinkParams_t link; /**< per-level latency and bandwidth (braid.h) */
} braidShardCluster_t;

/* clang-format off */
#define BRAID_SHARD_CLUSTER_INITIALIZER \
  { sizeof(braidShardCluster_t), 1, 1, 0.0, {2e-6, 1e11, 5e-6, 1e10, 1} }
/* clang-format on */

/**
 * The cost model the planner ranks with (braidShardPlanOptions_t.costModel).
 * - braidShardCostBraid: the collectives braid's step runs (docs/sharding.md, "The planner").
 * - braidShardCostLins: Lins' own terms, constraints and memory model (sharding.md section 4.1:
 *   T_p + T_g + T_os0 + T_os1, s_g in {s_p, s_os}, no hpZ or quantization), each collective
 *   costed by braid's cost model in place of Lins' measured bandwidth table (NCCL's rings for
 *   gathers, reduce-scatters and broadcasts, braid's best all-reduce). Ties go to fewer nodes,
 *   then the smaller cost of one more micro-batch, then less memory. It reproduces the paper's
 *   choices; it prices Lins' executor, not braid's step. Refuses allowQuantization and
 *   allowPartialNode (Lins has neither).
 */
typedef enum { braidShardCostBraid = 0, braidShardCostLins = 1 } braidShardCostModel_t;

/** Planner options. Initialise with BRAID_SHARD_PLAN_OPTIONS_INITIALIZER. */
typedef struct {
  size_t size;           /**< sizeof(braidShardPlanOptions_t) as the caller compiled it */
  int allowQuantization; /**< 1: also consider qwZ (INT8 gathers) and qgZ (INT4 reduce-scatters) */
  /** 1: the redistribution overlaps the next step's forward (spec step 5): only its first
   *  bucket is charged. */
  int assumeOverlap;
  int allowPartialNode; /**< 1: also consider s^intra < R with s^inter > 1 */
  double reserveBytes;  /**< device memory kept free (runtime, fragmentation), bytes */
  /** a braidShardCostModel_t (default braidShardCostBraid). Read only when `size` covers it: a
   *  caller compiled before this field was added gets braid's model. */
  int costModel;
} braidShardPlanOptions_t;

#define BRAID_SHARD_PLAN_OPTIONS_INITIALIZER \
  { sizeof(braidShardPlanOptions_t), 0, 0, 0, 0.0, braidShardCostBraid }

/** One configuration as the planner sees it. */
typedef struct {
  braidShardConfig_t config;
  double commSeconds;     /**< predicted communication time per step */
  double stateBytes;      /**< P + G + OS shards (+ hpZ copy) per device */
  double activationBytes; /**< activation estimate per device */
  double bufferBytes;     /**< gathered buckets, reduce-scatter scratch, gradient hand-over */
  double memoryBytes;     /**< the sum of the three */
  double interBytes;      /**< bytes each node sends to other nodes per step */
  double intraBytes;      /**< bytes each rank sends inside its node per step */
  double sendBytes;       /**< bytes each rank sends per step (both levels; sharding.md sec. 4) */
  int fits;               /**< memoryBytes <= deviceMemory - reserveBytes */
} braidShardPlanEntry_t;

/** The planner's answer. Release with braidShardPlanFree(). */
typedef struct {
  size_t size;                   /**< sizeof(braidShardPlan_t) as the caller compiled it */
  braidShardPlanEntry_t best;    /**< valid when count > 0 */
  int count;                     /**< configurations that fit, ranked in `ranked` */
  int considered;                /**< valid configurations enumerated */
  braidShardPlanEntry_t* ranked; /**< count entries, fastest first (owned by the plan) */
  char explanation[2048];        /**< one paragraph: why `best`, against ZeRO-3 and MiCS */
} braidShardPlan_t;

/**
 * Plans: enumerates every configuration valid under braidShardConfigValidate() for the cluster's
 * shape (with quantized variants when allowed), computes memory per device and communication
 * time per step under options->costModel, drops those over the memory, and ranks the rest by
 * time (ties: the less sharded first; under Lins' model its own rule). The explanation also
 * names the other model's pick and the term where the two differ most. `options` may be NULL
 * (defaults). When nothing fits, returns braidErrInvalidArgument with a message naming the smallest
 * memory found. *plan is written on success only.
 */
BRAID_API braidResult_t braidShardPlan(const braidShardModel_t* model,
                                       const braidShardCluster_t* cluster,
                                       const braidShardPlanOptions_t* options,
                                       braidShardPlan_t* plan);

/** Frees plan->ranked (safe on a zeroed plan and twice). */
BRAID_API void braidShardPlanFree(braidShardPlan_t* plan);

/**
 * The planner's memory and time model for one configuration `cfg` (its shape must be the
 * cluster's), whether or not it fits: e.g. to compare a preset with the plan.
 */
BRAID_API braidResult_t braidShardPlanEvaluate(const braidShardModel_t* model,
                                               const braidShardCluster_t* cluster,
                                               const braidShardPlanOptions_t* options,
                                               const braidShardConfig_t* cfg,
                                               braidShardPlanEntry_t* entry);

/** One term of a configuration's predicted communication (braidShardPlanTerms). */
typedef struct {
  /** The part of the step it belongs to, the same for every configuration under one model, so
   *  that two configurations' terms line up: braid's "parameter gathers", "gradient
   *  reduce-scatter", "replica reduction", "gradient norm", "redistribution"; Lins' "T_p",
   *  "T_g", "T_os0", "T_os1". */
  char term[32];
  char what[160];    /**< the collective, its group and how often, in words */
  double seconds;    /**< predicted seconds per step */
  double sendBytes;  /**< bytes each rank sends per step */
  double interBytes; /**< bytes each node sends across nodes per step */
} braidShardPlanTerm_t;

/**
 * The terms of `cfg`'s predicted communication under options->costModel (they sum to the
 * entry's commSeconds): up to `capacity` written to terms[], their number to *count (which may
 * exceed capacity: call again with more room). Under the Lins model `cfg` must be one Lins
 * considers (s_g = s_p or s_g = s_os, no hpZ, qwZ or qgZ); otherwise braidErrInvalidArgument
 * says why.
 */
BRAID_API braidResult_t braidShardPlanTerms(const braidShardModel_t* model,
                                            const braidShardCluster_t* cluster,
                                            const braidShardPlanOptions_t* options,
                                            const braidShardConfig_t* cfg,
                                            braidShardPlanTerm_t* terms, int capacity, int* count);

/**
 * The `lins` preset at init: braidShardPlan() for the shape of `comm` (R and n as
 * braidShardPreset() finds them; cluster->ranksPerNode and cluster->nodes are ignored), writing
 * the plan's best configuration (preset "lins") to *cfg. Local, no communication: every rank
 * computes the same plan from the same inputs. `options` may be NULL.
 */
BRAID_API braidResult_t braidShardPresetPlanned(braidComm_t comm, const braidShardModel_t* model,
                                                const braidShardCluster_t* cluster,
                                                const braidShardPlanOptions_t* options,
                                                braidShardConfig_t* cfg);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_SHARD_H_ */
