// The planner (sharding.md section 4, the Lins planner): enumerates every valid factor choice,
// models each with plan_model.h, drops those over the memory and ranks the rest by predicted
// communication time per step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/last_error.h"
#include "sharding/layout.h"
#include "sharding/lins_model.h"
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
        if (in.cost_model == braidShardCostLins && !LinsAdmits(c).empty()) continue;
        // Variants: hpZ (a secondary parameter copy inside the node, so the backward gather
        // stays there) where parameters are sharded across nodes; qwZ / qgZ where allowed.
        // Lins' executor has neither.
        for (int hpz : {0, in.R}) {
          if (hpz && (p.inter == 1 || in.R == 1 || in.cost_model == braidShardCostLins)) continue;
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
  return FactorName(f);
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

const char* ModelName(braidShardCostModel_t m) {
  return m == braidShardCostLins ? "Lins'" : "braid's";
}

std::string Config(const braidShardConfig_t& c) {
  return "s_p = " + F(c.p) + ", s_g = " + F(c.g) + ", s_os = " + F(c.os) +
         (c.hpz ? " with hpZ" : "") + (c.qwz ? " + qwZ" : "") + (c.qgz ? " + qgZ" : "");
}

// Seconds per term name (braidShardPlanTerm_t.term) of `cfg` under in.cost_model.
std::map<std::string, double> TermSeconds(const PlanInputs& in, const braidShardConfig_t& cfg,
                                          CostCache& cost) {
  std::map<std::string, double> out;
  for (const auto& t : TermsOf(in, cfg, cost)) out[t.term] += t.seconds;
  return out;
}

// The term where this pick (`mine`) and the other model's (`theirs`) differ most under
// in.cost_model, as "T_os1: 96.0 ms for this pick, 283.7 ms for that one".
std::string LargestDifference(const PlanInputs& in, const braidShardConfig_t& mine,
                              const braidShardConfig_t& theirs, CostCache& cost) {
  auto a = TermSeconds(in, mine, cost), b = TermSeconds(in, theirs, cost);
  std::string name;
  double best = -1;
  for (const auto* m : {&a, &b})
    for (const auto& [term, unused] : *m) {
      const double d = std::fabs(a[term] - b[term]);
      if (d > best) {
        best = d;
        name = term;
      }
    }
  if (name.empty()) return "no term";
  return name + ": " + Ms(a[name]) + " for this pick, " + Ms(b[name]) + " for that one";
}

// The ranking of one model: every configuration it considers, those that fit (fastest first,
// the tie winner at the front), and the numbers the explanation quotes.
struct Ranking {
  std::vector<braidShardConfig_t> configs;
  std::vector<braidShardPlanEntry_t> fit;
  double least = HUGE_VAL;  // the smallest memory of any configuration
  int ties = 0;
};

// How each model breaks a tie (times within kTieTolerance), smaller first.
//  - braid's: the least sharded (Sharding()): the model cannot tell them apart, and the least
//    sharded keeps more exchanges inside the node.
//  - Lins': section IV says "fewer nodes win"; its bandwidth table also cannot tell apart the
//    intra-node OS shardings (s_os/s_p broadcasts of 2 Phi/s_os move 2 Phi whatever s_os is) nor,
//    at one micro-batch, s_g = s_p from s_g = s_os (T_g is zero). Then the cost one more
//    micro-batch would add (so the choice holds as accumulation grows), then the least memory
//    (free headroom): that gives the published s_os = 8 x 1 over 4 x 1 and s_g = 1 over 8 x 1.
std::vector<double> TieKey(const PlanInputs& in, const braidShardPlanEntry_t& e, CostCache& cost) {
  const braidShardConfig_t& c = e.config;
  if (in.cost_model != braidShardCostLins) {
    std::vector<double> k;
    for (int v : Sharding(c)) k.push_back(v);
    return k;
  }
  PlanInputs more = in;
  more.micro_batches += 1;
  const double growth = Evaluate(more, c, cost).commSeconds - e.commSeconds;
  // Relative rounding: growths within the tie tolerance of the step are equal.
  const double unit = std::max(e.commSeconds, 1e-12) * kTieTolerance;
  return {static_cast<double>(c.os.inter), static_cast<double>(c.g.inter),
          static_cast<double>(c.p.inter), std::round(growth / unit), e.memoryBytes};
}

Ranking Rank(const PlanInputs& in, CostCache& cost) {
  Ranking r;
  r.configs = Enumerate(in);
  for (const auto& c : r.configs) {
    braidShardPlanEntry_t e = Evaluate(in, c, cost);
    r.least = std::min(r.least, e.memoryBytes);
    if (e.fits) r.fit.push_back(e);
  }
  std::stable_sort(r.fit.begin(), r.fit.end(),
                   [](const auto& a, const auto& b) { return a.commSeconds < b.commSeconds; });
  if (r.fit.empty()) return r;
  // Among the ties with the fastest, the model's tie rule picks the front.
  size_t pick = 0;
  std::vector<double> best = TieKey(in, r.fit[0], cost);
  for (size_t i = 1; i < r.fit.size(); ++i) {
    if (r.fit[i].commSeconds > r.fit[0].commSeconds * (1 + kTieTolerance)) break;
    ++r.ties;
    std::vector<double> k = TieKey(in, r.fit[i], cost);
    if (k < best) {
      best = std::move(k);
      pick = i;
    }
  }
  std::rotate(r.fit.begin(), r.fit.begin() + pick, r.fit.begin() + pick + 1);
  return r;
}

// What the other model picks and why the two differ, term by term; "" where the other model
// does not apply (Lins' has no quantization or partial nodes) or nothing fits it.
std::string CompareModels(const PlanInputs& in, const braidShardConfig_t& mine) {
  PlanInputs other = in;
  other.cost_model = in.cost_model == braidShardCostLins ? braidShardCostBraid : braidShardCostLins;
  if (other.cost_model == braidShardCostLins && (in.quantization || in.partial_node))
    return " Lins' model does not apply with quantization or partial nodes allowed.";
  CostCache cost(in.link, static_cast<int>(in.e), other.cost_model);
  const Ranking r = Rank(other, cost);
  if (r.fit.empty())
    return std::string(" Nothing fits under ") + ModelName(other.cost_model) + " model.";
  const braidShardConfig_t& theirs = r.fit[0].config;
  std::string s = std::string(" ") + ModelName(other.cost_model) + " model picks ";
  if (SameFactor(theirs.p, mine.p) && SameFactor(theirs.g, mine.g) &&
      SameFactor(theirs.os, mine.os) && theirs.hpz == mine.hpz && theirs.qwz == mine.qwz &&
      theirs.qgz == mine.qgz)
    return s + "the same configuration.";
  s += Config(theirs) + " (" + Ms(r.fit[0].commSeconds) + " there";
  const bool mine_admitted = other.cost_model != braidShardCostLins || LinsAdmits(mine).empty();
  if (!mine_admitted)
    return s + "; Lins' executor cannot run this pick: " + LinsAdmits(mine) + ").";
  const braidShardPlanEntry_t m = Evaluate(other, mine, cost);
  s += ", this pick " + Ms(m.commSeconds) + (m.fits ? "" : " and over its memory") +
       "), and they differ most in " + LargestDifference(other, mine, theirs, cost) + ".";
  CostCache here(in.link, static_cast<int>(in.e), in.cost_model);
  if (in.cost_model == braidShardCostLins && !LinsAdmits(theirs).empty())
    return s + " Lins' executor cannot run that pick: " + LinsAdmits(theirs) + ".";
  const braidShardPlanEntry_t t = Evaluate(in, theirs, here);
  s += std::string(" Under ") + ModelName(in.cost_model) + " model that pick costs " +
       Ms(t.commSeconds) + (t.fits ? "" : " and is over the memory") +
       ", and they differ most in " + LargestDifference(in, mine, theirs, here) + ".";
  return s;
}

std::string Explain(const PlanInputs& in, const braidShardPlanEntry_t& best, int fits,
                    int considered, int ties, CostCache& cost) {
  const braidShardConfig_t& b = best.config;
  std::string s = "Chose " + Config(b) + ": " + Ms(best.commSeconds) +
                  " of communication per step under " + ModelName(in.cost_model) + " model, " +
                  Gb(best.memoryBytes) + " per device of " + Gb(in.memory) + " (" +
                  std::to_string(fits) + " of " + std::to_string(considered) +
                  " configurations fit). It " + Describe(b, in.n) + ".";
  if (ties > 0) {
    // Piecewise: a "literal" + std::string&& chain trips GCC 12's -Wrestrict false positive.
    s += " ";
    s += std::to_string(ties);
    s += ties == 1 ? " other configuration is" : " other configurations are";
    s += in.cost_model == braidShardCostLins
             ? " predicted within 0.1 % of it; it spans the fewest nodes, adds the least per "
               "extra micro-batch, then uses the least memory."
             : " predicted within 0.1 % of it; it is the least sharded of them.";
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
  s += CompareModels(in, b);
  return s;
}

braidResult_t PlanImpl(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                       const braidShardPlanOptions_t* options, braidShardPlan_t* plan) {
  if (!plan) return SetLastError(braidErrInvalidArgument, "braidShardPlan: plan is NULL");
  PlanInputs in;
  if (std::string why = NormalizeInputs(model, cluster, options, &in); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlan: " + why);
  CostCache cost(in.link, static_cast<int>(in.e), in.cost_model);
  Ranking r = Rank(in, cost);
  std::vector<braidShardPlanEntry_t>& fit = r.fit;
  if (fit.empty())
    return SetLastError(braidErrInvalidArgument,
                        "braidShardPlan: no configuration fits: the smallest needs " + Gb(r.least) +
                            " per device (model states, activations and buffers) and " +
                            Gb(in.memory - in.reserve) +
                            " are available; use recomputation, a smaller micro-batch or more "
                            "devices");
  for (auto& e : fit) {
    std::snprintf(e.config.preset, sizeof e.config.preset, "lins");
    e.config.note[0] = 0;
  }
  braidShardPlan_t out{};
  out.size = sizeof(braidShardPlan_t);
  out.count = static_cast<int>(fit.size());
  out.considered = static_cast<int>(r.configs.size());
  out.best = fit[0];
  out.ranked =
      static_cast<braidShardPlanEntry_t*>(std::malloc(sizeof(braidShardPlanEntry_t) * fit.size()));
  if (!out.ranked)
    return SetLastError(braidErrSystem, "braidShardPlan: out of memory for the ranked list");
  std::memcpy(out.ranked, fit.data(), sizeof(braidShardPlanEntry_t) * fit.size());
  std::snprintf(out.explanation, sizeof out.explanation, "%s",
                Explain(in, fit[0], out.count, out.considered, r.ties, cost).c_str());
  *plan = out;
  return braidSuccess;
}

// The checks braidShardPlanEvaluate and braidShardPlanTerms share: usable inputs, a valid
// configuration of the cluster's shape, one the chosen model considers.
std::string CheckConfig(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                        const braidShardPlanOptions_t* options, const braidShardConfig_t* cfg,
                        PlanInputs* in) {
  if (std::string why = NormalizeInputs(model, cluster, options, in); !why.empty()) return why;
  if (std::string why = Validate(*cfg); !why.empty()) return why;
  if (cfg->ranksPerNode != in->R || cfg->nodes != in->n)
    return "the configuration is for " + std::to_string(cfg->ranksPerNode) + "x" +
           std::to_string(cfg->nodes) + ", the cluster is " + std::to_string(in->R) + "x" +
           std::to_string(in->n);
  if (in->cost_model == braidShardCostLins)
    if (std::string why = LinsAdmits(*cfg); !why.empty())
      return "the lins cost model does not price this configuration: " + why;
  return "";
}

braidResult_t TermsImpl(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                        const braidShardPlanOptions_t* options, const braidShardConfig_t* cfg,
                        braidShardPlanTerm_t* terms, int capacity, int* count) {
  if (!cfg || !count || capacity < 0 || (capacity > 0 && !terms))
    return SetLastError(braidErrInvalidArgument,
                        "braidShardPlanTerms: NULL argument or negative capacity");
  PlanInputs in;
  if (std::string why = CheckConfig(model, cluster, options, cfg, &in); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlanTerms: " + why);
  CostCache cost(in.link, static_cast<int>(in.e), in.cost_model);
  const auto list = TermsOf(in, *cfg, cost);
  for (int i = 0; i < capacity && i < static_cast<int>(list.size()); ++i) {
    braidShardPlanTerm_t& t = terms[i];
    t = braidShardPlanTerm_t{};
    std::snprintf(t.term, sizeof t.term, "%s", list[i].term.c_str());
    std::snprintf(t.what, sizeof t.what, "%s", list[i].what.c_str());
    t.seconds = list[i].seconds;
    t.sendBytes = list[i].send_bytes;
    t.interBytes = list[i].inter_bytes;
  }
  *count = static_cast<int>(list.size());
  return braidSuccess;
}

braidResult_t EvaluateImpl(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                           const braidShardPlanOptions_t* options, const braidShardConfig_t* cfg,
                           braidShardPlanEntry_t* entry) {
  if (!cfg || !entry)
    return SetLastError(braidErrInvalidArgument, "braidShardPlanEvaluate: NULL argument");
  PlanInputs in;
  if (std::string why = CheckConfig(model, cluster, options, cfg, &in); !why.empty())
    return SetLastError(braidErrInvalidArgument, "braidShardPlanEvaluate: " + why);
  CostCache cost(in.link, static_cast<int>(in.e), in.cost_model);
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
braidResult_t braidShardPlanTerms(const braidShardModel_t* model,
                                  const braidShardCluster_t* cluster,
                                  const braidShardPlanOptions_t* options,
                                  const braidShardConfig_t* cfg, braidShardPlanTerm_t* terms,
                                  int capacity, int* count) {
  return NoThrow("braidShardPlanTerms",
                 [&] { return TermsImpl(model, cluster, options, cfg, terms, capacity, count); });
}
braidResult_t braidShardPresetPlanned(braidComm_t comm, const braidShardModel_t* model,
                                      const braidShardCluster_t* cluster,
                                      const braidShardPlanOptions_t* options,
                                      braidShardConfig_t* cfg) {
  return NoThrow("braidShardPresetPlanned",
                 [&] { return PresetPlannedImpl(comm, model, cluster, options, cfg); });
}
}  // extern "C"
