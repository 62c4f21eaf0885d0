// Sharding configurations: validation (sharding.md section 1), the named presets (section 3),
// the memory formula and the plan report. Pure code on braid's public API only.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"

namespace braid::shard {
namespace {

const char* const kStateName[3] = {"s_p", "s_g", "s_os"};

std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

int Intra(const braidShardConfig_t& c, int s) {
  return FactorOf(c, s).intra;
}
int Inter(const braidShardConfig_t& c, int s) {
  return FactorOf(c, s).inter;
}

}  // namespace

std::string Validate(const braidShardConfig_t& c) {
  const int R = c.ranksPerNode, n = c.nodes;
  if (R < 1 || n < 1) return Format("shape %d ranks per node x %d nodes: both must be >= 1", R, n);
  for (int s = kP; s <= kOs; ++s) {
    if (Intra(c, s) < 1 || Inter(c, s) < 1)
      return Format("%s = %dx%d: each factor must be >= 1", kStateName[s], Intra(c, s),
                    Inter(c, s));
  }
  // Dependency rule first: it is the one users most often break by hand.
  for (int s = kP; s < kOs; ++s) {
    if (Intra(c, s) > Intra(c, s + 1))
      return Format(
          "dependency rule s_p <= s_g <= s_os broken inside the node: %s intra = %d > %s intra = "
          "%d (a rank never holds gradients or optimizer states for parameters it does not hold)",
          kStateName[s], Intra(c, s), kStateName[s + 1], Intra(c, s + 1));
    if (Inter(c, s) > Inter(c, s + 1))
      return Format(
          "dependency rule s_p <= s_g <= s_os broken across nodes: %s inter = %d > %s inter = %d "
          "(a rank never holds gradients or optimizer states for parameters it does not hold)",
          kStateName[s], Inter(c, s), kStateName[s + 1], Inter(c, s + 1));
  }
  for (int s = kP; s <= kOs; ++s) {
    if (Intra(c, s) > R || R % Intra(c, s) != 0)
      return Format("divisibility: %s intra = %d does not divide the %d ranks per node",
                    kStateName[s], Intra(c, s), R);
    if (Inter(c, s) > n || n % Inter(c, s) != 0)
      return Format("divisibility: %s inter = %d does not divide the %d nodes", kStateName[s],
                    Inter(c, s), n);
  }
  for (int s = kP; s < kOs; ++s) {
    if (Intra(c, s + 1) % Intra(c, s) != 0)
      return Format(
          "nesting: %s intra = %d does not divide %s intra = %d (each shard must be a sub-slice "
          "of the shard of the state before it)",
          kStateName[s], Intra(c, s), kStateName[s + 1], Intra(c, s + 1));
    if (Inter(c, s + 1) % Inter(c, s) != 0)
      return Format(
          "nesting: %s inter = %d does not divide %s inter = %d (each shard must be a sub-slice "
          "of the shard of the state before it)",
          kStateName[s], Inter(c, s), kStateName[s + 1], Inter(c, s + 1));
  }
  if (!c.allowPartialNode) {
    for (int s = kP; s <= kOs; ++s) {
      if (Inter(c, s) > 1 && Intra(c, s) != R)
        return Format(
            "whole node first: %s = %dx%d shards across nodes but over %d of the %d ranks of a "
            "node (set allowPartialNode to insist)",
            kStateName[s], Intra(c, s), Inter(c, s), Intra(c, s), R);
    }
  }
  if (c.hpz < 0 || (c.hpz > 0 && (c.hpz > R || R % c.hpz != 0)))
    return Format("hpz = %d: the secondary copy group must divide the %d ranks per node", c.hpz, R);
  if ((c.qwz != 0 && c.qwz != 1) || (c.qgz != 0 && c.qgz != 1) ||
      (c.hpzInt8 != 0 && c.hpzInt8 != 1))
    return Format("qwz = %d, qgz = %d, hpzInt8 = %d: each must be 0 or 1", c.qwz, c.qgz, c.hpzInt8);
  if (c.hpzInt8 && c.hpz == 0) return "hpzInt8 = 1 without a secondary copy (hpz = 0)";
  return "";
}

RankLayout Layout(const braidShardConfig_t& c, int rank) {
  RankLayout l;
  const int R = c.ranksPerNode;
  l.node = rank / R;
  l.local = rank % R;
  // Positions are built from the inside out: the G position extends the P position by the index
  // among the s_g / s_p ranks of the G group sharing that P shard, and likewise OS from G. That
  // keeps every shard inside the shard of the state before it, whatever the intra/inter split.
  int parent_pos = 0;
  int parent_intra = 1, parent_inter = 1;
  for (int s = kP; s <= kOs; ++s) {
    const int f0 = Intra(c, s), f1 = Inter(c, s);
    const int a = l.local % f0, b = l.node % f1;
    const int ratio1 = f1 / parent_inter;
    const int q = (a / parent_intra) * ratio1 + b / parent_inter;
    l.pos[s] = parent_pos * ((f0 / parent_intra) * ratio1) + q;
    l.group[s] = (l.node / f1) * (R / f0) + l.local / f0;
    parent_pos = l.pos[s];
    parent_intra = f0;
    parent_inter = f1;
  }
  l.replica_color = l.pos[kG];
  l.redist_color = l.group[kOs] * SizeOf(c.p) + l.pos[kP];
  l.slices_color = l.group[kOs] * SizeOf(c.g) + l.pos[kG];
  l.copies_color = l.pos[kOs];
  if (SecondaryCopy(c)) {
    l.hpz_color = l.node * (R / c.hpz) + l.local / c.hpz;
    l.hpz_pos = l.local % c.hpz;
  }
  return l;
}

uint64_t EncodedSize(const braidQuantConfig_t& codec, uint64_t count) {
  size_t bytes = 0;
  braidQuantizedSize(static_cast<size_t>(count), &codec, &bytes);
  return bytes;
}

bool SplitBoundary(const braidShardConfig_t& c, int nranks) {
  return SizeOf(c.os) > SizeOf(c.g) && nranks / SizeOf(c.g) > 1 && !c.replicaEveryMicrobatch;
}

bool SecondaryCopy(const braidShardConfig_t& c) {
  return c.hpz > 0 && SizeOf(c.p) > 1 && (c.p.inter > 1 || c.hpzInt8 || c.hpz != c.p.intra);
}

namespace {

void Set(braidShardFactor_t* f, int intra, int inter) {
  f->intra = intra;
  f->inter = inter;
}

}  // namespace
}  // namespace braid::shard

using namespace braid::shard;

extern "C" {

static braidResult_t ShardConfigValidateImpl(const braidShardConfig_t* cfg, char* err,
                                             size_t errlen) {
  std::string why = cfg ? Validate(*cfg) : "configuration is NULL";
  if (why.empty()) return braidSuccess;
  if (err && errlen) std::snprintf(err, errlen, "%s", why.c_str());
  return SetLastError(braidErrInvalidArgument, "braidShardConfigValidate: " + why);
}

static braidResult_t ShardPresetForShapeImpl(const char* name, int R, int n,
                                             braidShardConfig_t* cfg) {
  if (!name || !cfg) return SetLastError(braidErrInvalidArgument, "preset: NULL argument");
  if (R < 1 || n < 1)
    return SetLastError(braidErrInvalidArgument, "preset '" + std::string(name) + "': shape " +
                                                     std::to_string(R) + "x" + std::to_string(n) +
                                                     " must have >= 1 rank per node and >= 1 node");
  braidShardConfig_t c = BRAID_SHARD_CONFIG_INITIALIZER;
  c.ranksPerNode = R;
  c.nodes = n;
  std::string note;
  const std::string p = name;
  if (p == "ddp") {
  } else if (p == "zero1") {
    Set(&c.os, R, n);
  } else if (p == "zero2") {
    Set(&c.g, R, n);
    Set(&c.os, R, n);
  } else if (p == "zero3") {
    Set(&c.p, R, n);
    Set(&c.g, R, n);
    Set(&c.os, R, n);
  } else if (p == "fsdp-hybrid" || p == "mics") {
    Set(&c.p, R, 1);
    Set(&c.g, R, 1);
    Set(&c.os, R, 1);
    c.replicaEveryMicrobatch = p == "fsdp-hybrid";
    if (n == 1) note = "one node: no replicas, the same as zero3";
  } else if (p == "zero++") {
    Set(&c.p, R, n);
    Set(&c.g, R, n);
    Set(&c.os, R, n);
    c.hpz = R;
    c.qwz = 1;
    c.qgz = 1;
    if (n == 1) note = "one node: the hpZ secondary copy equals the primary shard";
  } else if (p == "paro-nig") {
    Set(&c.g, R, 1);
    Set(&c.os, R, n);
  } else if (p == "paro-iig") {
    Set(&c.p, R, 1);
    Set(&c.g, R, 1);
    Set(&c.os, R, n);
  } else if (p == "paro-igg") {
    Set(&c.p, R, 1);
    Set(&c.g, R, n);
    Set(&c.os, R, n);
  } else if (p == "zero-topo") {
    // Device-pair weights: the pair must divide the node (nesting into s_g = R).
    if (R % 2 == 0) {
      Set(&c.p, 2, 1);
    } else {
      note = "odd ranks per node (" + std::to_string(R) +
             "): no device pairs, parameters replicated (s_p = 1x1)";
    }
    Set(&c.g, R, 1);
    Set(&c.os, R, n);
    c.hpz = R % 2 == 0 ? 2 : 0;
    c.hpzInt8 = c.hpz > 0;
    c.qgz = 1;
  } else if (p == "lins") {
    return SetLastError(braidErrInvalidArgument,
                        "preset 'lins' is the planner's choice and needs the model and the "
                        "cluster: call braidShardPlan(model, cluster, options, &plan) and use "
                        "plan.best.config (its preset is 'lins')");
  } else {
    return SetLastError(braidErrInvalidArgument,
                        "unknown preset '" + p +
                            "': expected ddp, zero1, zero2, zero3, fsdp-hybrid, mics, zero++, "
                            "paro-nig, paro-iig, paro-igg, zero-topo or lins");
  }
  std::snprintf(c.preset, sizeof(c.preset), "%s", name);
  std::snprintf(c.note, sizeof(c.note), "%s", note.c_str());
  std::string why = Validate(c);
  if (!why.empty())
    return SetLastError(braidErrInternal,
                        "preset '" + p + "' resolved to an invalid configuration: " + why);
  *cfg = c;
  return braidSuccess;
}

static braidResult_t ShardPresetImpl(const char* name, braidComm_t comm, braidShardConfig_t* cfg) {
  if (!comm) return SetLastError(braidErrInvalidArgument, "braidShardPreset: NULL comm");
  int nranks = 0;
  braidComm_t node = nullptr;
  if (braidCommCount(comm, &nranks) != braidSuccess ||
      braidCommSplitLevel(comm, braidLevelNode, &node) != braidSuccess)
    return SetLastError(
        braidErrInvalidUsage,
        std::string("braidShardPreset: cannot read the comm's shape: ") + braidGetLastError(comm));
  int R = 0;
  braidCommCount(node, &R);
  braidCommDestroy(node);
  if (R < 1 || nranks % R != 0)
    return SetLastError(braidErrInvalidUsage,
                        "braidShardPreset: this rank's node holds " + std::to_string(R) +
                            " of the comm's " + std::to_string(nranks) +
                            " ranks, which is not a whole number of equal nodes");
  return braidShardPresetForShape(name, R, nranks / R, cfg);
}

static braidResult_t ShardMemoryFormulaImpl(const braidShardConfig_t* cfg, uint64_t phi,
                                            int paramBytes, braidShardMemory_t* mem) {
  if (!cfg || !mem || paramBytes < 1)
    return SetLastError(braidErrInvalidArgument, "braidShardMemoryFormula: bad argument");
  std::string why = Validate(*cfg);
  if (!why.empty()) return SetLastError(braidErrInvalidArgument, why);
  auto div_up = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  const uint64_t e = static_cast<uint64_t>(paramBytes);
  mem->params = div_up(e * phi, SizeOf(cfg->p));
  // The hpZ secondary copy: phi / hpz elements in the parameter dtype, or their INT8 encoding.
  if (SecondaryCopy(*cfg)) {
    const uint64_t slice = div_up(phi, static_cast<uint64_t>(cfg->hpz));
    mem->params += cfg->hpzInt8 ? EncodedSize(kWeightCodec, slice) : e * slice;
  }
  mem->grads = div_up(e * phi, SizeOf(cfg->g));
  mem->optimizer = div_up(12 * phi, SizeOf(cfg->os));
  mem->total = mem->params + mem->grads + mem->optimizer;
  return braidSuccess;
}

static braidResult_t ShardTrafficFormulaImpl(const braidShardConfig_t* cfg, uint64_t phi,
                                             int paramBytes, int microbatches, int gathers,
                                             braidShardTraffic_t* out) {
  if (!cfg || !out || paramBytes < 1 || microbatches < 1 || gathers < 0)
    return SetLastError(braidErrInvalidArgument,
                        "braidShardTrafficFormula: NULL config or output, paramBytes < 1, "
                        "microbatches < 1 or gathersPerMicrobatch < 0");
  std::string why = Validate(*cfg);
  if (!why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardTrafficFormula: " + why);
  *out = {};
  const uint64_t B = phi * static_cast<uint64_t>(paramBytes), m = microbatches;
  const uint64_t sp = SizeOf(cfg->p), sg = SizeOf(cfg->g), so = SizeOf(cfg->os);
  const uint64_t n = cfg->nodes, D = static_cast<uint64_t>(cfg->ranksPerNode) * n;
  // The level of each group, as the step's layout makes it (layout.h): a group is inside the
  // node when it has no inter-node extent.
  auto add = [&](int purpose, bool intra, uint64_t bytes) {
    (intra ? out->intra : out->inter)[purpose] += bytes;
    (intra ? out->intraTotal : out->interTotal) += bytes;
  };
  // All-gather / reduce-scatter of B / s per rank over s ranks: (s - 1) B / s; quantized, (s - 1)
  // times the encoding of phi / s elements.
  const uint64_t g = static_cast<uint64_t>(gathers);
  const uint64_t primary_gathers = SecondaryCopy(*cfg) ? std::min<uint64_t>(g, 1) : g;
  add(braidShardTrafficGather, cfg->p.inter == 1,
      primary_gathers * m *
          (cfg->qwz ? (sp - 1) * EncodedSize(kWeightCodec, phi / sp) : (sp - 1) * B / sp));
  if (SecondaryCopy(*cfg) && g > 1) {
    // Every later gather of a micro-batch reads the hpZ copy: phi / hpz per rank, intra-node.
    const uint64_t h = static_cast<uint64_t>(cfg->hpz);
    add(braidShardTrafficGather, true,
        (g - 1) * m *
            (cfg->hpzInt8 ? (h - 1) * EncodedSize(kWeightCodec, phi / h) : (h - 1) * B / h));
  }
  add(braidShardTrafficGradReduce, cfg->g.inter == 1,
      m * (cfg->qgz ? (sg - 1) * EncodedSize(kGradCodec, phi / sg) : (sg - 1) * B / sg));
  const uint64_t kr = D / sg;
  if (SplitBoundary(*cfg, static_cast<int>(D))) {
    // Reduce-scatter of the G shard into s_os / s_g slices of B / s_os over the slices group
    // (inside the node when the OS shard spans no more nodes than the G shard), then all-reduce
    // of the slice over the D / s_os copies (inside the node when there is one OS group per node
    // column: s_os^inter = n).
    const uint64_t k1 = so / sg, k2 = D / so;
    add(braidShardTrafficReplica, cfg->os.inter == cfg->g.inter, (k1 - 1) * (B / so));
    add(braidShardTrafficReplica, n == static_cast<uint64_t>(cfg->os.inter),
        2 * (k2 - 1) * (B / so) / k2);
  } else {
    // Replica all-reduce of the G shard (B / s_g) over the D / s_g ranks holding the same shard.
    add(braidShardTrafficReplica, n == static_cast<uint64_t>(cfg->g.inter),
        (cfg->replicaEveryMicrobatch ? m : 1) * (2 * (kr - 1) * (B / sg) / kr));
  }
  // Redistribution: all-gather of the OS shard (B / s_os) over s_os / s_p ranks.
  add(braidShardTrafficRedistribute, cfg->os.inter == cfg->p.inter, (so / sp - 1) * B / so);
  // Readiness agreement (4 int64) and norm + overflow count (2 doubles) over all ranks.
  add(braidShardTrafficControl, n == 1, 2 * (D - 1) * 48 / D);
  return braidSuccess;
}

}  // extern "C"

namespace {

// Ranks of the job with the same colour as `rank` under `color_of`, as "a,b,c".
template <typename F>
std::string Members(const braidShardConfig_t& c, int rank, F color_of) {
  const int D = c.ranksPerNode * c.nodes;
  const int mine = color_of(Layout(c, rank));
  std::string s;
  int count = 0;
  for (int r = 0; r < D; ++r) {
    if (color_of(Layout(c, r)) != mine) continue;
    if (count++ > 0) s += ",";
    if (count > 16) {
      s += "...";
      break;
    }
    s += std::to_string(r);
  }
  return "{" + s + "}";
}

std::string FactorText(const braidShardFactor_t& f) {
  return std::to_string(f.intra) + "x" + std::to_string(f.inter) + " (" +
         std::to_string(SizeOf(f)) + ")";
}

std::string Level(const braidShardFactor_t& f) {
  if (SizeOf(f) == 1) return "local";
  if (f.inter == 1) return "intra-node";
  if (f.intra == 1) return "inter-node";
  return "intra+inter-node";
}

}  // namespace

static braidResult_t ShardReportImpl(const braidShardConfig_t* cfg, int rank, uint64_t phi,
                                     char* buf, size_t len) {
  if (!cfg || !buf || len == 0)
    return SetLastError(braidErrInvalidArgument, "braidShardReport: NULL argument");
  std::string why = Validate(*cfg);
  if (!why.empty()) return SetLastError(braidErrInvalidArgument, "braidShardReport: " + why);
  const braidShardConfig_t& c = *cfg;
  const int R = c.ranksPerNode, n = c.nodes, D = R * n;
  if (rank < 0 || rank >= D)
    return SetLastError(braidErrInvalidArgument, "braidShardReport: rank " + std::to_string(rank) +
                                                     " outside the job of " + std::to_string(D));
  const RankLayout l = Layout(c, rank);
  const int sp = SizeOf(c.p), sg = SizeOf(c.g), so = SizeOf(c.os);
  std::string s;
  s += "preset " + std::string(c.preset[0] ? c.preset : "(custom)") + " on " + std::to_string(n) +
       " node(s) x " + std::to_string(R) + " ranks = " + std::to_string(D) + " ranks\n";
  if (c.note[0]) s += "note: " + std::string(c.note) + "\n";
  s += "factors: s_p = " + FactorText(c.p) + ", s_g = " + FactorText(c.g) +
       ", s_os = " + FactorText(c.os) + "\n";
  s += "rank " + std::to_string(rank) + " (node " + std::to_string(l.node) + ", local " +
       std::to_string(l.local) + ") holds P shard " + std::to_string(l.pos[kP]) + "/" +
       std::to_string(sp) + ", G shard " + std::to_string(l.pos[kG]) + "/" + std::to_string(sg) +
       ", OS shard " + std::to_string(l.pos[kOs]) + "/" + std::to_string(so) + "\n";
  auto p_group = Members(c, rank, [](const RankLayout& x) { return x.group[kP]; });
  auto g_group = Members(c, rank, [](const RankLayout& x) { return x.group[kG]; });
  auto replicas = Members(c, rank, [](const RankLayout& x) { return x.replica_color; });
  auto redist = Members(c, rank, [](const RankLayout& x) { return x.redist_color; });
  s += "per micro-batch:\n";
  if (sp > 1 && SecondaryCopy(c)) {
    auto h_group = Members(c, rank, [](const RankLayout& x) { return x.hpz_color; });
    s += "  forward, per bucket: all-gather parameters over the p-group " + p_group + " (" +
         Level(c.p) + (c.qwz ? ", INT8 qwZ" : "") +
         "), next bucket prefetched; at release keep 1/" + std::to_string(c.hpz) +
         " of it as the hpZ secondary copy" + (c.hpzInt8 ? " (INT8)" : "") + "\n";
    s += "  backward (and any later gather before the update), per bucket: all-gather the "
         "secondary copy over " +
         h_group + " (intra-node)\n";
  } else if (sp > 1) {
    s += "  forward and backward, per bucket: all-gather parameters over the p-group " + p_group +
         " (" + Level(c.p) + (c.qwz ? ", INT8 qwZ" : "") + "), next bucket prefetched\n";
  } else
    s += "  parameters replicated: no gather\n";
  if (sg > 1)
    s += "  backward, per bucket: reduce-scatter gradients over the g-group " + g_group + " (" +
         Level(c.g) + (c.qgz ? ", INT4 qgZ" : "") + "), accumulate the shard\n";
  else
    s += "  backward: accumulate full gradients locally, no communication\n";
  const int replica_count = D / sg;
  if (c.replicaEveryMicrobatch && replica_count > 1)
    s += "  all-reduce gradient shards across replicas " + replicas + "\n";
  s += "per step (accumulation boundary):\n";
  if (SplitBoundary(c, D)) {
    auto slices = Members(c, rank, [](const RankLayout& x) { return x.slices_color; });
    auto copies = Members(c, rank, [](const RankLayout& x) { return x.copies_color; });
    if (so / sg > 1)
      s += "  reduce-scatter the gradient shard into OS slices over " + slices + "\n";
    if (D / so > 1) s += "  all-reduce the OS slice across its copies " + copies + "\n";
  } else if (!c.replicaEveryMicrobatch && replica_count > 1) {
    s += "  all-reduce gradient shards across replicas " + replicas + "\n";
  }
  s += "  AdamW on OS shard " + std::to_string(l.pos[kOs]) + "/" + std::to_string(so) +
       " (select & drop: keep 1/" + std::to_string(so / sg) + " of the G shard)\n";
  if (so / sp > 1)
    s += "  all-gather updated parameters over " + redist +
         " (the s_os/s_p = " + std::to_string(so / sp) +
         " ranks whose OS shards tile this P shard)\n";
  else
    s += "  updated parameters written in place: no redistribution\n";
  if (SecondaryCopy(c))
    s += "  hpZ secondary copy over " + std::to_string(c.hpz) + " ranks" +
         (c.hpzInt8 ? " (INT8)" : "") + " dropped (rebuilt at the next forward release)\n";
  else if (c.hpz)
    s += "  hpZ: no secondary copy (it would equal the primary P shard)\n";
  braidShardMemory_t m;
  braidShardMemoryFormula(&c, phi, 2, &m);
  s += "memory per rank for phi = " + std::to_string(phi) + " (bf16 params): P 2phi/" +
       std::to_string(sp) + " = " + std::to_string(m.params) + " B, G 2phi/" + std::to_string(sg) +
       " = " + std::to_string(m.grads) + " B, OS 12phi/" + std::to_string(so) + " = " +
       std::to_string(m.optimizer) + " B, total " + std::to_string(m.total) + " B\n";
  std::snprintf(buf, len, "%s", s.c_str());
  return braidSuccess;
}

// The C entry points: each runs its implementation above under NoThrow.
extern "C" {
braidResult_t braidShardConfigValidate(const braidShardConfig_t* cfg, char* err, size_t errlen) {
  return NoThrow("braidShardConfigValidate",
                 [&] { return ShardConfigValidateImpl(cfg, err, errlen); });
}
braidResult_t braidShardPresetForShape(const char* name, int R, int n, braidShardConfig_t* cfg) {
  return NoThrow("braidShardPresetForShape",
                 [&] { return ShardPresetForShapeImpl(name, R, n, cfg); });
}
braidResult_t braidShardPreset(const char* name, braidComm_t comm, braidShardConfig_t* cfg) {
  return NoThrow("braidShardPreset", [&] { return ShardPresetImpl(name, comm, cfg); });
}
braidResult_t braidShardTrafficFormula(const braidShardConfig_t* cfg, uint64_t phi, int paramBytes,
                                       int microbatches, int gathers, braidShardTraffic_t* out) {
  return NoThrow("braidShardTrafficFormula", [&] {
    return ShardTrafficFormulaImpl(cfg, phi, paramBytes, microbatches, gathers, out);
  });
}
braidResult_t braidShardMemoryFormula(const braidShardConfig_t* cfg, uint64_t phi, int paramBytes,
                                      braidShardMemory_t* mem) {
  return NoThrow("braidShardMemoryFormula",
                 [&] { return ShardMemoryFormulaImpl(cfg, phi, paramBytes, mem); });
}
braidResult_t braidShardReport(const braidShardConfig_t* cfg, int rank, uint64_t phi, char* buf,
                               size_t len) {
  return NoThrow("braidShardReport", [&] { return ShardReportImpl(cfg, rank, phi, buf, len); });
}
}  // extern "C"
