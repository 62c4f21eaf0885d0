// The planner (sharding.md section 4, the Lins planner): enumerates every valid factor choice,
// models each with plan_model.h, drops those over the memory and ranks the rest by predicted
// communication time per step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"
#include "sharding/plan_model.h"

namespace braid::shard {
namespace {

// Predicted times closer than this (relative) are a tie: the model cannot tell them apart, and
// configurations that move the same bytes over the same levels (e.g. ZeRO-1 and s_os = R x 1 at
// one micro-batch) differ only by rounding and a few latencies.
constexpr double kTieTolerance = 1e-3;

std::vector<int> Divisors(int x) {
  std::vector<int> d;
  for (int i = 1; i <= x; ++i)
    if (x % i == 0) d.push_back(i);
  return d;
}

// How sharded a configuration is, for ties: fewer and smaller shards first, then fewer shards
// across nodes (a tie keeps the traffic that could use the fast level inside the node), then no
// quantization (exact gradients and parameters).
std::vector<int> Sharding(const braidShardConfig_t& c) {
  return {SizeOf(c.p), SizeOf(c.g), SizeOf(c.os), c.p.inter,
          c.g.inter,   c.os.inter,  c.hpz,        c.qwz + c.qgz};
}

std::vector<braidShardConfig_t> Enumerate(const PlanInputs& in) {
  std::vector<braidShardFactor_t> factors;
  for (int a : Divisors(in.R))
    for (int b : Divisors(in.n)) factors.push_back({a, b});
  std::vector<braidShardConfig_t> out;
  for (const auto& p : factors)
    for (const auto& g : factors) {
      if (g.intra < p.intra || g.inter < p.inter) continue;
      for (const auto& os : factors) {
        if (os.intra < g.intra || os.inter < g.inter) continue;
        braidShardConfig_t c = BRAID_SHARD_CONFIG_INITIALIZER;
        c.ranksPerNode = in.R;
        c.nodes = in.n;
        c.p = p;
        c.g = g;
        c.os = os;
        c.allowPartialNode = in.partial_node;
        if (!Validate(c).empty()) continue;
        // Variants: hpZ (a secondary parameter copy inside the node, so the backward gather
        // stays there) where parameters are sharded across nodes; qwZ / qgZ where allowed.
        for (int hpz : {0, in.R}) {
          if (hpz && (p.inter == 1 || in.R == 1)) continue;
          for (int qwz = 0; qwz <= (in.quantization && SizeOf(p) > 1); ++qwz)
            for (int qgz = 0; qgz <= (in.quantization && SizeOf(g) > 1); ++qgz) {
              braidShardConfig_t v = c;
              v.hpz = hpz;
              v.qwz = qwz;
              v.qgz = qgz;
              out.push_back(v);
            }
        }
      }
    }
  return out;
}

std::string F(const braidShardFactor_t& f) {
  return std::to_string(f.intra) + "x" + std::to_string(f.inter);
}

std::string Ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  return b;
}

std::string Gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB", bytes / 1e9);
  return b;
}

// What a configuration does, in words, for the explanation.
std::string Describe(const braidShardConfig_t& c, int n) {
  std::string s;
  if (SizeOf(c.p) == 1)
    s += "gathers no parameters (s_p = 1)";
  else
    s += "gathers parameters over " + F(c.p) +
         (c.p.inter > 1 ? " (across " + std::to_string(c.p.inter) + " nodes)"
                        : " (inside the node)") +
         " twice per micro-batch";
  if (SizeOf(c.g) == 1)
    s += ", reduces gradients only at the accumulation boundary";
  else
    s += ", reduce-scatters gradients over " + F(c.g) + " every micro-batch";
  if (SizeOf(c.os) == 1)
    s += " and keeps optimizer states replicated";
  else if (c.os.inter == 1)
    s += " and shards optimizer states " + F(c.os) +
         ", inside the node, so the update's redistribution stays on the intra-node links";
  else
    s += " and shards optimizer states " + F(c.os) + " across " + std::to_string(c.os.inter) +
         " of " + std::to_string(n) + " nodes";
  return s;
}

std::string Explain(const PlanInputs& in, const braidShardPlanEntry_t& best, int fits,
                    int considered, int ties, CostCache& cost) {
  const braidShardConfig_t& b = best.config;
  std::string s = "Chose s_p = " + F(b.p) + ", s_g = " + F(b.g) + ", s_os = " + F(b.os) +
                  (b.hpz ? " with hpZ" : "") + (b.qwz ? " + qwZ" : "") + (b.qgz ? " + qgZ" : "") +
                  ": " + Ms(best.commSeconds) + " of communication per step, " +
                  Gb(best.memoryBytes) + " per device of " + Gb(in.memory) + " (" +
                  std::to_string(fits) + " of " + std::to_string(considered) +
                  " configurations fit). It " + Describe(b, in.n) + ".";
  if (ties > 0) {
    // Piecewise: a "literal" + std::string&& chain trips GCC 12's -Wrestrict false positive.
    s += " ";
    s += std::to_string(ties);
    s += ties == 1 ? " other configuration is" : " other configurations are";
    s += " predicted within 0.1 % of it; it is the least sharded of them.";
  }
  for (const char* name : {"zero3", "mics"}) {
    braidShardConfig_t c;
    if (braidShardPresetForShape(name, in.R, in.n, &c) != braidSuccess) continue;
    const braidShardPlanEntry_t e = Evaluate(in, c, cost);
    std::string why;
    if (std::strcmp(name, "zero3") == 0)
      why = in.n > 1 ? "it gathers parameters across " + std::to_string(in.n) +
                           " nodes twice every micro-batch and reduce-scatters gradients across "
                           "them"
                     : "it gathers parameters twice every micro-batch";
    else
      why =
          "its gathers and reduce-scatters run every micro-batch inside the node, on top of the "
          "same cross-node gradient reduction";
    s += std::string(" ") + (std::strcmp(name, "zero3") == 0 ? "ZeRO-3" : "MiCS") + " would take " +
         Ms(e.commSeconds) + " (" + Gb(e.memoryBytes) + (e.fits ? "" : ", over the memory") +
         "): " + why + ".";
  }
  return s;
}

braidResult_t PlanImpl(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                       const braidShardPlanOptions_t* options, braidShardPlan_t* plan) {
  if (!plan) return SetLastError(braidErrInvalidArgument, "braidShardPlan: plan is NULL");
  PlanInputs in;
  if (std::string why = NormalizeInputs(model, cluster, options, &in); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlan: " + why);
  CostCache cost(in.link, static_cast<int>(in.e));
  const auto configs = Enumerate(in);
  std::vector<braidShardPlanEntry_t> fit;
  double least = HUGE_VAL;
  for (const auto& c : configs) {
    braidShardPlanEntry_t e = Evaluate(in, c, cost);
    least = std::min(least, e.memoryBytes);
    if (e.fits) fit.push_back(e);
  }
  if (fit.empty())
    return SetLastError(braidErrInvalidArgument,
                        "braidShardPlan: no configuration fits: the smallest needs " + Gb(least) +
                            " per device (model states, activations and buffers) and " +
                            Gb(in.memory - in.reserve) +
                            " are available; use recomputation, a smaller micro-batch or more "
                            "devices");
  std::stable_sort(fit.begin(), fit.end(),
                   [](const auto& a, const auto& b) { return a.commSeconds < b.commSeconds; });
  // Among the ties with the fastest, the least sharded goes first.
  size_t pick = 0;
  int ties = 0;
  for (size_t i = 1; i < fit.size(); ++i) {
    if (fit[i].commSeconds > fit[0].commSeconds * (1 + kTieTolerance)) break;
    ++ties;
    if (Sharding(fit[i].config) < Sharding(fit[pick].config)) pick = i;
  }
  std::rotate(fit.begin(), fit.begin() + pick, fit.begin() + pick + 1);
  for (auto& e : fit) {
    std::snprintf(e.config.preset, sizeof e.config.preset, "lins");
    e.config.note[0] = 0;
  }
  braidShardPlan_t out{};
  out.size = sizeof(braidShardPlan_t);
  out.count = static_cast<int>(fit.size());
  out.considered = static_cast<int>(configs.size());
  out.best = fit[0];
  out.ranked =
      static_cast<braidShardPlanEntry_t*>(std::malloc(sizeof(braidShardPlanEntry_t) * fit.size()));
  if (!out.ranked)
    return SetLastError(braidErrSystem, "braidShardPlan: out of memory for the ranked list");
  std::memcpy(out.ranked, fit.data(), sizeof(braidShardPlanEntry_t) * fit.size());
  std::snprintf(out.explanation, sizeof out.explanation, "%s",
                Explain(in, fit[0], out.count, out.considered, ties, cost).c_str());
  *plan = out;
  return braidSuccess;
}

braidResult_t EvaluateImpl(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                           const braidShardPlanOptions_t* options, const braidShardConfig_t* cfg,
                           braidShardPlanEntry_t* entry) {
  if (!cfg || !entry)
    return SetLastError(braidErrInvalidArgument, "braidShardPlanEvaluate: NULL argument");
  PlanInputs in;
  if (std::string why = NormalizeInputs(model, cluster, options, &in); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlanEvaluate: " + why);
  if (std::string why = Validate(*cfg); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlanEvaluate: " + why);
  if (cfg->ranksPerNode != in.R || cfg->nodes != in.n)
    return SetLastError(braidErrInvalidArgument,
                        "braidShardPlanEvaluate: the configuration is for " +
                            std::to_string(cfg->ranksPerNode) + "x" + std::to_string(cfg->nodes) +
                            ", the cluster is " + std::to_string(in.R) + "x" +
                            std::to_string(in.n));
  CostCache cost(in.link, static_cast<int>(in.e));
  *entry = Evaluate(in, *cfg, cost);
  return braidSuccess;
}

braidResult_t PresetPlannedImpl(braidComm_t comm, const braidShardModel_t* model,
                                const braidShardCluster_t* cluster,
                                const braidShardPlanOptions_t* options, braidShardConfig_t* cfg) {
  if (!comm || !cluster || !cfg)
    return SetLastError(braidErrInvalidArgument, "braidShardPresetPlanned: NULL argument");
  // The ddp preset resolves the comm's shape (and says why when the nodes are uneven).
  braidShardConfig_t shape;
  if (braidShardPreset("ddp", comm, &shape) != braidSuccess)
    return SetLastError(braidErrInvalidUsage,
                        std::string("braidShardPresetPlanned: ") + LastError());
  braidShardCluster_t c = *cluster;
  c.ranksPerNode = shape.ranksPerNode;
  c.nodes = shape.nodes;
  braidShardPlan_t plan{};
  if (braidShardPlan(model, &c, options, &plan) != braidSuccess)
    return SetLastError(braidErrInvalidArgument,
                        std::string("braidShardPresetPlanned: ") + LastError());
  *cfg = plan.best.config;
  braidShardPlanFree(&plan);
  return braidSuccess;
}

}  // namespace
}  // namespace braid::shard

using namespace braid::shard;

extern "C" {
braidResult_t braidShardPlan(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                             const braidShardPlanOptions_t* options, braidShardPlan_t* plan) {
  return NoThrow("braidShardPlan", [&] { return PlanImpl(model, cluster, options, plan); });
}
void braidShardPlanFree(braidShardPlan_t* plan) {
  if (!plan) return;
  std::free(plan->ranked);
  plan->ranked = nullptr;
  plan->count = 0;
}
braidResult_t braidShardPlanEvaluate(const braidShardModel_t* model,
                                     const braidShardCluster_t* cluster,
                                     const braidShardPlanOptions_t* options,
                                     const braidShardConfig_t* cfg, braidShardPlanEntry_t* entry) {
  return NoThrow("braidShardPlanEvaluate",
                 [&] { return EvaluateImpl(model, cluster, options, cfg, entry); });
}
braidResult_t braidShardPresetPlanned(braidComm_t comm, const braidShardModel_t* model,
                                      const braidShardCluster_t* cluster,
                                      const braidShardPlanOptions_t* options,
                                      braidShardConfig_t* cfg) {
  return NoThrow("braidShardPresetPlanned",
                 [&] { return PresetPlannedImpl(comm, model, cluster, options, cfg); });
}
}  // extern "C"
