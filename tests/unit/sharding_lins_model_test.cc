// The planner's Lins model (sharding.md section 4.1; sharding/lins_model.h): its terms against
// the spec's formulas computed here from braid's public cost model, its constraints and memory,
// the published LLaMA-7B choice of Table III, the larger models on the same cluster, the
// comparison with braid's model, and every error a caller can reach.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "braid/shard.h"
#include "sharding/layout.h"
#include "sharding/lins_model.h"
#include "sharding/plan_model.h"

namespace {

using braid::shard::CostCache;
using braid::shard::Evaluate;
using braid::shard::LinsAdmits;
using braid::shard::LinsTermsOf;
using braid::shard::NormalizeInputs;
using braid::shard::PlanInputs;

braidShardPlanOptions_t Lins() {
  braidShardPlanOptions_t o = BRAID_SHARD_PLAN_OPTIONS_INITIALIZER;
  o.costModel = braidShardCostLins;
  return o;
}

braidShardConfig_t Config(int R, int n, braidShardFactor_t p, braidShardFactor_t g,
                          braidShardFactor_t os) {
  braidShardConfig_t c = BRAID_SHARD_CONFIG_INITIALIZER;
  c.ranksPerNode = R;
  c.nodes = n;
  c.p = p;
  c.g = g;
  c.os = os;
  return c;
}

// Table III (sharding.md section 4.1): A800 80 GB, 8 per node, 128 nodes, 4 x HDR 200 Gb/s per
// node (4 NICs, 100 GB/s together), NVLink 300 GB/s; sequence 4096, micro-batch 1, M = 1, BF16.
braidShardCluster_t TableThreeCluster(int nics = 4) {
  braidShardCluster_t c = BRAID_SHARD_CLUSTER_INITIALIZER;
  c.ranksPerNode = 8;
  c.nodes = 128;
  c.deviceMemory = 80e9;
  c.link = {2e-6, 300e9, 5e-6, 100e9, nics};
  return c;
}

// LLaMA-7B, -13B, -30B, -65B: parameters, layers, hidden size; recomputation on from 30B
// (Table III: off for 7B and 13B, on for 30B).
struct Llama {
  const char* name;
  double params;
  int layers, hidden;
  bool recompute;
};
constexpr Llama kLlamas[] = {{"7B", 6.7e9, 32, 4096, false},
                             {"13B", 13.0e9, 40, 5120, false},
                             {"30B", 32.5e9, 60, 6656, true},
                             {"65B", 65.2e9, 80, 8192, true}};

braidShardModel_t ModelOf(const Llama& l) {
  braidShardModel_t m = BRAID_SHARD_MODEL_INITIALIZER;
  m.params = l.params;
  m.layers = l.layers;
  m.hidden = l.hidden;
  m.seq = 4096;
  m.microBatch = 1;
  m.microBatches = 1;
  m.recompute = l.recompute;
  return m;
}

std::string F(const braidShardFactor_t& f) {
  return std::to_string(f.intra) + "x" + std::to_string(f.inter);
}

// Lins' t(o, v, p0 x p1) as the model defines it: NCCL's ring for gathers, reduce-scatters and
// broadcasts (the rail-aligned ring across nodes with several NICs), braid's best all-reduce.
double T(braidCollective_t kind, double bytes, int intra, int inter, int sharing,
         const braidLinkParams_t& link) {
  double s = 0;
  if (kind == braidCollAllReduce) {
    EXPECT_EQ(braidEstimateCollective(kind, static_cast<uint64_t>(bytes), braidBfloat16, 0, intra,
                                      inter, sharing, &link, &s, nullptr, 0),
              braidSuccess);
  } else {
    const bool rails = inter > 1 && intra > 1 && link.nicsPerNode > 1 && kind != braidCollBroadcast;
    EXPECT_EQ(
        braidEstimateAlgorithm(rails ? "rail_ring" : "ring", kind, static_cast<uint64_t>(bytes),
                               braidBfloat16, 0, intra, inter, sharing, &link, &s),
        braidSuccess)
        << braidGetLastError(nullptr);
  }
  return s;
}

// T_p, T_g, T_os0, T_os1 of sharding.md section 4.1, from the formulas, on 8 x 4 ranks with
// three micro-batches: s_p = 2x1, s_g = s_os = 8x2 (so T_g applies) and s_p = 1, s_g = 1,
// s_os = 4x1 (only the boundary terms).
TEST(LinsModel, TermsAreTheSpecFormulas) {
  const int R = 8, n = 4, M = 3, L = 24;
  const double phi = 1.2e9, e = 2, B = phi / L, U = e * B;
  braidShardModel_t m = BRAID_SHARD_MODEL_INITIALIZER;
  m.params = phi;
  m.layers = L;
  m.hidden = 1024;
  m.seq = 1024;
  m.microBatches = M;
  braidShardCluster_t c = TableThreeCluster(1);
  c.nodes = n;
  const braidShardPlanOptions_t o = Lins();
  PlanInputs in;
  ASSERT_EQ(NormalizeInputs(&m, &c, &o, &in), "");
  ASSERT_EQ(in.cost_model, braidShardCostLins);
  CostCache cost(in.link, 2, braidShardCostLins);
  const braidLinkParams_t& l = c.link;

  const braidShardConfig_t a = Config(R, n, {2, 1}, {8, 2}, {8, 2});
  std::map<std::string, double> got;
  for (const auto& t : LinsTermsOf(in, a, cost)) got[t.term] += t.seconds;
  const int sp = 2;
  // Each layer's bucket twice gathered and once reduce-scattered over 2x1, 4 groups per node.
  const double tp =
      M * L *
      (2 * T(braidCollAllGather, e * B, 2, 1, 4, l) + T(braidCollReduceScatter, e * B, 2, 1, 4, l));
  // The p-shard's gradient all-reduced over s_g/s_p = 4x2 (2 such groups per node) in buckets
  // of U, every micro-batch but the last.
  const double tg = (M - 1) * (e * phi / (U * sp)) * T(braidCollAllReduce, U, 4, 2, 2, l);
  // At the boundary over the s_dp/s_p = 4x4 replicas (s_p^0 = 2 groups per node).
  const double tos0 = (e * phi / (U * sp)) * T(braidCollAllReduce, U, 4, 4, 2, l);
  // s_os/s_p = 8 broadcasts of 2 Phi/s_os over (8/2)x(2/1) = 4x2.
  const double tos1 = 8 * T(braidCollBroadcast, e * phi / 16, 4, 2, 2, l);
  EXPECT_EQ(got.size(), 4u);
  EXPECT_NEAR(got["T_p"], tp, 1e-9 * tp);
  EXPECT_NEAR(got["T_g"], tg, 1e-9 * tg);
  EXPECT_NEAR(got["T_os0"], tos0, 1e-9 * tos0);
  EXPECT_NEAR(got["T_os1"], tos1, 1e-9 * tos1);
  const braidShardPlanEntry_t ea = Evaluate(in, a, cost);
  EXPECT_NEAR(ea.commSeconds, tp + tg + tos0 + tos1, 1e-9 * ea.commSeconds);

  // s_p = s_g = 1: no T_p and no T_g; the whole gradient all-reduced over all 32 ranks, then
  // 4 broadcasts of 2 Phi / 4 inside the node (2 groups per node).
  const braidShardConfig_t b = Config(R, n, {1, 1}, {1, 1}, {4, 1});
  got.clear();
  for (const auto& t : LinsTermsOf(in, b, cost)) got[t.term] += t.seconds;
  EXPECT_EQ(got.size(), 2u);
  const double b0 = (e * phi / U) * T(braidCollAllReduce, U, 8, 4, 1, l);
  const double b1 = 4 * T(braidCollBroadcast, e * phi / 4, 4, 1, 2, l);
  EXPECT_NEAR(got["T_os0"], b0, 1e-9 * b0);
  EXPECT_NEAR(got["T_os1"], b1, 1e-9 * b1);

  // One micro-batch: T_g vanishes (the boundary's T_os0 covers the only one).
  m.microBatches = 1;
  ASSERT_EQ(NormalizeInputs(&m, &c, &o, &in), "");
  for (const auto& t : LinsTermsOf(in, a, cost)) EXPECT_NE(t.term, "T_g");

  // The public terms are the same numbers, in the same order.
  braidShardPlanTerm_t terms[8];
  int count = 0;
  ASSERT_EQ(braidShardPlanTerms(&m, &c, &o, &b, terms, 8, &count), braidSuccess);
  ASSERT_EQ(count, 2);
  EXPECT_STREQ(terms[0].term, "T_os0");
  EXPECT_STREQ(terms[1].term, "T_os1");
  EXPECT_NEAR(terms[0].seconds, b0, 1e-9 * b0);
  EXPECT_NE(std::strstr(terms[1].what, "broadcasts"), nullptr) << terms[1].what;
}

// Lins' constraints: s_g in {s_p, s_os}, no hpZ or quantization, no per-micro-batch replica
// all-reduce; the enumeration holds only those; activations are s b h (34, or 2 recomputed)
// per layer.
TEST(LinsModel, ConstraintsAndMemory) {
  EXPECT_EQ(LinsAdmits(Config(8, 4, {1, 1}, {1, 1}, {8, 1})), "");
  EXPECT_EQ(LinsAdmits(Config(8, 4, {1, 1}, {8, 1}, {8, 1})), "");
  EXPECT_EQ(LinsAdmits(Config(8, 4, {2, 1}, {2, 1}, {8, 4})), "");
  EXPECT_NE(LinsAdmits(Config(8, 4, {1, 1}, {8, 1}, {8, 4})).find("neither s_p"),
            std::string::npos);
  braidShardConfig_t h = Config(8, 4, {8, 4}, {8, 4}, {8, 4});
  h.hpz = 8;
  EXPECT_NE(LinsAdmits(h).find("hpZ"), std::string::npos);
  h.hpz = 0;
  h.replicaEveryMicrobatch = 1;
  EXPECT_NE(LinsAdmits(h).find("boundary"), std::string::npos);

  const braidShardModel_t m = ModelOf(kLlamas[0]);
  const braidShardCluster_t c = TableThreeCluster();
  const braidShardPlanOptions_t o = Lins();
  braidShardPlan_t plan{};
  ASSERT_EQ(braidShardPlan(&m, &c, &o, &plan), braidSuccess) << braidShardGetLastError(nullptr);
  // 8 x 128: (s_p, s_os) pairs with s_g one of two values where they differ.
  EXPECT_LT(plan.considered, 370);
  for (int i = 0; i < plan.count; ++i) EXPECT_EQ(LinsAdmits(plan.ranked[i].config), "") << i;
  const double sbh = 4096.0 * 4096;
  EXPECT_DOUBLE_EQ(plan.best.activationBytes, 34 * sbh * 32);
  braidShardPlanFree(&plan);
  braidShardModel_t r = m;
  r.recompute = 1;
  PlanInputs in;
  ASSERT_EQ(NormalizeInputs(&r, &c, &o, &in), "");
  EXPECT_DOUBLE_EQ(braid::shard::LinsActivationBytes(in), 2 * sbh * 32);
  // States as section 1 (the same formula as braid's model).
  CostCache cost(in.link, 2, braidShardCostLins);
  const braidShardPlanEntry_t e = Evaluate(in, Config(8, 128, {1, 1}, {1, 1}, {8, 1}), cost);
  EXPECT_NEAR(e.stateBytes, 2 * 6.7e9 + 2 * 6.7e9 + 12 * 6.7e9 / 8, 1);
}

// The published checkpoint: Lins chose s_p = 1x1, s_g = 1x1, s_os = 8x1 for LLaMA-7B on the
// 1024 A800 of Table III; the Lins model gives it, with 4 NICs (the cluster's HCAs) or the
// node's link as one.
TEST(LinsModel, ReproducesTheTableThreeChoiceForLlama7b) {
  const braidShardModel_t m = ModelOf(kLlamas[0]);
  const braidShardPlanOptions_t o = Lins();
  for (int nics : {4, 1}) {
    const braidShardCluster_t c = TableThreeCluster(nics);
    braidShardPlan_t plan{};
    ASSERT_EQ(braidShardPlan(&m, &c, &o, &plan), braidSuccess) << braidShardGetLastError(nullptr);
    const braidShardConfig_t& b = plan.best.config;
    EXPECT_EQ(F(b.p) + " " + F(b.g) + " " + F(b.os), "1x1 1x1 8x1") << nics << " NICs";
    // The explanation names braid's own pick for comparison and the term they differ most in.
    EXPECT_NE(std::strstr(plan.explanation, "braid's model picks"), nullptr) << plan.explanation;
    EXPECT_NE(std::strstr(plan.explanation, "they differ most in"), nullptr) << plan.explanation;
    braidShardPlanFree(&plan);
  }
}

// Larger models on the same cluster: the Lins model never shards parameters across nodes, and
// shards them (inside the node) exactly when no configuration with whole parameters and
// optimizer states sharded inside the node fits: while one fits, the cross-node broadcasts that
// an OS shard spanning nodes costs (T_os1) and the gathers of s_p > 1 (T_p) both lose to it.
TEST(LinsModel, ShardsParametersInsideTheNodeExactlyWhenNodeLocalStatesDoNotFit) {
  const braidShardCluster_t c = TableThreeCluster();
  const braidShardPlanOptions_t o = Lins();
  std::vector<bool> sharded;
  for (const Llama& l : kLlamas) {
    const braidShardModel_t m = ModelOf(l);
    bool node_local_fits = false;
    for (int os : {1, 2, 4, 8})
      for (int g : {1, os}) {
        const braidShardConfig_t cfg = Config(8, 128, {1, 1}, {g, 1}, {os, 1});
        braidShardPlanEntry_t e;
        ASSERT_EQ(braidShardPlanEvaluate(&m, &c, &o, &cfg, &e), braidSuccess)
            << braidShardGetLastError(nullptr);
        node_local_fits = node_local_fits || e.fits;
      }
    braidShardPlan_t plan{};
    ASSERT_EQ(braidShardPlan(&m, &c, &o, &plan), braidSuccess) << braidShardGetLastError(nullptr);
    const braidShardConfig_t& b = plan.best.config;
    EXPECT_EQ(b.p.inter, 1) << l.name << ": " << F(b.p);
    EXPECT_EQ(braid::shard::SizeOf(b.p) > 1, !node_local_fits) << l.name << ": s_p = " << F(b.p);
    sharded.push_back(braid::shard::SizeOf(b.p) > 1);
    braidShardPlanFree(&plan);
  }
  // Both sides are exercised: 7B and 13B keep parameters whole, 30B and 65B cannot.
  EXPECT_EQ(sharded, (std::vector<bool>{false, false, true, true}));
}

// braid's model picks differently on the same inputs (docs/sharding.md explains each), and its
// explanation names the Lins pick; the default options are braid's model.
TEST(LinsModel, BraidsModelIsTheDefaultAndNamesLinsPick) {
  const braidShardModel_t m = ModelOf(kLlamas[0]);
  const braidShardCluster_t c = TableThreeCluster();
  braidShardPlan_t plan{};
  ASSERT_EQ(braidShardPlan(&m, &c, nullptr, &plan), braidSuccess);
  EXPECT_NE(std::strstr(plan.explanation, "under braid's model"), nullptr) << plan.explanation;
  EXPECT_NE(std::strstr(plan.explanation, "Lins' model picks s_p = 1x1, s_g = 1x1, s_os = 8x1"),
            nullptr)
      << plan.explanation;
  braidShardPlanFree(&plan);
}

// Every error the Lins model adds, with its message; options compiled before costModel existed
// still work (braid's model).
TEST(LinsModel, ErrorsAndOldOptions) {
  const braidShardModel_t m = ModelOf(kLlamas[0]);
  const braidShardCluster_t c = TableThreeCluster();
  braidShardPlan_t plan{};
  auto plan_fails = [&](const braidShardPlanOptions_t& o, const char* what) {
    EXPECT_EQ(braidShardPlan(&m, &c, &o, &plan), braidErrInvalidArgument) << what;
    EXPECT_NE(std::strstr(braidShardGetLastError(nullptr), what), nullptr)
        << braidShardGetLastError(nullptr);
  };
  braidShardPlanOptions_t o = Lins();
  o.costModel = 7;
  plan_fails(o, "costModel = 7");
  o = Lins();
  o.allowQuantization = 1;
  plan_fails(o, "prices no quantized collectives");
  o = Lins();
  o.allowPartialNode = 1;
  plan_fails(o, "only with the whole node");
  o = Lins();
  o.size = offsetof(braidShardPlanOptions_t, costModel) - 1;
  plan_fails(o, "size field");

  // A caller compiled before costModel: its size stops there, and it gets braid's model.
  o = Lins();
  o.size = offsetof(braidShardPlanOptions_t, costModel);
  ASSERT_EQ(braidShardPlan(&m, &c, &o, &plan), braidSuccess) << braidShardGetLastError(nullptr);
  EXPECT_NE(std::strstr(plan.explanation, "under braid's model"), nullptr);
  braidShardPlanFree(&plan);

  // Evaluate and Terms refuse a configuration Lins does not price, and bad arguments.
  o = Lins();
  const braidShardConfig_t between = Config(8, 128, {1, 1}, {8, 1}, {8, 128});
  braidShardPlanEntry_t e;
  EXPECT_EQ(braidShardPlanEvaluate(&m, &c, &o, &between, &e), braidErrInvalidArgument);
  EXPECT_NE(std::strstr(braidShardGetLastError(nullptr), "does not price"), nullptr);
  braidShardPlanTerm_t terms[4];
  int count = -1;
  EXPECT_EQ(braidShardPlanTerms(&m, &c, &o, &between, terms, 4, &count), braidErrInvalidArgument);
  EXPECT_EQ(count, -1);
  const braidShardConfig_t ok = Config(8, 128, {8, 1}, {8, 1}, {8, 4});
  EXPECT_EQ(braidShardPlanTerms(&m, &c, &o, &ok, nullptr, 4, &count), braidErrInvalidArgument);
  EXPECT_EQ(braidShardPlanTerms(&m, &c, &o, &ok, terms, -1, &count), braidErrInvalidArgument);
  EXPECT_EQ(braidShardPlanTerms(&m, &c, &o, &ok, terms, 4, nullptr), braidErrInvalidArgument);
  EXPECT_EQ(braidShardPlanTerms(&m, &c, &o, nullptr, terms, 4, &count), braidErrInvalidArgument);
  // Too little room: the count says how many there are; nothing past capacity is written.
  terms[1].term[0] = 'x';
  ASSERT_EQ(braidShardPlanTerms(&m, &c, &o, &ok, terms, 1, &count), braidSuccess);
  EXPECT_EQ(count, 3);  // T_p, T_os0, T_os1
  EXPECT_STREQ(terms[0].term, "T_p");
  EXPECT_EQ(terms[1].term[0], 'x');
  ASSERT_EQ(braidShardPlanTerms(&m, &c, &o, &ok, nullptr, 0, &count), braidSuccess);
  EXPECT_EQ(count, 3);
  // braid's model prices any valid configuration, and its terms sum to Evaluate's time.
  const braidShardPlanOptions_t braid = BRAID_SHARD_PLAN_OPTIONS_INITIALIZER;
  braidShardPlanTerm_t bt[16];
  ASSERT_EQ(braidShardPlanTerms(&m, &c, &braid, &between, bt, 16, &count), braidSuccess);
  ASSERT_EQ(braidShardPlanEvaluate(&m, &c, &braid, &between, &e), braidSuccess);
  double sum = 0;
  for (int i = 0; i < count && i < 16; ++i) sum += bt[i].seconds;
  EXPECT_NEAR(sum, e.commSeconds, 1e-12 * e.commSeconds);
}

// braidEstimateAlgorithm: a named algorithm's closed form, the errors a caller can reach.
TEST(LinsModel, EstimateAlgorithmErrors) {
  const braidLinkParams_t l = {2e-6, 300e9, 5e-6, 100e9, 4};
  double s = -1;
  EXPECT_EQ(braidEstimateAlgorithm("ring", braidCollAllGather, 1 << 20, braidBfloat16, 0, 8, 1, 1,
                                   &l, &s),
            braidSuccess);
  EXPECT_GT(s, 0);
  EXPECT_EQ(braidEstimateAlgorithm("ring", braidCollAllGather, 1 << 20, braidBfloat16, 0, 1, 1, 1,
                                   &l, &s),
            braidSuccess);
  EXPECT_EQ(s, 0);  // one rank
  EXPECT_EQ(braidEstimateAlgorithm("no_such_algo", braidCollAllGather, 1 << 20, braidBfloat16, 0, 8,
                                   1, 1, &l, &s),
            braidErrInvalidArgument);
  EXPECT_NE(std::strstr(braidGetLastError(nullptr), "unknown algorithm 'no_such_algo'"), nullptr);
  // The rail-aligned ring needs several nodes and does not broadcast.
  EXPECT_EQ(braidEstimateAlgorithm("rail_ring", braidCollBroadcast, 1 << 20, braidBfloat16, 0, 8, 4,
                                   1, &l, &s),
            braidErrInvalidArgument);
  EXPECT_NE(std::strstr(braidGetLastError(nullptr), "does not serve broadcast"), nullptr)
      << braidGetLastError(nullptr);
  EXPECT_EQ(braidEstimateAlgorithm(nullptr, braidCollAllGather, 1 << 20, braidBfloat16, 0, 8, 1, 1,
                                   &l, &s),
            braidErrInvalidArgument);
  EXPECT_EQ(braidEstimateAlgorithm("ring", braidCollAllGather, 1 << 20, braidBfloat16, 0, 0, 1, 1,
                                   &l, &s),
            braidErrInvalidArgument);
  EXPECT_NE(std::strstr(braidGetLastError(nullptr), "braidEstimateAlgorithm: group of 0"), nullptr)
      << braidGetLastError(nullptr);
}

}  // namespace
