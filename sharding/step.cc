// The sharded step (spec/sharding.md section 2) for fp32 parameters and AdamW in fp32, on
// braid's public C API only: sub-communicators are views (braidCommSplit) of the caller's comm.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"

using namespace braid::shard;

struct Bucket {
  size_t numel = 0;
  size_t padded = 0;                // multiple of s_os (so of s_g and s_p too: nesting)
  std::vector<float> param_shard;   // padded / s_p: this rank's P shard
  std::vector<float> grad_shard;    // padded / s_g: accumulated gradient shard
  std::vector<float> master, m, v;  // padded / s_os: the OS shard
  std::vector<float> full;          // gathered parameters while in use (s_p > 1)
  braidRequest_t gather = nullptr;  // in-flight gather into `full`
  bool gathered = false;            // handed to the caller, not yet released
  int reduced = 0;                  // micro-batches reduced since the last step
};

struct braidShard {
  braidComm_t comm = nullptr;  // the caller's, not owned
  braidShardConfig_t cfg{};
  int rank = 0, nranks = 0;
  RankLayout layout;
  // Views of `comm`, owned; NULL where the group is this rank alone.
  braidComm_t p_comm = nullptr, g_comm = nullptr, replica_comm = nullptr, redist_comm = nullptr;
  std::vector<Bucket> buckets;
  // Two padded gradient buffers (s_g > 1): one bucket's reduce-scatter stays in flight while the
  // caller computes the next bucket's gradient; the other buffer takes that gradient.
  std::vector<float> scratch[2];
  int slot = 0;                      // the buffer the next reduce-scatter uses
  int pending_bucket = -1;           // bucket whose reduce-scatter is in flight, or -1
  braidRequest_t pending = nullptr;  // its request (in scratch[slot ^ 1])
  int last_gather = -1, direction = 1;
  int64_t t = 0;  // AdamW step count
  std::string error = "no error";

  braidResult_t Fail(braidResult_t code, const std::string& what) {
    error = "rank " + std::to_string(rank) + ": " + what;
    return code;
  }
  braidResult_t CommFail(braidResult_t code, const char* op, braidComm_t c) {
    return Fail(code, std::string(op) + " failed: " + braidGetLastError(c ? c : comm));
  }
  int S(int state) const { return SizeOf(FactorOf(cfg, state)); }
};

namespace {

void DestroyComm(braidComm_t* c) {
  if (*c) braidCommDestroy(*c);
  *c = nullptr;
}

// Splits `comm` into groups by colour, ordered by key; groups of one rank get no communicator.
braidResult_t View(braidComm_t comm, int color, int key, int expected_size, braidComm_t* out) {
  *out = nullptr;
  braidComm_t c = nullptr;
  // Every rank calls every split, even where its group is itself, so the order matches.
  braidResult_t rc = braidCommSplit(comm, color, key, &c, nullptr);
  if (rc != braidSuccess) return rc;
  if (expected_size == 1) {
    braidCommDestroy(c);
    return braidSuccess;
  }
  *out = c;
  return braidSuccess;
}

// Agreement across ranks: for each value, max and min over the comm in one all-reduce (the max
// of v and of -v).
braidResult_t MinMax(braidComm_t comm, const std::vector<int64_t>& v, std::vector<int64_t>* mn,
                     std::vector<int64_t>* mx) {
  std::vector<int64_t> buf(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    buf[i] = v[i];
    buf[v.size() + i] = -v[i];
  }
  braidResult_t rc = braidAllReduce(buf.data(), buf.data(), buf.size(), braidInt64, braidMax, comm);
  if (rc != braidSuccess) return rc;
  mn->resize(v.size());
  mx->resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    (*mx)[i] = buf[i];
    (*mn)[i] = -buf[v.size() + i];
  }
  return braidSuccess;
}

braidResult_t StartGather(braidShard* sh, int b) {
  Bucket& k = sh->buckets[b];
  k.full.resize(k.padded);
  const size_t len = k.padded / sh->S(kP);
  return braidIallGather(k.param_shard.data(), k.full.data(), len, braidFloat32, sh->p_comm,
                         &k.gather);
}

}  // namespace

extern "C" {

static braidResult_t ShardCreateImpl(braidComm_t comm, const braidShardConfig_t* cfg, int nbuckets,
                                     const size_t* bucketNumel, braidDataType_t paramType,
                                     const void* const* initParams, braidShard_t* shard) {
  if (!shard) return SetLastError(braidErrInvalidArgument, "braidShardCreate: shard is NULL");
  *shard = nullptr;
  if (!comm || !cfg || nbuckets < 1 || !bucketNumel || !initParams)
    return SetLastError(braidErrInvalidArgument,
                        "braidShardCreate: NULL comm, config, bucket table or parameters, or no "
                        "bucket");
  auto sh = std::make_unique<braidShard>();
  sh->comm = comm;
  sh->cfg = *cfg;
  if (braidCommUserRank(comm, &sh->rank) != braidSuccess ||
      braidCommCount(comm, &sh->nranks) != braidSuccess)
    return SetLastError(braidErrInvalidArgument,
                        std::string("braidShardCreate: bad comm: ") + braidGetLastError(comm));
  // Local checks first; their outcome is agreed on below so that every rank fails together.
  std::string local_error = Validate(*cfg);
  const int R = cfg->ranksPerNode;
  if (local_error.empty() && sh->nranks != R * cfg->nodes)
    local_error = "the comm has " + std::to_string(sh->nranks) + " ranks but the configuration " +
                  std::to_string(R) + " ranks per node x " + std::to_string(cfg->nodes) +
                  " nodes = " + std::to_string(R * cfg->nodes);
  if (local_error.empty() && paramType != braidFloat32)
    local_error = "parameter type " + std::to_string(paramType) +
                  ": this version runs fp32 parameters only (bf16/fp16 are not built yet)";
  if (local_error.empty() && (cfg->hpz || cfg->qwz || cfg->qgz))
    local_error = "preset '" + std::string(cfg->preset) +
                  "' asks for hpZ/qwZ/qgZ, which are not built yet (docs/sharding.md)";
  if (local_error.empty()) {
    // The node-major layout is an assumption about the comm: check it against the topology.
    braidComm_t node = nullptr;
    int node_size = 0, node_rank = -1;
    if (braidCommSplitLevel(comm, braidLevelNode, &node) == braidSuccess) {
      braidCommCount(node, &node_size);
      braidCommUserRank(node, &node_rank);
      braidCommDestroy(node);
    }
    if (node_size != R || node_rank != sh->rank % R)
      local_error = "this rank's node holds " + std::to_string(node_size) +
                    " ranks with it at local rank " + std::to_string(node_rank) +
                    ", but the configuration needs " + std::to_string(R) +
                    " consecutive ranks per node (rank = node * R + local; set BRAID_HOSTID or "
                    "fix ranksPerNode)";
  }
  for (int b = 0; local_error.empty() && b < nbuckets; ++b)
    if (bucketNumel[b] == 0 || !initParams[b])
      local_error = "bucket " + std::to_string(b) + " is empty or has no initial parameters";

  // Fingerprint of everything that must match between ranks.
  uint64_t hash = 1469598103934665603ull;
  for (int b = 0; b < nbuckets; ++b) hash = (hash ^ bucketNumel[b]) * 1099511628211ull;
  std::vector<int64_t> v = {local_error.empty() ? 0 : 1,
                            nbuckets,
                            static_cast<int64_t>(hash & 0x7fffffffffffffffll),
                            paramType,
                            cfg->ranksPerNode,
                            cfg->nodes,
                            cfg->p.intra,
                            cfg->p.inter,
                            cfg->g.intra,
                            cfg->g.inter,
                            cfg->os.intra,
                            cfg->os.inter,
                            cfg->replicaEveryMicrobatch};
  std::vector<int64_t> mn, mx;
  if (MinMax(comm, v, &mn, &mx) != braidSuccess)
    return SetLastError(braidErrRemote, std::string("braidShardCreate: agreement failed: ") +
                                            braidGetLastError(comm));
  const std::string where = "braidShardCreate on rank " + std::to_string(sh->rank) + ": ";
  if (!local_error.empty()) return SetLastError(braidErrInvalidUsage, where + local_error);
  if (mx[0] != 0)
    return SetLastError(braidErrInvalidUsage,
                        where + "another rank refused its arguments (see its message)");
  if (mn[1] != mx[1] || mn[2] != mx[2])
    return SetLastError(braidErrInvalidUsage,
                        where + "the ranks registered different buckets (counts " +
                            std::to_string(mn[1]) + ".." + std::to_string(mx[1]) +
                            ", or different sizes): every rank must register the same buckets "
                            "in the same order");
  for (size_t i = 3; i < v.size(); ++i)
    if (mn[i] != mx[i])
      return SetLastError(braidErrInvalidUsage,
                          where + "the ranks passed different configurations or parameter types");

  sh->layout = Layout(sh->cfg, sh->rank);
  const RankLayout& l = sh->layout;
  const int sp = sh->S(kP), sg = sh->S(kG), so = sh->S(kOs), D = sh->nranks;
  braidResult_t rc = View(comm, l.group[kP], l.pos[kP], sp, &sh->p_comm);
  if (rc == braidSuccess) rc = View(comm, l.group[kG], l.pos[kG], sg, &sh->g_comm);
  if (rc == braidSuccess) rc = View(comm, l.replica_color, sh->rank, D / sg, &sh->replica_comm);
  if (rc == braidSuccess) rc = View(comm, l.redist_color, l.pos[kOs], so / sp, &sh->redist_comm);
  if (rc != braidSuccess) {
    std::string msg = braidGetLastError(comm);
    braidShardDestroy(sh.release());
    return SetLastError(rc, where + "split failed: " + msg);
  }

  sh->buckets.resize(nbuckets);
  size_t max_padded = 0;
  for (int b = 0; b < nbuckets; ++b) {
    Bucket& k = sh->buckets[b];
    k.numel = bucketNumel[b];
    k.padded = (k.numel + so - 1) / so * so;
    max_padded = std::max(max_padded, k.padded);
    const float* init = static_cast<const float*>(initParams[b]);
    auto slice = [&](size_t off, size_t len, std::vector<float>* out) {
      out->assign(len, 0.0f);  // the padding stays zero
      for (size_t i = 0; i < len && off + i < k.numel; ++i) (*out)[i] = init[off + i];
    };
    slice(l.pos[kP] * (k.padded / sp), k.padded / sp, &k.param_shard);
    slice(l.pos[kOs] * (k.padded / so), k.padded / so, &k.master);
    k.grad_shard.assign(k.padded / sg, 0.0f);
    k.m.assign(k.padded / so, 0.0f);
    k.v.assign(k.padded / so, 0.0f);
  }
  if (sg > 1) {
    sh->scratch[0].resize(max_padded);
    sh->scratch[1].resize(max_padded);
  }
  *shard = sh.release();
  return braidSuccess;
}

static braidResult_t ShardGatherImpl(braidShard_t sh, int b, const void** params) {
  if (!sh || !params) return SetLastError(braidErrInvalidArgument, "braidShardGather: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()))
    return sh->Fail(braidErrInvalidArgument, "braidShardGather: unknown bucket " +
                                                 std::to_string(b) + " (registered " +
                                                 std::to_string(sh->buckets.size()) + ")");
  Bucket& k = sh->buckets[b];
  if (k.gathered)
    return sh->Fail(braidErrInvalidUsage, "braidShardGather: bucket " + std::to_string(b) +
                                              " is already gathered (release it first)");
  if (sh->S(kP) == 1) {
    *params = k.param_shard.data();
    k.gathered = true;
    return braidSuccess;
  }
  if (sh->last_gather >= 0 && b != sh->last_gather) sh->direction = b > sh->last_gather ? 1 : -1;
  sh->last_gather = b;
  braidResult_t rc = braidSuccess;
  if (!k.gather) rc = StartGather(sh, b);
  if (rc == braidSuccess) rc = braidWait(&k.gather, -1);
  if (rc != braidSuccess) return sh->CommFail(rc, "braidShardGather: all-gather", sh->p_comm);
  k.gathered = true;
  *params = k.full.data();
  // Prefetch: the next bucket's gather runs while the caller computes on this one.
  const int next = b + sh->direction;
  if (next >= 0 && next < static_cast<int>(sh->buckets.size())) {
    Bucket& nk = sh->buckets[next];
    if (!nk.gather && !nk.gathered) {
      rc = StartGather(sh, next);
      if (rc != braidSuccess) return sh->CommFail(rc, "braidShardGather: prefetch", sh->p_comm);
    }
  }
  return braidSuccess;
}

static braidResult_t ShardReleaseImpl(braidShard_t sh, int b) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardRelease: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()) || !sh->buckets[b].gathered)
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardRelease: bucket " + std::to_string(b) + " is not gathered");
  Bucket& k = sh->buckets[b];
  k.gathered = false;
  if (sh->S(kP) > 1) std::vector<float>().swap(k.full);
  return braidSuccess;
}

namespace {

// Adds a reduced gradient to the bucket's accumulator (`len` elements, of which the first `valid`
// are at `shard`, the rest zero padding), after the per-micro-batch replica all-reduce of
// HYBRID_SHARD. `tmp` (>= len elements, may hold `shard`) is scratch for that all-reduce.
braidResult_t Accumulate(braidShard* sh, Bucket& k, const float* shard, size_t valid, size_t len,
                         float* tmp) {
  if (sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
    if (shard != tmp) std::memmove(tmp, shard, valid * sizeof(float));
    std::fill(tmp + valid, tmp + len, 0.0f);
    braidResult_t rc = braidAllReduce(tmp, tmp, len, braidFloat32, braidSum, sh->replica_comm);
    if (rc != braidSuccess)
      return sh->CommFail(rc, "braidShardReduceGrad: replica all-reduce", sh->replica_comm);
    shard = tmp;
    valid = len;
  }
  for (size_t i = 0; i < valid; ++i) k.grad_shard[i] += shard[i];
  return braidSuccess;
}

// Waits for the reduce-scatter in flight, if any, and accumulates its shard.
braidResult_t FinishPending(braidShard* sh) {
  if (sh->pending_bucket < 0) return braidSuccess;
  Bucket& k = sh->buckets[sh->pending_bucket];
  sh->pending_bucket = -1;
  braidResult_t rc = braidWait(&sh->pending, -1);
  if (rc != braidSuccess)
    return sh->CommFail(rc, "braidShardReduceGrad: reduce-scatter", sh->g_comm);
  float* buf = sh->scratch[sh->slot ^ 1].data();
  const size_t len = k.padded / sh->S(kG);
  return Accumulate(sh, k, buf + sh->layout.pos[kG] * len, len, len, buf);
}

}  // namespace

static braidResult_t ShardReduceGradImpl(braidShard_t sh, int b, const void* grad) {
  if (!sh || !grad) return SetLastError(braidErrInvalidArgument, "braidShardReduceGrad: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()))
    return sh->Fail(braidErrInvalidArgument, "braidShardReduceGrad: unknown bucket " +
                                                 std::to_string(b) + " (registered " +
                                                 std::to_string(sh->buckets.size()) + ")");
  Bucket& k = sh->buckets[b];
  const float* g = static_cast<const float*>(grad);
  const int sg = sh->S(kG);
  if (sg == 1) {
    // Full gradients accumulate locally; the replica all-reduce (if per micro-batch) needs a
    // padded copy.
    if (sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
      sh->scratch[0].resize(std::max(sh->scratch[0].size(), k.padded));
      braidResult_t rc = Accumulate(sh, k, g, k.numel, k.padded, sh->scratch[0].data());
      if (rc != braidSuccess) return rc;
    } else {
      for (size_t i = 0; i < k.numel; ++i) k.grad_shard[i] += g[i];
    }
    ++k.reduced;
    return braidSuccess;
  }
  // Copy (the caller may reuse its buffer at once), pad, and start the reduce-scatter in place:
  // the shard lands at buf + pos * len. The previous bucket's reduction is then finished, so
  // one reduction is always in flight while the caller computes the next gradient.
  const size_t len = k.padded / sg;
  float* buf = sh->scratch[sh->slot].data();
  std::memcpy(buf, g, k.numel * sizeof(float));
  std::fill(buf + k.numel, buf + k.padded, 0.0f);
  braidRequest_t req = nullptr;
  braidResult_t rc = braidIreduceScatter(buf, buf + sh->layout.pos[kG] * len, len, braidFloat32,
                                         braidSum, sh->g_comm, &req);
  if (rc != braidSuccess)
    return sh->CommFail(rc, "braidShardReduceGrad: reduce-scatter", sh->g_comm);
  rc = FinishPending(sh);  // the previous reduction, in scratch[slot ^ 1]
  sh->slot ^= 1;           // so this one is in scratch[slot ^ 1] when it is finished
  sh->pending = req;
  sh->pending_bucket = b;
  ++k.reduced;
  return rc;
}

static braidResult_t ShardStepImpl(braidShard_t sh, const braidShardAdamW_t* opt) {
  if (!sh || !opt) return SetLastError(braidErrInvalidArgument, "braidShardStep: NULL");
  // Finish prefetches: the step rewrites the P shards they read.
  for (Bucket& k : sh->buckets)
    if (k.gather) {
      braidResult_t rc = braidWait(&k.gather, -1);
      if (rc != braidSuccess) return sh->CommFail(rc, "braidShardStep: prefetch", sh->p_comm);
      if (!k.gathered && sh->S(kP) > 1) std::vector<float>().swap(k.full);
    }
  // The last reduce-scatter of the micro-batch is still in flight.
  braidResult_t pending_rc = FinishPending(sh);
  if (pending_rc != braidSuccess) return pending_rc;
  std::string local_error;
  int mb = sh->buckets[0].reduced;
  for (size_t b = 0; b < sh->buckets.size() && local_error.empty(); ++b) {
    const Bucket& k = sh->buckets[b];
    if (k.gathered)
      local_error = "bucket " + std::to_string(b) + " is still gathered (release it first)";
    else if (k.reduced == 0)
      local_error = "bucket " + std::to_string(b) +
                    " has no reduced gradient since the last step (call braidShardReduceGrad for "
                    "every bucket first)";
    else if (k.reduced != mb)
      local_error = "bucket " + std::to_string(b) + " was reduced " + std::to_string(k.reduced) +
                    " times but bucket 0 " + std::to_string(mb) + " times";
  }
  std::vector<int64_t> mn, mx;
  braidResult_t rc = MinMax(sh->comm, {local_error.empty() ? 0 : 1, mb}, &mn, &mx);
  if (rc != braidSuccess) return sh->CommFail(rc, "braidShardStep: agreement", sh->comm);
  if (!local_error.empty()) return sh->Fail(braidErrInvalidUsage, "braidShardStep: " + local_error);
  if (mx[0] != 0)
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardStep: another rank is not ready for the step (see its message)");
  if (mn[1] != mx[1])
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardStep: the ranks reduced different numbers "
                    "of micro-batches (" +
                        std::to_string(mn[1]) + ".." + std::to_string(mx[1]) + ")");

  const int sp = sh->S(kP), sg = sh->S(kG), so = sh->S(kOs);
  const RankLayout& l = sh->layout;
  const double divisor =
      opt->gradDivisor > 0 ? opt->gradDivisor : static_cast<double>(sh->nranks) * mb;
  const float scale = static_cast<float>(1.0 / divisor);
  ++sh->t;
  // Bias corrections in double, rounded once to float: the reference does the same.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt->beta1), sh->t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(opt->beta2), sh->t));
  const float sqrt_bc2 = std::sqrt(bc2);
  const float step_size = opt->lr / bc1;
  const float decay = 1.0f - opt->lr * opt->weightDecay;
  for (Bucket& k : sh->buckets) {
    const size_t g_len = k.padded / sg, os_len = k.padded / so;
    if (!sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
      rc = braidAllReduce(k.grad_shard.data(), k.grad_shard.data(), g_len, braidFloat32, braidSum,
                          sh->replica_comm);
      if (rc != braidSuccess)
        return sh->CommFail(rc, "braidShardStep: replica all-reduce", sh->replica_comm);
    }
    // Select & drop: the OS shard is a sub-slice of the G shard.
    const float* g = k.grad_shard.data() + (static_cast<size_t>(l.pos[kOs]) * os_len -
                                            static_cast<size_t>(l.pos[kG]) * g_len);
    for (size_t i = 0; i < os_len; ++i) {
      const float gi = g[i] * scale;
      float p = k.master[i] * decay;
      k.m[i] = opt->beta1 * k.m[i] + (1.0f - opt->beta1) * gi;
      k.v[i] = opt->beta2 * k.v[i] + (1.0f - opt->beta2) * gi * gi;
      const float denom = std::sqrt(k.v[i]) / sqrt_bc2 + opt->eps;
      p = p - step_size * (k.m[i] / denom);
      k.master[i] = p;
    }
    std::fill(k.grad_shard.begin(), k.grad_shard.end(), 0.0f);
    k.reduced = 0;
    // Redistribute: the OS shards of the redistribution group tile this rank's P shard.
    if (so / sp > 1) {
      rc = braidAllGather(k.master.data(), k.param_shard.data(), os_len, braidFloat32,
                          sh->redist_comm);
      if (rc != braidSuccess)
        return sh->CommFail(rc, "braidShardStep: redistribution all-gather", sh->redist_comm);
    } else {
      std::copy(k.master.begin(), k.master.end(), k.param_shard.begin());
    }
    // The padding of a shard must stay zero whatever AdamW did to it (weight decay keeps 0 at 0,
    // and its gradient is 0, so it does; nothing to do).
  }
  return braidSuccess;
}

static braidResult_t ShardMemoryImpl(braidShard_t sh, braidShardMemory_t* mem) {
  if (!sh || !mem) return SetLastError(braidErrInvalidArgument, "braidShardMemory: NULL");
  *mem = {};
  for (const Bucket& k : sh->buckets) {
    mem->params += k.param_shard.size() * sizeof(float);
    mem->grads += k.grad_shard.size() * sizeof(float);
    mem->optimizer += (k.master.size() + k.m.size() + k.v.size()) * sizeof(float);
  }
  mem->total = mem->params + mem->grads + mem->optimizer;
  return braidSuccess;
}

static braidResult_t ShardDestroyImpl(braidShard_t sh) {
  if (!sh) return braidSuccess;
  for (Bucket& k : sh->buckets)
    if (k.gather) braidWait(&k.gather, -1);
  if (sh->pending) braidWait(&sh->pending, -1);
  DestroyComm(&sh->redist_comm);
  DestroyComm(&sh->replica_comm);
  DestroyComm(&sh->g_comm);
  DestroyComm(&sh->p_comm);
  delete sh;
  return braidSuccess;
}

const char* braidShardGetLastError(braidShard_t sh) {
  return sh ? sh->error.c_str() : LastError();
}

}  // extern "C"

// The C entry points: each runs its implementation above under NoThrow.
extern "C" {
braidResult_t braidShardCreate(braidComm_t comm, const braidShardConfig_t* cfg, int nbuckets,
                               const size_t* bucketNumel, braidDataType_t paramType,
                               const void* const* initParams, braidShard_t* shard) {
  return NoThrow("braidShardCreate", [&] {
    return ShardCreateImpl(comm, cfg, nbuckets, bucketNumel, paramType, initParams, shard);
  });
}
braidResult_t braidShardGather(braidShard_t sh, int b, const void** params) {
  return NoThrow("braidShardGather", [&] { return ShardGatherImpl(sh, b, params); });
}
braidResult_t braidShardRelease(braidShard_t sh, int b) {
  return NoThrow("braidShardRelease", [&] { return ShardReleaseImpl(sh, b); });
}
braidResult_t braidShardReduceGrad(braidShard_t sh, int b, const void* grad) {
  return NoThrow("braidShardReduceGrad", [&] { return ShardReduceGradImpl(sh, b, grad); });
}
braidResult_t braidShardStep(braidShard_t sh, const braidShardAdamW_t* opt) {
  return NoThrow("braidShardStep", [&] { return ShardStepImpl(sh, opt); });
}
braidResult_t braidShardMemory(braidShard_t sh, braidShardMemory_t* mem) {
  return NoThrow("braidShardMemory", [&] { return ShardMemoryImpl(sh, mem); });
}
braidResult_t braidShardDestroy(braidShard_t sh) {
  return NoThrow("braidShardDestroy", [&] { return ShardDestroyImpl(sh); });
}
}  // extern "C"
