// Lins' cost terms (lins_model.h; sharding.md section 4.1).
#include "sharding/lins_model.h"

#include "sharding/layout.h"

namespace braid::shard {
namespace {

// Charges `calls` collectives of `bytes` each over `g` to `c`: Lins' t(o, v, p0 x p1) is braid's
// estimate for that shape, with the groups of one node sharing its link. `calls` may be
// fractional (Lins' 2 Phi / (U s_p) all-reduces of U bytes). Volumes as plan_model.cc counts
// them: B(k-1)/k per rank for a gather, reduce-scatter or (pipelined) broadcast, twice that for
// an all-reduce.
void Charge(PlannedCollective& c, CostCache& cost, braidCollective_t kind, const Group& g,
            double bytes, double calls) {
  if (g.size() <= 1 || calls <= 0) return;
  const double k = g.size();
  const double factor = kind == braidCollAllReduce ? 2.0 : 1.0;
  c.seconds += calls * cost.Seconds(kind, bytes, 0, g.intra, g.inter, g.sharing);
  c.send_bytes += calls * factor * bytes * (k - 1) / k;
  c.intra_bytes += calls * factor * bytes * (g.intra - 1) / g.intra;
  c.inter_bytes += calls * factor * g.sharing * bytes * (g.inter - 1) / g.inter;
}

}  // namespace

std::string LinsAdmits(const braidShardConfig_t& c) {
  if (!SameFactor(c.g, c.p) && !SameFactor(c.g, c.os))
    return "s_g = " + FactorName(c.g) + " is neither s_p = " + FactorName(c.p) +
           " nor s_os = " + FactorName(c.os) + " (Lins only allows s_g in {s_p, s_os})";
  if (c.hpz || c.qwz || c.qgz) return "Lins' executor has no hpZ copy and no qwZ or qgZ";
  if (c.replicaEveryMicrobatch)
    return "Lins' executor reduces across replicas only at the accumulation boundary";
  return "";
}

double LinsActivationBytes(const PlanInputs& in) {
  const double sbh = static_cast<double>(in.seq) * in.micro_batch * in.hidden;
  return sbh * (in.recompute ? 2 : 34) * in.layers;
}

double LinsBucketBytes(const PlanInputs& in) {
  return in.e * in.max_bucket;
}

std::vector<PlannedCollective> LinsTermsOf(const PlanInputs& in, const braidShardConfig_t& c,
                                           CostCache& cost) {
  std::vector<PlannedCollective> out;
  const double e = in.e, M = in.micro_batches, U = LinsBucketBytes(in);
  const int sp = SizeOf(c.p), sg = SizeOf(c.g), so = SizeOf(c.os);
  auto keep = [&](PlannedCollective t) {
    if (t.seconds > 0 || t.send_bytes > 0) out.push_back(std::move(t));
  };
  // T_p = M L sum_i (2 t(AG, 2 Phi_i, s_p) + t(RS, 2 Phi_i, s_p)): each module gathered for the
  // forward and the backward pass and its gradient reduce-scattered, every micro-batch.
  if (sp > 1) {
    const Group p = GroupOf(in, c.p.intra, c.p.inter);
    PlannedCollective t{
        "T_p",
        "2 all-gathers and a reduce-scatter of every bucket over " + Shape(p) + " per micro-batch",
        0,
        0,
        0,
        0};
    for (const auto& [numel, count] : in.buckets) {
      Charge(t, cost, braidCollAllGather, p, e * numel, 2 * M * count);
      Charge(t, cost, braidCollReduceScatter, p, e * numel, M * count);
    }
    keep(t);
  }
  // T_g = (M - 1) (2 Phi / (U s_p)) t(AR, U, s_g/s_p): with s_g > s_p, the p-shard's gradient
  // all-reduced over the s_g / s_p ranks that split it, then select & drop, every micro-batch
  // but the last (the boundary's T_os0 covers that one). The spec's formula writes the mesh as
  // s_dp / s_g; its text, and ZeRO-2 (s_p = 1, s_g = s_dp, which must pay per micro-batch), say
  // s_g / s_p (docs/sharding.md).
  if (sg > sp && M > 1) {
    const Group g = GroupOf(in, c.g.intra / c.p.intra, c.g.inter / c.p.inter);
    PlannedCollective t{"T_g",
                        "gradient all-reduce over " + Shape(g) +
                            " then select & drop, every micro-batch but the last",
                        0,
                        0,
                        0,
                        0};
    Charge(t, cost, braidCollAllReduce, g, U, (M - 1) * e * in.phi / (U * sp));
    keep(t);
  }
  // T_os0 = (2 Phi / (U s_p)) t(AR, U, s_dp / s_p): at the boundary the p-shard's gradient is
  // all-reduced over every rank that holds the same parameters (s_p^0 such groups per node),
  // then each rank keeps its OS slice.
  {
    const Group rep{in.R / c.p.intra, in.n / c.p.inter, c.p.intra};
    PlannedCollective t{
        "T_os0", "boundary gradient all-reduce over " + Shape(rep) + " replicas of the P shard",
        0,       0,
        0,       0};
    Charge(t, cost, braidCollAllReduce, rep, U, e * in.phi / (U * sp));
    keep(t);
  }
  // T_os1 = (s_os / s_p) t(BC, 2 Phi / s_os, s_os / s_p): after the update every OS shard of a P
  // shard is broadcast over the ranks whose OS shards tile it.
  if (so > sp) {
    const Group os = GroupOf(in, c.os.intra / c.p.intra, c.os.inter / c.p.inter);
    PlannedCollective t{
        "T_os1", std::to_string(so / sp) + " broadcasts of the updated OS shards over " + Shape(os),
        0,       0,
        0,       0};
    Charge(t, cost, braidCollBroadcast, os, e * in.phi / so, static_cast<double>(so) / sp);
    keep(t);
  }
  return out;
}

}  // namespace braid::shard
