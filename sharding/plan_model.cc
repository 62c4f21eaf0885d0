// The planner's memory and communication model of one configuration (plan_model.h).
#include "sharding/plan_model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <stdexcept>

#include "sharding/layout.h"
#include "sharding/lins_model.h"

namespace braid::shard {
namespace {

// Activation bytes per layer per token and hidden unit, 16-bit activations without tensor
// parallelism (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", 2022: s*b*h*(34 + 5*a*s/h)). The 5as/h term is the s x s attention scores, which
// fused (flash) attention never stores, so it is left out: the planner is given no head count.
constexpr double kActivationPerLayer = 34;
// Full recomputation keeps each layer's input (2 bytes per element) and rebuilds one layer at a
// time during the backward pass.
constexpr double kActivationRecomputed = 2;

// Adds one collective, summed over the buckets and `times` repetitions each (micro-batches).
// `bytes_per_param` is the bytes the collective's buffer holds per parameter of the bucket (the
// whole gathered bucket, the input of a reduce-scatter, ...). `only_first` charges one bucket
// (the rest overlaps: the redistribution with assumeOverlap).
void Add(std::vector<PlannedCollective>& out, CostCache& cost, const PlanInputs& in,
         const char* term, const std::string& what, braidCollective_t kind, const Group& g,
         double bytes_per_param, int bits, double times, bool only_first = false) {
  if (g.size() <= 1) return;
  PlannedCollective c;
  c.term = term;
  c.what = what;
  const double k = g.size();
  const double factor = kind == braidCollAllReduce ? 2.0 : 1.0;
  bool first = true;
  for (const auto& [numel, count] : in.buckets) {
    // Time: all calls, or one bucket's when the rest overlaps; volume: every call.
    const double calls = count * times;
    const double timed = only_first ? (first ? 1 : 0) : calls;
    first = false;
    double bytes = numel * bytes_per_param;
    if (timed > 0)
      c.seconds += timed * cost.Seconds(kind, bytes, bits, g.intra, g.inter, g.sharing);
    // Quantized volumes: the encoded size (8 or 4 bits per element of 2 bytes, scales ignored).
    if (bits) bytes = bytes * bits / (8 * in.e);
    c.send_bytes += calls * factor * bytes * (k - 1) / k;
    c.intra_bytes += calls * factor * bytes * (g.intra - 1) / g.intra;
    c.inter_bytes += calls * factor * g.sharing * bytes * (g.inter - 1) / g.inter;
  }
  out.push_back(c);
}

constexpr const char* kGatherTerm = "parameter gathers";
constexpr const char* kReplicaTerm = "replica reduction";

double Sum(const std::vector<PlannedCollective>& v, double PlannedCollective::*field) {
  double s = 0;
  for (const auto& c : v) s += c.*field;
  return s;
}

}  // namespace

Group GroupOf(const PlanInputs& in, int intra, int inter) {
  return {intra, inter, std::max(1, in.R / std::max(1, intra))};
}

std::string Shape(const Group& g) {
  return std::to_string(g.intra) + "x" + std::to_string(g.inter);
}

double CostCache::Seconds(braidCollective_t kind, double bytes, int bits, int intra, int inter,
                          int sharing) {
  const uint64_t b = static_cast<uint64_t>(std::llround(bytes));
  const auto key = std::make_tuple(static_cast<int>(kind), b, bits, intra, inter, sharing);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  double s = 0;
  // The parameter type: a quantized form's encoded size depends on the element count.
  braidResult_t r;
  if (model_ == braidShardCostLins && kind != braidCollAllReduce) {
    const bool rails =
        inter > 1 && link_.nicsPerNode > 1 && kind != braidCollBroadcast && intra > 1;
    r = braidEstimateAlgorithm(rails ? "rail_ring" : "ring", kind, b, dtype_, bits, intra, inter,
                               sharing, &link_, &s);
  } else {
    r = braidEstimateCollective(kind, b, dtype_, bits, intra, inter, sharing, &link_, &s, nullptr,
                                0);
  }
  if (r != braidSuccess) s = HUGE_VAL;  // inputs are checked before; never the best
  cache_.emplace(key, s);
  return s;
}

std::string NormalizeInputs(const braidShardModel_t* m, const braidShardCluster_t* c,
                            const braidShardPlanOptions_t* o, PlanInputs* in) {
  if (!m || !c) return "model and cluster must not be NULL";
  if (m->size < sizeof(braidShardModel_t) || c->size < sizeof(braidShardCluster_t))
    return "model or cluster: size field is not sizeof(the struct) (use the initializers)";
  // costModel came last: a caller compiled before it passes the size without it.
  constexpr size_t kOptionsBeforeCostModel = offsetof(braidShardPlanOptions_t, costModel);
  if (o && o->size < kOptionsBeforeCostModel)
    return "options: size field is not sizeof(braidShardPlanOptions_t)";
  char buf[256];
  auto positive = [&](const char* name, double v) -> std::string {
    if (std::isfinite(v) && v >= 1) return "";
    std::snprintf(buf, sizeof buf, "%s = %g: must be >= 1", name, v);
    return buf;
  };
  PlanInputs r;
  if (m->nbuckets < 0) return "nbuckets must be >= 0";
  if (m->nbuckets > 0) {
    if (!m->bucketNumel) return "nbuckets > 0 but bucketNumel is NULL";
    for (int i = 0; i < m->nbuckets; ++i) {
      if (m->bucketNumel[i] == 0) return "bucket " + std::to_string(i) + " has 0 parameters";
      const double b = static_cast<double>(m->bucketNumel[i]);
      r.buckets[b] += 1;
      r.phi += b;
    }
  } else {
    if (std::string why = positive("params", m->params); !why.empty()) return why;
    if (m->params > 1e15) return "params > 1e15: not a model this planner believes";
    if (m->layers < 1) return "layers must be >= 1 (the buckets: one per layer)";
    r.phi = m->params;
    r.buckets[m->params / m->layers] = m->layers;
  }
  for (const auto& [b, count] : r.buckets) r.max_bucket = std::max(r.max_bucket, b);
  for (auto [name, v] : {std::pair{"layers", m->layers},
                         {"hidden", m->hidden},
                         {"seq", m->seq},
                         {"microBatch", m->microBatch},
                         {"microBatches", m->microBatches}})
    if (std::string why = positive(name, v); !why.empty()) return why;
  if (m->paramBytes != 2 && m->paramBytes != 4) return "paramBytes must be 2 or 4";
  r.e = m->paramBytes;
  r.layers = m->layers;
  r.hidden = m->hidden;
  r.seq = m->seq;
  r.micro_batch = m->microBatch;
  r.micro_batches = m->microBatches;
  r.recompute = m->recompute != 0;
  if (c->ranksPerNode < 1 || c->nodes < 1 ||
      static_cast<int64_t>(c->ranksPerNode) * c->nodes > (1 << 20))
    return "cluster " + std::to_string(c->ranksPerNode) + " ranks per node x " +
           std::to_string(c->nodes) + " nodes: both >= 1, at most 2^20 ranks";
  r.R = c->ranksPerNode;
  r.n = c->nodes;
  if (!(c->deviceMemory > 0) || !std::isfinite(c->deviceMemory))
    return "deviceMemory must be > 0 bytes";
  r.memory = c->deviceMemory;
  const braidLinkParams_t& l = c->link;
  for (double v : {l.intraBandwidth, l.interBandwidth})
    if (!(v > 0) || !std::isfinite(v)) return "link bandwidths must be > 0 bytes/s";
  for (double v : {l.intraLatency, l.interLatency})
    if (!(v >= 0) || !std::isfinite(v)) return "link latencies must be >= 0 s";
  if (l.nicsPerNode < 0 || l.nicsPerNode > 1024) return "nicsPerNode must be in [0, 1024]";
  r.link = l;
  if (o) {
    r.quantization = o->allowQuantization != 0;
    r.overlap = o->assumeOverlap != 0;
    r.partial_node = o->allowPartialNode != 0;
    if (!(o->reserveBytes >= 0) || !std::isfinite(o->reserveBytes))
      return "reserveBytes must be >= 0";
    r.reserve = o->reserveBytes;
    if (o->size >= offsetof(braidShardPlanOptions_t, costModel) + sizeof(o->costModel)) {
      if (o->costModel != braidShardCostBraid && o->costModel != braidShardCostLins)
        return "costModel = " + std::to_string(o->costModel) +
               ": use braidShardCostBraid (0) or braidShardCostLins (1)";
      r.cost_model = static_cast<braidShardCostModel_t>(o->costModel);
    }
    // Lins' section IV has neither: its executor quantizes nothing, and its factors span nodes
    // only with the whole node.
    if (r.cost_model == braidShardCostLins && r.quantization)
      return "the lins cost model prices no quantized collectives: drop allowQuantization (or "
             "use braid's model)";
    if (r.cost_model == braidShardCostLins && r.partial_node)
      return "the lins cost model shards across nodes only with the whole node: drop "
             "allowPartialNode (or use braid's model)";
  }
  *in = r;
  return "";
}

PlanMemory MemoryOf(const PlanInputs& in, const braidShardConfig_t& c) {
  PlanMemory m;
  const double phi = in.phi, e = in.e;
  // sharding.md section 1: e*Phi/s_p + e*Phi/s_g + 12*Phi/s_os (fp32 master, m, v).
  m.states = e * phi / SizeOf(c.p) + e * phi / SizeOf(c.g) + 12 * phi / SizeOf(c.os);
  // hpZ: a secondary copy of the parameters over hpz ranks (INT8: one byte per parameter).
  if (SecondaryCopy(c)) m.states += (c.hpzInt8 ? 1 : e) * phi / c.hpz;
  // One micro-batch's activations are alive at a time (micro-batches run one after another).
  const double sbh = static_cast<double>(in.seq) * in.micro_batch * in.hidden;
  if (in.cost_model == braidShardCostLins)
    m.activations = LinsActivationBytes(in);
  else
    m.activations = in.recompute ? sbh * (kActivationRecomputed * in.layers + kActivationPerLayer)
                                 : sbh * kActivationPerLayer * in.layers;
  // The gradient of the bucket being handed over; with s_g > 1 two reduce-scatter scratch
  // buffers; with s_p > 1 the gathered bucket in use and the one prefetched.
  const double bucket = in.max_bucket * e;
  m.buffers = bucket;
  if (SizeOf(c.g) > 1) m.buffers += 2 * bucket;
  if (SizeOf(c.p) > 1) m.buffers += 2 * bucket;
  return m;
}

namespace {

// The two forms of the boundary reduction (spec step 3) for the replicas of a G shard: (a) an
// all-reduce of the G shard over the D / s_g replicas, then "select & drop"; (b), where
// s_os > s_g, a reduce-scatter into the OS slices over the s_os / s_g ranks of an OS group that
// hold the G shard, then an all-reduce of the slice over its D / s_os copies (the spec's grouped
// reduce-scatter: (1 - s_g / s_os) G fewer bytes per rank). (b) moves fewer bytes; with one rank
// per node in a long copies ring its latency can cost more (a 128-node flat ring against a
// hierarchical all-reduce over all ranks).
void BoundaryForms(const PlanInputs& in, const braidShardConfig_t& c, CostCache& cost,
                   std::vector<PlannedCollective>* a, std::vector<PlannedCollective>* b) {
  const int sg = SizeOf(c.g), so = SizeOf(c.os);
  const double e = in.e;
  const Group rep{in.R / c.g.intra, in.n / c.g.inter, c.g.intra};
  const double shard = e / sg;  // bytes of a G shard per parameter of the bucket
  Add(*a, cost, in, kReplicaTerm, "boundary gradient all-reduce across " + Shape(rep) + " replicas",
      braidCollAllReduce, rep, shard, 0, 1);
  if (so > sg) {
    const Group slices = GroupOf(in, c.os.intra / c.g.intra, c.os.inter / c.g.inter);
    const Group copies{in.R / c.os.intra, in.n / c.os.inter, c.os.intra};
    Add(*b, cost, in, kReplicaTerm, "boundary reduce-scatter into OS slices over " + Shape(slices),
        braidCollReduceScatter, slices, shard, 0, 1);
    Add(*b, cost, in, kReplicaTerm,
        "boundary all-reduce across " + Shape(copies) + " copies of each OS shard",
        braidCollAllReduce, copies, e / so, 0, 1);
  }
}

bool SplitIsCheaper(const std::vector<PlannedCollective>& a,
                    const std::vector<PlannedCollective>& b) {
  return !b.empty() && Sum(b, &PlannedCollective::seconds) < Sum(a, &PlannedCollective::seconds);
}

}  // namespace

bool SplitBoundaryCheaper(const PlanInputs& in, const braidShardConfig_t& c, CostCache& cost) {
  std::vector<PlannedCollective> a, b;
  BoundaryForms(in, c, cost, &a, &b);
  return SplitIsCheaper(a, b);
}

std::vector<PlannedCollective> CollectivesOf(const PlanInputs& in, const braidShardConfig_t& c,
                                             CostCache& cost) {
  std::vector<PlannedCollective> out;
  const double e = in.e, M = in.micro_batches;
  const int sp = SizeOf(c.p), sg = SizeOf(c.g);
  const Group p = GroupOf(in, c.p.intra, c.p.inter);
  const Group g = GroupOf(in, c.g.intra, c.g.inter);
  // Per micro-batch: gather each bucket for the forward pass and again for the backward pass
  // (from the hpZ copy inside the node when there is one), reduce-scatter its gradient.
  Add(out, cost, in, kGatherTerm, "forward all-gather of parameters over " + Shape(p),
      braidCollAllGather, p, e, c.qwz ? 8 : 0, M);
  if (SecondaryCopy(c)) {
    const Group h = GroupOf(in, c.hpz, 1);
    Add(out, cost, in, kGatherTerm, "backward all-gather from the hpZ copy over " + Shape(h),
        braidCollAllGather, h, e, c.hpzInt8 ? 8 : 0, M);
  } else {
    Add(out, cost, in, kGatherTerm, "backward all-gather of parameters over " + Shape(p),
        braidCollAllGather, p, e, c.qwz ? 8 : 0, M);
  }
  Add(out, cost, in, "gradient reduce-scatter", "gradient reduce-scatter over " + Shape(g),
      braidCollReduceScatter, g, e, c.qgz ? 4 : 0, M);
  // The replicas of a G shard: one rank of every G group, R/g.intra per node on n/g.inter nodes;
  // g.intra of them share each node's link.
  const Group rep{in.R / c.g.intra, in.n / c.g.inter, c.g.intra};
  const double shard = e / sg;  // bytes of a G shard per parameter of the bucket
  if (c.replicaEveryMicrobatch) {
    Add(out, cost, in, kReplicaTerm,
        "gradient all-reduce across " + Shape(rep) + " replicas every micro-batch",
        braidCollAllReduce, rep, shard, 0, M);
  } else if (rep.size() > 1) {
    std::vector<PlannedCollective> a, b;
    BoundaryForms(in, c, cost, &a, &b);
    for (auto& x : SplitIsCheaper(a, b) ? b : a) out.push_back(x);
  }
  // Gradient norm and non-finite count: two doubles all-reduced over the whole job (what the
  // step runs; the spec's minimum is one OS replica), latency only.
  if (in.R * in.n > 1) {
    const Group all = GroupOf(in, in.R, in.n);
    const double s = cost.Seconds(braidCollAllReduce, 16, 0, all.intra, all.inter, all.sharing);
    out.push_back({"gradient norm", "gradient-norm all-reduce over " + Shape(all), s, 0, 0, 0});
  }
  // Redistribution (spec step 5): the s_os/s_p ranks whose OS shards tile a P shard all-gather
  // the updated parameters.
  const Group redist = GroupOf(in, c.os.intra / c.p.intra, c.os.inter / c.p.inter);
  Add(out, cost, in, "redistribution",
      "redistribution all-gather of updated parameters over " + Shape(redist), braidCollAllGather,
      redist, e / sp, 0, 1, in.overlap);
  return out;
}

std::vector<PlannedCollective> TermsOf(const PlanInputs& in, const braidShardConfig_t& cfg,
                                       CostCache& cost) {
  // A cache of the other model would price the terms with the wrong algorithms.
  if (cost.model() != in.cost_model) throw std::logic_error("TermsOf: cost cache of another model");
  return in.cost_model == braidShardCostLins ? LinsTermsOf(in, cfg, cost)
                                             : CollectivesOf(in, cfg, cost);
}

braidShardPlanEntry_t Evaluate(const PlanInputs& in, const braidShardConfig_t& cfg,
                               CostCache& cost) {
  braidShardPlanEntry_t e{};
  e.config = cfg;
  const PlanMemory m = MemoryOf(in, cfg);
  e.stateBytes = m.states;
  e.activationBytes = m.activations;
  e.bufferBytes = m.buffers;
  e.memoryBytes = m.total();
  const auto colls = TermsOf(in, cfg, cost);
  e.commSeconds = Sum(colls, &PlannedCollective::seconds);
  e.sendBytes = Sum(colls, &PlannedCollective::send_bytes);
  e.interBytes = Sum(colls, &PlannedCollective::inter_bytes);
  e.intraBytes = Sum(colls, &PlannedCollective::intra_bytes);
  e.fits = e.memoryBytes <= in.memory - in.reserve;
  return e;
}

}  // namespace braid::shard
