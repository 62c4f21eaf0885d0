// The sharded step (spec/sharding.md section 2) on braid's public C API only: sub-communicators
// are views (braidCommSplit) of the caller's comm. Parameters and gradients live in the parameter
// dtype (fp32, bf16, fp16), the OS shard in fp32; the boundary is split into Prepare (reduction,
// overflow check, norm, clipping), the update (built-in AdamW/SGD in optimizer.cc, or the caller's
// optimizer) and Finish (redistribution), so that the escape hatch and the built-in step share one
// code path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/dtype.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"
#include "sharding/optimizer.h"
#include "sharding/plan_model.h"
#include "sharding/state.h"

using namespace braid::shard;

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

// Whether the boundary reduction should run split (SplitBoundary): the planner's decision
// (SplitBoundaryCheaper) for these buckets on this communicator's links, so that the step does
// what a plan for the same cluster costs.
bool SplitBoundaryPays(braidComm_t comm, const braidShardConfig_t& cfg, int nbuckets,
                       const size_t* numel, size_t esize) {
  PlanInputs in;
  for (int b = 0; b < nbuckets; ++b) {
    const double x = static_cast<double>(numel[b]);
    in.buckets[x] += 1;
    in.phi += x;
    in.max_bucket = std::max(in.max_bucket, x);
  }
  in.e = static_cast<double>(esize);
  in.R = cfg.ranksPerNode;
  in.n = cfg.nodes;
  const braidShardCluster_t defaults = BRAID_SHARD_CLUSTER_INITIALIZER;
  in.link = defaults.link;
  if (braidCommLinkParams(comm, &in.link) != braidSuccess) in.link = defaults.link;
  CostCache cost(in.link, static_cast<int>(esize));
  return SplitBoundaryCheaper(in, cfg, cost);
}

}  // namespace

namespace braid::shard {

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

braidResult_t Agree(braidShard* sh, const char* api, const std::string& local_error,
                    braidResult_t code) {
  std::vector<int64_t> mn, mx;
  braidResult_t rc = MinMax(sh->comm, {local_error.empty() ? 0 : 1}, &mn, &mx);
  if (rc != braidSuccess)
    return sh->CommFail(rc, (std::string(api) + ": agreement").c_str(), sh->comm);
  if (!local_error.empty()) return sh->Fail(code, std::string(api) + ": " + local_error);
  if (mx[0] != 0)
    return sh->Fail(code, std::string(api) + ": failed on another rank (see its message)");
  return braidSuccess;
}

}  // namespace braid::shard

namespace {

// Released gathered-bucket buffers kept for reuse (state.h, spare_full): the bucket in use and
// the one prefetched, the planner's buffer estimate.
constexpr size_t kSpareFullBuffers = 2;

// Whether the next gather of `k` reads a secondary copy held whole by this rank (hpz = 1): a
// local copy or decode with nothing in flight, so prefetching it would only do it twice.
bool GatherIsLocal(const braidShard* sh, const Bucket& k) {
  return sh->secondary && sh->cfg.hpz == 1 && k.secondary_valid && k.gathers > 0;
}

// Starts the gather of bucket b into k.full: from the primary P shard over the p-group (INT8 with
// qwZ), or, for any gather after the first since the bucket's last gradient hand-over (the
// backward pass), from the hpZ secondary copy over the hpZ group inside the node. A secondary
// copy over one rank is the whole bucket: copied (decoded) at once, nothing in flight.
braidResult_t StartGather(braidShard* sh, int b) {
  Bucket& k = sh->buckets[b];
  const size_t es = sh->esize;
  const size_t need = k.padded * es;
  if (k.full.empty()) {
    // The smallest spare that holds the bucket, used at its size (no zero-fill, no page
    // faults); else a buffer of this bucket's size, not the largest bucket's.
    auto& spares = sh->spare_full;
    auto fit = spares.end();
    for (auto it = spares.begin(); it != spares.end(); ++it)
      if (it->size() >= need && (fit == spares.end() || it->size() < fit->size())) fit = it;
    if (fit != spares.end()) {
      k.full.swap(*fit);
      spares.erase(fit);
    } else {
      k.full.resize(need);
    }
  }
  k.gather_issued = braidShard::Now();
  k.from_secondary = sh->secondary && k.secondary_valid && k.gathers > 0;
  ++k.gathers;
  if (k.from_secondary) {
    const int h = sh->cfg.hpz;
    const size_t len = k.padded / h;
    if (h == 1)
      return sh->cfg.hpzInt8
                 ? braidDequantize(k.secondary.data(), len, sh->dtype, &kWeightCodec, k.full.data())
                 : (std::memcpy(k.full.data(), k.secondary.data(), len * es), braidSuccess);
    braidResult_t rc;
    if (sh->cfg.hpzInt8) {
      // The encodings travel as bytes and are decoded when the gather is waited for.
      const size_t enc = k.secondary.size();
      k.encoded.resize(enc * h);
      rc = braidIallGather(k.secondary.data(), k.encoded.data(), enc, braidUint8, sh->hpz_comm,
                           &k.gather);
    } else {
      rc = braidIallGather(k.secondary.data(), k.full.data(), len, sh->dtype, sh->hpz_comm,
                           &k.gather);
    }
    if (rc == braidSuccess)
      sh->CountEncoded(braidShardTrafficGather, braidShard::kGroupHpz, k.secondary.size());
    return rc;
  }
  const size_t len = k.padded / sh->S(kP);
  braidResult_t rc;
  if (sh->cfg.qwz) {
    rc = braidIallGatherQuantized(k.param_shard.data(), k.full.data(), len, sh->dtype,
                                  &kWeightCodec, sh->p_comm, &k.gather);
    if (rc == braidSuccess)
      sh->CountEncoded(braidShardTrafficGather, braidShard::kGroupP,
                       EncodedSize(kWeightCodec, len));
  } else {
    rc =
        braidIallGather(k.param_shard.data(), k.full.data(), len, sh->dtype, sh->p_comm, &k.gather);
    if (rc == braidSuccess)
      sh->CountAllGather(braidShardTrafficGather, braidShard::kGroupP, len, es);
  }
  return rc;
}

// Bucket k's gathered copy is no longer needed: its buffer is kept for a later gather (two at
// most), else freed.
void RecycleFull(braidShard* sh, Bucket& k) {
  if (k.full.empty()) return;
  auto& spares = sh->spare_full;
  if (spares.size() < kSpareFullBuffers) {
    spares.push_back(std::move(k.full));
  } else {
    // Keep the largest: a spare serves any bucket up to its size.
    auto smallest =
        std::min_element(spares.begin(), spares.end(),
                         [](const auto& a, const auto& b) { return a.size() < b.size(); });
    if (smallest->size() < k.full.size()) smallest->swap(k.full);
  }
  std::vector<unsigned char>().swap(k.full);
}

// A gather of bucket b has completed: an INT8 secondary gather's encodings are decoded into the
// full bucket, slice by slice (each rank encoded its slice on its own).
braidResult_t CompleteGather(braidShard* sh, Bucket& k) {
  if (!k.from_secondary || !sh->cfg.hpzInt8 || sh->cfg.hpz == 1) return braidSuccess;
  const int h = sh->cfg.hpz;
  const size_t len = k.padded / h, enc = k.secondary.size();
  for (int j = 0; j < h; ++j) {
    braidResult_t rc = braidDequantize(k.encoded.data() + j * enc, len, sh->dtype, &kWeightCodec,
                                       k.full.data() + j * len * sh->esize);
    if (rc != braidSuccess) return rc;
  }
  std::vector<unsigned char>().swap(k.encoded);
  return braidSuccess;
}

// The size of each group the step communicates over and whether all of it is on this rank's
// node, from the layouts of all ranks (the same pure function the views were split by), so that
// braidShardTraffic can attribute bytes to a level without asking the topology again.
void ClassifyGroups(braidShard* sh) {
  const RankLayout& me = sh->layout;
  for (int g = 0; g < braidShard::kGroups; ++g) {
    sh->group_size[g] = 0;
    sh->group_intra[g] = true;
  }
  for (int r = 0; r < sh->nranks; ++r) {
    const RankLayout l = Layout(sh->cfg, r);
    const bool member[braidShard::kGroups] = {
        l.group[kP] == me.group[kP],
        l.group[kG] == me.group[kG],
        l.replica_color == me.replica_color,
        l.redist_color == me.redist_color,
        true,
        sh->secondary && l.hpz_color == me.hpz_color && l.node == me.node,
        l.slices_color == me.slices_color,
        l.copies_color == me.copies_color};
    for (int g = 0; g < braidShard::kGroups; ++g) {
      if (!member[g]) continue;
      ++sh->group_size[g];
      if (l.node != me.node) sh->group_intra[g] = false;
    }
  }
}

}  // namespace

braidResult_t braid::shard::FinishPrefetches(braidShard* sh, const char* api) {
  for (Bucket& k : sh->buckets)
    if (k.gather) {
      braidResult_t rc = sh->WaitTimed(&k.gather, k.gather_issued);
      if (rc != braidSuccess)
        return sh->CommFail(rc, (std::string(api) + ": prefetch").c_str(),
                            k.from_secondary ? sh->hpz_comm : sh->p_comm);
      if (!k.gathered && sh->S(kP) > 1) RecycleFull(sh, k);
      std::vector<unsigned char>().swap(k.encoded);
    }
  return braidSuccess;
}

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
  if (local_error.empty() && !SupportedParamType(paramType))
    local_error = "parameter type " + std::to_string(static_cast<int>(paramType)) +
                  " is not supported: parameters are braidFloat32 (7), braidBfloat16 (9) or "
                  "braidFloat16 (6)";
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

  // The boundary's form (SplitBoundary): BRAID_SHARD_BOUNDARY=split or allreduce forces one;
  // auto (the default) asks the planner's cost model on this communicator's links.
  int64_t split_vote = 0;
  const char* boundary_env = std::getenv("BRAID_SHARD_BOUNDARY");
  const std::string boundary = boundary_env && *boundary_env ? boundary_env : "auto";
  if (local_error.empty() && boundary != "auto" && boundary != "split" && boundary != "allreduce")
    local_error = "BRAID_SHARD_BOUNDARY='" + boundary + "': expected auto, split or allreduce";
  if (local_error.empty() && SplitBoundary(*cfg, sh->nranks))
    split_vote = boundary == "split" ||
                 (boundary == "auto" &&
                  SplitBoundaryPays(comm, *cfg, nbuckets, bucketNumel, ElemSize(paramType)));

  // Fingerprint of everything that must match between ranks.
  uint64_t hash = 1469598103934665603ull;
  for (int b = 0; b < nbuckets; ++b) hash = (hash ^ bucketNumel[b]) * 1099511628211ull;
  std::vector<int64_t> v = {local_error.empty() ? 0 : 1, nbuckets,
                            static_cast<int64_t>(hash & 0x7fffffffffffffffll), paramType,
                            cfg->ranksPerNode, cfg->nodes, cfg->p.intra, cfg->p.inter, cfg->g.intra,
                            cfg->g.inter, cfg->os.intra, cfg->os.inter, cfg->replicaEveryMicrobatch,
                            cfg->hpz, cfg->hpzInt8, cfg->qwz, cfg->qgz,
                            // BRAID_SHARD_BOUNDARY: a form forced on one rank binds them all.
                            boundary == "split"       ? 1
                            : boundary == "allreduce" ? 2
                                                      : 0,
                            // Last, agreed by max: this rank's vote for the split boundary.
                            split_vote};
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
  for (size_t i = 3; i + 2 < v.size(); ++i)
    if (mn[i] != mx[i])
      return SetLastError(braidErrInvalidUsage,
                          where + "the ranks passed different configurations or parameter types");
  if (const size_t i = v.size() - 2; mn[i] != mx[i])
    return SetLastError(braidErrInvalidUsage,
                        where +
                            "the ranks have different BRAID_SHARD_BOUNDARY settings (this "
                            "rank: " +
                            boundary + "): set it alike on every rank or on none");

  sh->layout = Layout(sh->cfg, sh->rank);
  sh->dtype = paramType;
  sh->esize = ElemSize(paramType);
  sh->os_primary = sh->layout.group[kOs] == Layout(sh->cfg, 0).group[kOs];
  const RankLayout& l = sh->layout;
  const int sp = sh->S(kP), sg = sh->S(kG), so = sh->S(kOs), D = sh->nranks;
  braidResult_t rc = View(comm, l.group[kP], l.pos[kP], sp, &sh->p_comm);
  if (rc == braidSuccess) rc = View(comm, l.group[kG], l.pos[kG], sg, &sh->g_comm);
  if (rc == braidSuccess) rc = View(comm, l.replica_color, sh->rank, D / sg, &sh->replica_comm);
  // Agreed above (any rank's vote for it), so all ranks split or none.
  sh->split_boundary = SplitBoundary(sh->cfg, D) && mx.back() == 1;
  if (rc == braidSuccess && sh->split_boundary)
    rc = View(comm, l.slices_color, l.pos[kOs], so / sg, &sh->slices_comm);
  if (rc == braidSuccess && sh->split_boundary)
    rc = View(comm, l.copies_color, sh->rank, D / so, &sh->copies_comm);
  if (rc == braidSuccess) rc = View(comm, l.redist_color, l.pos[kOs], so / sp, &sh->redist_comm);
  sh->secondary = SecondaryCopy(sh->cfg);
  // Every rank splits (colour 0 where there is no secondary copy), so the order matches.
  if (rc == braidSuccess)
    rc = View(comm, l.hpz_color, l.hpz_pos, sh->secondary ? sh->cfg.hpz : 1, &sh->hpz_comm);
  if (rc != braidSuccess) {
    std::string msg = braidGetLastError(comm);
    braidShardDestroy(sh.release());
    return SetLastError(rc, where + "split failed: " + msg);
  }
  ClassifyGroups(sh.get());

  sh->buckets.resize(nbuckets);
  size_t max_padded = 0;
  for (int b = 0; b < nbuckets; ++b) {
    Bucket& k = sh->buckets[b];
    k.numel = bucketNumel[b];
    // A multiple of s_os (so of s_g and s_p: nesting) and of the hpZ group.
    const size_t unit = sh->secondary ? std::lcm<size_t>(so, sh->cfg.hpz) : so;
    k.padded = (k.numel + unit - 1) / unit * unit;
    max_padded = std::max(max_padded, k.padded);
    const unsigned char* init = static_cast<const unsigned char*>(initParams[b]);
    const size_t es = sh->esize;
    // The padding stays zero; the master weights are the exact fp32 values of the parameters.
    const size_t p_off = l.pos[kP] * (k.padded / sp), p_len = k.padded / sp;
    k.param_shard.assign(p_len * es, 0);
    if (p_off < k.numel)
      std::memcpy(k.param_shard.data(), init + p_off * es, std::min(p_len, k.numel - p_off) * es);
    const size_t o_off = l.pos[kOs] * (k.padded / so), o_len = k.padded / so;
    k.master.assign(o_len, 0.0f);
    for (size_t i = 0; i < o_len && o_off + i < k.numel; ++i)
      k.master[i] = Load(paramType, init, o_off + i);
    k.grad_shard.assign(k.padded / sg * es, 0);
    k.m.assign(k.padded / so, 0.0f);
    k.v.assign(k.padded / so, 0.0f);
    if (sh->secondary) {
      const size_t h_len = k.padded / sh->cfg.hpz;
      k.secondary.assign(sh->cfg.hpzInt8 ? EncodedSize(kWeightCodec, h_len) : h_len * es, 0);
    }
  }
  if (sg > 1) {
    sh->scratch[0].resize(max_padded * sh->esize);
    sh->scratch[1].resize(max_padded * sh->esize);
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
  if (sh->prepared)
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardGather: a prepared step is open (call braidShardFinishStep)");
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
  if (rc == braidSuccess && k.gather) rc = sh->WaitTimed(&k.gather, k.gather_issued);
  if (rc != braidSuccess)
    return sh->CommFail(rc, "braidShardGather: all-gather",
                        k.from_secondary ? sh->hpz_comm : sh->p_comm);
  rc = CompleteGather(sh, k);
  if (rc != braidSuccess) return sh->CommFail(rc, "braidShardGather: INT8 decode", nullptr);
  k.gathered = true;
  *params = k.full.data();
  // Prefetch: the next bucket's gather runs while the caller computes on this one.
  const int next = b + sh->direction;
  if (sh->prefetch && next >= 0 && next < static_cast<int>(sh->buckets.size())) {
    Bucket& nk = sh->buckets[next];
    if (!nk.gather && !nk.gathered && !GatherIsLocal(sh, nk)) {
      rc = StartGather(sh, next);
      if (rc != braidSuccess)
        return sh->CommFail(rc, "braidShardGather: prefetch",
                            nk.from_secondary ? sh->hpz_comm : sh->p_comm);
    }
  }
  return braidSuccess;
}

static braidResult_t ShardSetPrefetchImpl(braidShard_t sh, int enable) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardSetPrefetch: NULL handle");
  // Collective: the prefetch decides whether a gather is issued before or after the caller's
  // next reduce-scatter, and the shard's views must see their collectives in the same order on
  // every rank, so the ranks agree on the value (a mismatch keeps the old one everywhere).
  const std::string local_error =
      enable == 0 || enable == 1 ? "" : "enable must be 0 or 1, not " + std::to_string(enable);
  std::vector<int64_t> mn, mx;
  braidResult_t rc = MinMax(sh->comm, {local_error.empty() ? 0 : 1, enable}, &mn, &mx);
  if (rc != braidSuccess) return sh->CommFail(rc, "braidShardSetPrefetch: agreement", sh->comm);
  if (!local_error.empty())
    return sh->Fail(braidErrInvalidArgument, "braidShardSetPrefetch: " + local_error);
  if (mx[0] != 0)
    return sh->Fail(braidErrInvalidArgument,
                    "braidShardSetPrefetch: another rank passed a bad value (see its message)");
  if (mn[1] != mx[1])
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardSetPrefetch: the ranks passed different values (0 and 1): every "
                    "rank must pass the same one (the prefetch changes the order in which the "
                    "shard's collectives are issued); the setting is unchanged");
  sh->prefetch = enable == 1;
  return braidSuccess;
}

static braidResult_t ShardReleaseImpl(braidShard_t sh, int b) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardRelease: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()) || !sh->buckets[b].gathered)
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardRelease: bucket " + std::to_string(b) + " is not gathered");
  Bucket& k = sh->buckets[b];
  k.gathered = false;
  if (sh->secondary && !k.secondary_valid && !k.from_secondary) {
    // hpZ: keep this rank's slice of what the forward gather brought (the values the caller
    // computed with, qwZ's decoded ones included), so later gathers stay inside the node.
    const size_t len = k.padded / sh->cfg.hpz;
    const unsigned char* slice = k.full.data() + sh->layout.hpz_pos * len * sh->esize;
    if (sh->cfg.hpzInt8) {
      braidResult_t rc = braidQuantize(slice, len, sh->dtype, &kWeightCodec, k.secondary.data());
      if (rc != braidSuccess) return sh->CommFail(rc, "braidShardRelease: INT8 encode", nullptr);
    } else {
      std::memcpy(k.secondary.data(), slice, len * sh->esize);
    }
    k.secondary_valid = true;
  }
  if (sh->S(kP) > 1) RecycleFull(sh, k);
  return braidSuccess;
}

}  // extern "C"

namespace {

// Adds a reduced gradient to the bucket's accumulator (`len` elements of the parameter dtype, of
// which the first `valid` are at `shard`, the rest zero padding), after the per-micro-batch
// replica all-reduce of HYBRID_SHARD. `tmp` (>= len elements, may hold `shard`) is scratch for
// that all-reduce. The sum is rounded to the parameter dtype, as a framework's .grad would be.
braidResult_t Accumulate(braidShard* sh, Bucket& k, const void* shard, size_t valid, size_t len,
                         unsigned char* tmp) {
  const size_t es = sh->esize;
  if (sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
    if (shard != tmp) std::memmove(tmp, shard, valid * es);
    std::fill(tmp + valid * es, tmp + len * es, 0);
    const double start = braidShard::Now();
    braidResult_t rc = braidAllReduce(tmp, tmp, len, sh->dtype, braidSum, sh->replica_comm);
    sh->Exposed(start);
    if (rc != braidSuccess)
      return sh->CommFail(rc, "braidShardReduceGrad: replica all-reduce", sh->replica_comm);
    sh->CountAllReduce(braidShardTrafficReplica, braidShard::kGroupReplica, len, es);
    shard = tmp;
    valid = len;
  }
  void* acc = k.grad_shard.data();
  for (size_t i = 0; i < valid; ++i)
    Store(sh->dtype, acc, i, Load(sh->dtype, acc, i) + Load(sh->dtype, shard, i));
  return braidSuccess;
}

}  // namespace

braidResult_t braid::shard::FinishPending(braidShard* sh) {
  if (sh->pending_bucket < 0) return braidSuccess;
  Bucket& k = sh->buckets[sh->pending_bucket];
  sh->pending_bucket = -1;
  braidResult_t rc = sh->WaitTimed(&sh->pending, sh->pending_issued);
  if (rc != braidSuccess)
    return sh->CommFail(rc, "braidShardReduceGrad: reduce-scatter", sh->g_comm);
  unsigned char* buf = sh->scratch[sh->slot ^ 1].data();
  const size_t len = k.padded / sh->S(kG);
  return Accumulate(sh, k, buf + sh->layout.pos[kG] * len * sh->esize, len, len, buf);
}

extern "C" {

static braidResult_t ShardReduceGradImpl(braidShard_t sh, int b, const void* grad) {
  if (!sh || !grad) return SetLastError(braidErrInvalidArgument, "braidShardReduceGrad: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()))
    return sh->Fail(braidErrInvalidArgument, "braidShardReduceGrad: unknown bucket " +
                                                 std::to_string(b) + " (registered " +
                                                 std::to_string(sh->buckets.size()) + ")");
  if (sh->prepared)
    return sh->Fail(braidErrInvalidUsage,
                    "braidShardReduceGrad: a prepared step is open (call braidShardFinishStep)");
  Bucket& k = sh->buckets[b];
  const size_t es = sh->esize;
  const int sg = sh->S(kG);
  k.gathers = 0;  // the bucket's next gather is the next micro-batch's forward
  if (sg == 1) {
    // Full gradients accumulate locally; the replica all-reduce (if per micro-batch) needs a
    // padded copy.
    if (sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
      sh->scratch[0].resize(std::max(sh->scratch[0].size(), k.padded * es));
      braidResult_t rc = Accumulate(sh, k, grad, k.numel, k.padded, sh->scratch[0].data());
      if (rc != braidSuccess) return rc;
    } else {
      void* acc = k.grad_shard.data();
      for (size_t i = 0; i < k.numel; ++i)
        Store(sh->dtype, acc, i, Load(sh->dtype, acc, i) + Load(sh->dtype, grad, i));
    }
    ++k.reduced;
    return braidSuccess;
  }
  // Copy (the caller may reuse its buffer at once), pad, and start the reduce-scatter in place:
  // the shard lands at buf + pos * len. The previous bucket's reduction is then finished, so
  // one reduction is always in flight while the caller computes the next gradient.
  const size_t len = k.padded / sg;
  unsigned char* buf = sh->scratch[sh->slot].data();
  std::memcpy(buf, grad, k.numel * es);
  std::fill(buf + k.numel * es, buf + k.padded * es, 0);
  braidRequest_t req = nullptr;
  const double issued = braidShard::Now();
  unsigned char* out = buf + sh->layout.pos[kG] * len * es;
  braidResult_t rc;
  if (sh->cfg.qgz) {
    // qgZ: INT4 blocks, summed after decoding, in two hops (node first) across nodes.
    rc = braidIreduceScatterQuantized(buf, out, len, sh->dtype, braidSum, &kGradCodec, sh->g_comm,
                                      &req);
    if (rc == braidSuccess)
      sh->CountEncoded(braidShardTrafficGradReduce, braidShard::kGroupG,
                       EncodedSize(kGradCodec, len));
  } else {
    rc = braidIreduceScatter(buf, out, len, sh->dtype, braidSum, sh->g_comm, &req);
    if (rc == braidSuccess)
      sh->CountAllGather(braidShardTrafficGradReduce, braidShard::kGroupG, len, es);
  }
  if (rc != braidSuccess)
    return sh->CommFail(rc, "braidShardReduceGrad: reduce-scatter", sh->g_comm);
  rc = FinishPending(sh);  // the previous reduction, in scratch[slot ^ 1]
  sh->slot ^= 1;           // so this one is in scratch[slot ^ 1] when it is finished
  sh->pending = req;
  sh->pending_issued = issued;
  sh->pending_bucket = b;
  ++k.reduced;
  return rc;
}

namespace {

// The boundary work shared by the built-in step and the escape hatch: checks, replica reduction,
// select & drop into fp32 (divided and unscaled), overflow flag and global norm, clipping.
// Leaves the handle prepared (sh->prepared) unless it fails.
braidResult_t Prepare(braidShard* sh, const braidShardStepOptions_t* opts,
                      braidShardStepInfo_t* info, const char* api) {
  const std::string a = api;
  braidResult_t rc = FinishPrefetches(sh, api);
  if (rc != braidSuccess) return rc;
  // The last reduce-scatter of the micro-batch is still in flight.
  rc = FinishPending(sh);
  if (rc != braidSuccess) return rc;
  std::string local_error;
  if (sh->prepared) local_error = "a prepared step is still open (call braidShardFinishStep)";
  if (local_error.empty() && !(opts->lossScale >= 0.0f && std::isfinite(opts->lossScale)))
    local_error = "loss scale " + std::to_string(opts->lossScale) + " is not a finite value >= 0";
  const int mb = sh->buckets[0].reduced;
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
  double start = braidShard::Now();
  rc = MinMax(sh->comm, {local_error.empty() ? 0 : 1, mb}, &mn, &mx);
  sh->Exposed(start);
  if (rc != braidSuccess) return sh->CommFail(rc, (a + ": agreement").c_str(), sh->comm);
  // MinMax all-reduces each value and its negation: 4 int64.
  sh->CountAllReduce(braidShardTrafficControl, braidShard::kGroupAll, 4, sizeof(int64_t));
  if (!local_error.empty()) return sh->Fail(braidErrInvalidUsage, a + ": " + local_error);
  if (mx[0] != 0)
    return sh->Fail(braidErrInvalidUsage,
                    a + ": another rank is not ready for the step (see its message)");
  if (mn[1] != mx[1])
    return sh->Fail(braidErrInvalidUsage, a +
                                              ": the ranks reduced different numbers of "
                                              "micro-batches (" +
                                              std::to_string(mn[1]) + ".." + std::to_string(mx[1]) +
                                              ")");

  const int sg = sh->S(kG), so = sh->S(kOs);
  const RankLayout& l = sh->layout;
  const float loss_scale =
      opts->lossScale > 0.0f ? opts->lossScale : (sh->scaler_on ? sh->scale : 1.0f);
  const double divisor =
      (opts->gradDivisor > 0 ? opts->gradDivisor : static_cast<double>(sh->nranks) * mb) *
      loss_scale;
  // One multiply per element by a factor rounded once: the reference does the same.
  const float scale = static_cast<float>(1.0 / divisor);
  double local[2] = {0.0, 0.0};  // sum of squares, non-finite count (primary replica only)
  for (Bucket& k : sh->buckets) {
    const size_t g_len = k.padded / sg, os_len = k.padded / so;
    // Select & drop: the OS shard is a sub-slice of the G shard, at `first`.
    const size_t first =
        static_cast<size_t>(l.pos[kOs]) * os_len - static_cast<size_t>(l.pos[kG]) * g_len;
    if (sh->split_boundary) {
      // Reduce-scatter the G shard into the OS slices over the slices group (its ranks are in
      // OS-slice order, so this rank's block is the slice at `first`), then all-reduce the slice
      // over the ranks holding the same OS shard (layout.h, SplitBoundary).
      start = braidShard::Now();
      unsigned char* slice = k.grad_shard.data() + first * sh->esize;
      if (sh->slices_comm) {
        rc = braidReduceScatter(k.grad_shard.data(), slice, os_len, sh->dtype, braidSum,
                                sh->slices_comm);
        if (rc != braidSuccess)
          return sh->CommFail(rc, (a + ": boundary reduce-scatter").c_str(), sh->slices_comm);
        sh->CountAllGather(braidShardTrafficReplica, braidShard::kGroupSlices, os_len, sh->esize);
      }
      if (sh->copies_comm) {
        rc = braidAllReduce(slice, slice, os_len, sh->dtype, braidSum, sh->copies_comm);
        if (rc != braidSuccess)
          return sh->CommFail(rc, (a + ": boundary all-reduce").c_str(), sh->copies_comm);
        sh->CountAllReduce(braidShardTrafficReplica, braidShard::kGroupCopies, os_len, sh->esize);
      }
      sh->Exposed(start);
    } else if (!sh->cfg.replicaEveryMicrobatch && sh->replica_comm) {
      start = braidShard::Now();
      rc = braidAllReduce(k.grad_shard.data(), k.grad_shard.data(), g_len, sh->dtype, braidSum,
                          sh->replica_comm);
      if (rc != braidSuccess)
        return sh->CommFail(rc, (a + ": replica all-reduce").c_str(), sh->replica_comm);
      sh->Exposed(start);
      sh->CountAllReduce(braidShardTrafficReplica, braidShard::kGroupReplica, g_len, sh->esize);
    }
    k.grad32.resize(os_len);
    for (size_t i = 0; i < os_len; ++i) {
      const float gi = Load(sh->dtype, k.grad_shard.data(), first + i) * scale;
      k.grad32[i] = gi;
      if (!sh->os_primary) continue;
      if (!std::isfinite(gi)) local[1] += 1.0;
      local[0] += static_cast<double>(gi) * static_cast<double>(gi);
    }
    std::fill(k.grad_shard.begin(), k.grad_shard.end(), 0);
    k.reduced = 0;
    k.gathers = 0;
  }
  // One all-reduce gives every rank the same norm and the same overflow verdict.
  start = braidShard::Now();
  rc = braidAllReduce(local, local, 2, braidFloat64, braidSum, sh->comm);
  sh->Exposed(start);
  if (rc != braidSuccess) return sh->CommFail(rc, (a + ": norm all-reduce").c_str(), sh->comm);
  sh->CountAllReduce(braidShardTrafficControl, braidShard::kGroupAll, 2, sizeof(double));
  const bool overflow = local[1] > 0.0 || !std::isfinite(local[0]);
  const double norm = std::sqrt(local[0]);
  const bool clipped = !overflow && ClipGradients(sh->buckets, opts->maxGradNorm, norm);
  // The dynamic scaler moves only when it chose this step's scale.
  const float next =
      sh->scaler_on && opts->lossScale <= 0.0f ? UpdateLossScaler(sh, overflow) : loss_scale;
  if (!overflow) ++sh->t;
  sh->prepared = true;
  sh->skipped = overflow;
  if (info) {
    info->skipped = overflow ? 1 : 0;
    info->clipped = clipped ? 1 : 0;
    info->gradNorm = overflow ? std::numeric_limits<double>::infinity() : norm;
    info->lossScale = loss_scale;
    info->nextLossScale = next;
    info->step = sh->t;
  }
  return braidSuccess;
}

// Redistributes the master weights in the parameter dtype and closes the prepared step.
braidResult_t Finish(braidShard* sh, const char* api) {
  const std::string a = api;
  const int sp = sh->S(kP), so = sh->S(kOs);
  const bool skipped = sh->skipped;
  sh->prepared = sh->skipped = false;
  std::vector<unsigned char> send;
  for (Bucket& k : sh->buckets) {
    std::vector<float>().swap(k.grad32);
    if (skipped) continue;
    k.secondary_valid = false;  // the parameters change: the hpZ copy is rebuilt next forward
    const size_t os_len = k.padded / so;
    // The padding's master stays 0 (zero gradient, decay keeps 0), so it rounds to 0.
    if (so / sp > 1) {
      // The OS shards of the redistribution group tile this rank's P shard.
      send.resize(os_len * sh->esize);
      for (size_t i = 0; i < os_len; ++i) Store(sh->dtype, send.data(), i, k.master[i]);
      const double start = braidShard::Now();
      braidResult_t rc =
          braidAllGather(send.data(), k.param_shard.data(), os_len, sh->dtype, sh->redist_comm);
      sh->Exposed(start);
      if (rc != braidSuccess)
        return sh->CommFail(rc, (a + ": redistribution all-gather").c_str(), sh->redist_comm);
      sh->CountAllGather(braidShardTrafficRedistribute, braidShard::kGroupRedist, os_len,
                         sh->esize);
    } else {
      for (size_t i = 0; i < os_len; ++i) Store(sh->dtype, k.param_shard.data(), i, k.master[i]);
    }
  }
  return braidSuccess;
}

bool OptionsOk(const braidShardStepOptions_t* o) {
  return o && o->size >= sizeof(braidShardStepOptions_t);
}

}  // namespace

// `api`: the entry point's name for messages (braidShardStep runs this too).
static braidResult_t ShardStepExImpl(braidShard_t sh, const braidShardStepOptions_t* opts,
                                     braidShardStepInfo_t* info, const char* api) {
  if (!sh || !OptionsOk(opts))
    return SetLastError(braidErrInvalidArgument,
                        std::string(api) +
                            ": NULL handle or options, or options of an older size (use "
                            "BRAID_SHARD_STEP_OPTIONS_INITIALIZER)");
  if (opts->optimizer != braidShardOptAdamW && opts->optimizer != braidShardOptSGD)
    return sh->Fail(braidErrInvalidArgument, std::string(api) + ": unknown optimizer " +
                                                 std::to_string(opts->optimizer) +
                                                 " (braidShardOptAdamW or braidShardOptSGD)");
  braidShardStepInfo_t local{};
  braidResult_t rc = Prepare(sh, opts, &local, api);
  if (rc != braidSuccess) return rc;
  if (!sh->skipped) ApplyUpdate(sh, *opts);
  rc = Finish(sh, api);
  if (info) {
    const size_t size = info->size;
    *info = local;
    info->size = size;
  }
  return rc;
}

static braidResult_t ShardStepImpl(braidShard_t sh, const braidShardAdamW_t* opt) {
  if (!sh || !opt) return SetLastError(braidErrInvalidArgument, "braidShardStep: NULL");
  braidShardStepOptions_t o = BRAID_SHARD_STEP_OPTIONS_INITIALIZER;
  o.adamw = *opt;
  o.gradDivisor = opt->gradDivisor;
  return ShardStepExImpl(sh, &o, nullptr, "braidShardStep");
}

static braidResult_t ShardPrepareStepImpl(braidShard_t sh, const braidShardStepOptions_t* opts,
                                          braidShardStepInfo_t* info) {
  if (!sh || !OptionsOk(opts))
    return SetLastError(braidErrInvalidArgument,
                        "braidShardPrepareStep: NULL handle or options, or options of an older "
                        "size (use BRAID_SHARD_STEP_OPTIONS_INITIALIZER)");
  braidShardStepInfo_t local{};
  braidResult_t rc = Prepare(sh, opts, &local, "braidShardPrepareStep");
  if (info) {
    const size_t size = info->size;
    *info = local;
    info->size = size;
  }
  return rc;
}

static braidResult_t ShardOptimizerShardImpl(braidShard_t sh, int b, braidShardOsShard_t* view) {
  if (!sh || !view) return SetLastError(braidErrInvalidArgument, "braidShardOptimizerShard: NULL");
  if (b < 0 || b >= static_cast<int>(sh->buckets.size()))
    return sh->Fail(braidErrInvalidArgument, "braidShardOptimizerShard: unknown bucket " +
                                                 std::to_string(b) + " (registered " +
                                                 std::to_string(sh->buckets.size()) + ")");
  if (!sh->prepared || sh->skipped)
    return sh->Fail(braidErrInvalidUsage,
                    sh->prepared ? "braidShardOptimizerShard: the prepared step was skipped "
                                   "(overflow): there is nothing to update"
                                 : "braidShardOptimizerShard: no prepared step (call "
                                   "braidShardPrepareStep first)");
  Bucket& k = sh->buckets[b];
  const size_t os_len = k.padded / sh->S(kOs);
  const size_t off = static_cast<size_t>(sh->layout.pos[kOs]) * os_len;
  const size_t size = view->size;
  *view = {};
  view->size = size;
  view->offset = off;
  view->count = off < k.numel ? std::min(os_len, k.numel - off) : 0;
  view->master = k.master.data();
  view->grad = k.grad32.data();
  view->m = k.m.data();
  view->v = k.v.data();
  return braidSuccess;
}

static braidResult_t ShardFinishStepImpl(braidShard_t sh) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardFinishStep: NULL");
  // Agreed first: a rank without a prepared step must not leave the others in the all-gather.
  const double start = braidShard::Now();
  braidResult_t rc =
      Agree(sh, "braidShardFinishStep",
            sh->prepared ? "" : "no prepared step (call braidShardPrepareStep first)",
            braidErrInvalidUsage);
  sh->Exposed(start);
  if (rc != braidSuccess) return rc;
  // Agree all-reduces one value and its negation: 2 int64.
  sh->CountAllReduce(braidShardTrafficControl, braidShard::kGroupAll, 2, sizeof(int64_t));
  return Finish(sh, "braidShardFinishStep");
}

static braidResult_t ShardSetLossScalerImpl(braidShard_t sh, const braidShardLossScaler_t* s) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardSetLossScaler: NULL");
  if (!s) {
    sh->scaler_on = false;
    sh->scale = 1.0f;
    return braidSuccess;
  }
  if (s->size < sizeof(braidShardLossScaler_t) || !(s->initScale > 0.0f) ||
      !std::isfinite(s->initScale) || !(s->growthFactor >= 1.0f) || !(s->backoffFactor > 0.0f) ||
      !(s->backoffFactor < 1.0f) || s->growthInterval < 1)
    return sh->Fail(braidErrInvalidArgument,
                    "braidShardSetLossScaler: need initScale > 0, growthFactor >= 1, 0 < "
                    "backoffFactor < 1, growthInterval >= 1 (and size from the initializer)");
  sh->scaler_on = true;
  sh->scaler = *s;
  sh->scale = s->initScale;
  sh->good_steps = 0;
  return braidSuccess;
}

static braidResult_t ShardGetLossScaleImpl(braidShard_t sh, float* scale) {
  if (!sh || !scale) return SetLastError(braidErrInvalidArgument, "braidShardGetLossScale: NULL");
  *scale = sh->scaler_on ? sh->scale : 1.0f;
  return braidSuccess;
}

static braidResult_t ShardMemoryImpl(braidShard_t sh, braidShardMemory_t* mem) {
  if (!sh || !mem) return SetLastError(braidErrInvalidArgument, "braidShardMemory: NULL");
  *mem = {};
  for (const Bucket& k : sh->buckets) {
    mem->params += k.param_shard.size() + k.secondary.size();
    mem->grads += k.grad_shard.size();
    mem->optimizer += (k.master.size() + k.m.size() + k.v.size()) * sizeof(float);
  }
  mem->total = mem->params + mem->grads + mem->optimizer;
  return braidSuccess;
}

static braidResult_t ShardTrafficImpl(braidShard_t sh, braidShardTraffic_t* out) {
  if (!sh || !out)
    return SetLastError(braidErrInvalidArgument, "braidShardTraffic: NULL handle or output");
  *out = sh->traffic;
  return braidSuccess;
}

static braidResult_t ShardTrafficResetImpl(braidShard_t sh) {
  if (!sh) return SetLastError(braidErrInvalidArgument, "braidShardTrafficReset: NULL handle");
  sh->traffic = {};
  return braidSuccess;
}

static braidResult_t ShardDestroyImpl(braidShard_t sh) {
  if (!sh) return braidSuccess;
  for (Bucket& k : sh->buckets)
    if (k.gather) braidWait(&k.gather, -1);
  if (sh->pending) braidWait(&sh->pending, -1);
  DestroyComm(&sh->hpz_comm);
  DestroyComm(&sh->redist_comm);
  DestroyComm(&sh->copies_comm);
  DestroyComm(&sh->slices_comm);
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
braidResult_t braidShardSetPrefetch(braidShard_t sh, int enable) {
  return NoThrow("braidShardSetPrefetch", [&] { return ShardSetPrefetchImpl(sh, enable); });
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
braidResult_t braidShardStepEx(braidShard_t sh, const braidShardStepOptions_t* opts,
                               braidShardStepInfo_t* info) {
  return NoThrow("braidShardStepEx",
                 [&] { return ShardStepExImpl(sh, opts, info, "braidShardStepEx"); });
}
braidResult_t braidShardPrepareStep(braidShard_t sh, const braidShardStepOptions_t* opts,
                                    braidShardStepInfo_t* info) {
  return NoThrow("braidShardPrepareStep", [&] { return ShardPrepareStepImpl(sh, opts, info); });
}
braidResult_t braidShardOptimizerShard(braidShard_t sh, int b, braidShardOsShard_t* view) {
  return NoThrow("braidShardOptimizerShard", [&] { return ShardOptimizerShardImpl(sh, b, view); });
}
braidResult_t braidShardFinishStep(braidShard_t sh) {
  return NoThrow("braidShardFinishStep", [&] { return ShardFinishStepImpl(sh); });
}
braidResult_t braidShardSetLossScaler(braidShard_t sh, const braidShardLossScaler_t* s) {
  return NoThrow("braidShardSetLossScaler", [&] { return ShardSetLossScalerImpl(sh, s); });
}
braidResult_t braidShardGetLossScale(braidShard_t sh, float* scale) {
  return NoThrow("braidShardGetLossScale", [&] { return ShardGetLossScaleImpl(sh, scale); });
}
braidResult_t braidShardMemory(braidShard_t sh, braidShardMemory_t* mem) {
  return NoThrow("braidShardMemory", [&] { return ShardMemoryImpl(sh, mem); });
}
braidResult_t braidShardTraffic(braidShard_t sh, braidShardTraffic_t* out) {
  return NoThrow("braidShardTraffic", [&] { return ShardTrafficImpl(sh, out); });
}
braidResult_t braidShardTrafficReset(braidShard_t sh) {
  return NoThrow("braidShardTrafficReset", [&] { return ShardTrafficResetImpl(sh); });
}
braidResult_t braidShardDestroy(braidShard_t sh) {
  return NoThrow("braidShardDestroy", [&] { return ShardDestroyImpl(sh); });
}
}  // extern "C"
