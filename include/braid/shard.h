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
 * This slice runs fp32 parameters with AdamW in fp32; hpZ, qwZ and qgZ are part of the
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
  int hpz;         /**< hpZ secondary parameter copy over this many ranks; 0 = none */
  int hpzInt8;     /**< 1: the secondary copy is INT8 (zero-topo) */
  int qwz;         /**< 1: INT8-quantized parameter gather (ZeRO++ qwZ) */
  int qgz;         /**< 1: INT4-quantized gradient reduce-scatter (ZeRO++ qgZ) */
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
  uint64_t params;    /**< P shard (not the gathered full buckets) */
  uint64_t grads;     /**< G shard accumulator */
  uint64_t optimizer; /**< fp32 master + first + second moment of the OS shard */
  uint64_t total;     /**< params + grads + optimizer */
} braidShardMemory_t;

/**
 * The formula of sharding.md section 1 for a model of `phi` parameters:
 * params = e * phi / s_p, grads = e * phi / s_g, optimizer = 12 * phi / s_os, with e =
 * `paramBytes` (2 for bf16/fp16, as in the spec's tables; 4 for fp32). Integer division rounds
 * up (a shard is padded, never short).
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
 * `paramType`; this slice supports braidFloat32 only) and takes `initParams[b]` (full bucket,
 * identical on every rank) as the initial values. Collective over `comm`, whose ranks must be
 * node-major (rank = node * R + local) with cfg->ranksPerNode ranks on each node. All ranks must
 * pass the same configuration and the same buckets: a mismatch fails on every rank with
 * braidErrInvalidUsage. Sub-communicators are views of `comm` (braidCommSplit); `comm` must
 * outlive the handle.
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
 * the local OS shard, runs AdamW on it (step count t incremented first), and all-gathers the
 * updated parameters so that every rank holds its P shard. Collective over the whole comm. Every
 * bucket must have been reduced the same number of times (>= 1) on every rank and no bucket may
 * be gathered; otherwise every rank returns braidErrInvalidUsage and the step does nothing.
 */
BRAID_API braidResult_t braidShardStep(braidShard_t shard, const braidShardAdamW_t* adamw);

/** The bytes this rank allocated per state (shards with their padding). */
BRAID_API braidResult_t braidShardMemory(braidShard_t shard, braidShardMemory_t* mem);

/** Frees the shards and the sub-communicators (waits for prefetches still in flight). */
BRAID_API braidResult_t braidShardDestroy(braidShard_t shard);

/** The message of `shard`'s last failure; with NULL, of this thread's last failure outside a
 *  handle (validation, presets, create). Never NULL. */
BRAID_API const char* braidShardGetLastError(braidShard_t shard);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_SHARD_H_ */
