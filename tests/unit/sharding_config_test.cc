// The sharding configuration (spec/sharding.md sections 1 and 3): validation with messages that
// name the rule and the numbers, every preset on several shapes, the rank layout the step uses
// (groups partition the job, shards nest), and the memory formula against the spec's table.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/layout.h"

namespace {

using braid::shard::kG;
using braid::shard::kOs;
using braid::shard::kP;
using braid::shard::Layout;
using braid::shard::RankLayout;

braidShardConfig_t Make(int R, int n, braidShardFactor_t p, braidShardFactor_t g,
                        braidShardFactor_t os) {
  braidShardConfig_t c = BRAID_SHARD_CONFIG_INITIALIZER;
  c.ranksPerNode = R;
  c.nodes = n;
  c.p = p;
  c.g = g;
  c.os = os;
  return c;
}

std::string Why(const braidShardConfig_t& c) {
  char err[512] = "";
  braidResult_t rc = braidShardConfigValidate(&c, err, sizeof(err));
  return rc == braidSuccess ? "" : err;
}

TEST(ShardConfig, DefaultIsValidDdpOnOneRank) {
  braidShardConfig_t c = BRAID_SHARD_CONFIG_INITIALIZER;
  EXPECT_EQ(Why(c), "");
}

TEST(ShardConfig, DependencyRuleNamesTheStatesAndNumbers) {
  std::string w = Why(Make(4, 2, {4, 1}, {2, 1}, {4, 1}));
  EXPECT_NE(w.find("dependency rule"), std::string::npos) << w;
  EXPECT_NE(w.find("s_p intra = 4 > s_g intra = 2"), std::string::npos) << w;
  w = Why(Make(4, 2, {1, 1}, {4, 2}, {4, 1}));
  EXPECT_NE(w.find("s_g inter = 2 > s_os inter = 1"), std::string::npos) << w;
  EXPECT_NE(w.find("across nodes"), std::string::npos) << w;
}

TEST(ShardConfig, DivisibilityNamesTheFactorAndTheShape) {
  std::string w = Why(Make(6, 1, {1, 1}, {1, 1}, {4, 1}));
  EXPECT_NE(w.find("divisibility: s_os intra = 4 does not divide the 6 ranks per node"),
            std::string::npos)
      << w;
  w = Why(Make(4, 3, {1, 1}, {4, 2}, {4, 2}));
  EXPECT_NE(w.find("s_g inter = 2 does not divide the 3 nodes"), std::string::npos) << w;
  w = Why(Make(4, 2, {1, 1}, {1, 1}, {8, 1}));
  EXPECT_NE(w.find("divisibility"), std::string::npos) << w;
}

TEST(ShardConfig, NestingIsRequired) {
  // 2 and 3 both divide 6 and 2 <= 3, but a G shard of 1/3 is not inside a P shard of 1/2.
  std::string w = Why(Make(6, 1, {2, 1}, {3, 1}, {6, 1}));
  EXPECT_NE(w.find("nesting: s_p intra = 2 does not divide s_g intra = 3"), std::string::npos) << w;
}

TEST(ShardConfig, WholeNodeFirstUnlessTheCallerInsists) {
  braidShardConfig_t c = Make(4, 2, {1, 1}, {1, 1}, {2, 2});
  std::string w = Why(c);
  EXPECT_NE(w.find("whole node first: s_os = 2x2"), std::string::npos) << w;
  c.allowPartialNode = 1;
  EXPECT_EQ(Why(c), "");
}

TEST(ShardConfig, ZeroAndNegativeFactorsAreRejected) {
  EXPECT_NE(Why(Make(4, 1, {0, 1}, {1, 1}, {1, 1})).find(">= 1"), std::string::npos);
  EXPECT_NE(Why(Make(0, 1, {1, 1}, {1, 1}, {1, 1})).find(">= 1"), std::string::npos);
  EXPECT_NE(braidShardConfigValidate(nullptr, nullptr, 0), braidSuccess);
}

struct Expect {
  braidShardFactor_t p, g, os;
};

// sharding.md section 3, written out for a shape R x n.
std::map<std::string, Expect> Table(int R, int n) {
  return {{"ddp", {{1, 1}, {1, 1}, {1, 1}}},
          {"zero1", {{1, 1}, {1, 1}, {R, n}}},
          {"zero2", {{1, 1}, {R, n}, {R, n}}},
          {"zero3", {{R, n}, {R, n}, {R, n}}},
          {"fsdp-hybrid", {{R, 1}, {R, 1}, {R, 1}}},
          {"mics", {{R, 1}, {R, 1}, {R, 1}}},
          {"zero++", {{R, n}, {R, n}, {R, n}}},
          {"paro-nig", {{1, 1}, {R, 1}, {R, n}}},
          {"paro-iig", {{R, 1}, {R, 1}, {R, n}}},
          {"paro-igg", {{R, 1}, {R, n}, {R, n}}},
          {"zero-topo", {{R % 2 == 0 ? 2 : 1, 1}, {R, 1}, {R, n}}}};
}

bool Same(braidShardFactor_t a, braidShardFactor_t b) {
  return a.intra == b.intra && a.inter == b.inter;
}

TEST(ShardPresets, EveryPresetOnSeveralShapesMatchesTheTableAndValidates) {
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {2, 1}, {4, 1},   {2, 2},
                                                   {3, 2}, {8, 2}, {8, 128}, {6, 4}};
  for (auto [R, n] : shapes) {
    for (const auto& [name, want] : Table(R, n)) {
      SCOPED_TRACE(name + " on " + std::to_string(R) + "x" + std::to_string(n));
      braidShardConfig_t c;
      ASSERT_EQ(braidShardPresetForShape(name.c_str(), R, n, &c), braidSuccess)
          << braidShardGetLastError(nullptr);
      EXPECT_EQ(Why(c), "");
      EXPECT_TRUE(Same(c.p, want.p)) << c.p.intra << "x" << c.p.inter;
      EXPECT_TRUE(Same(c.g, want.g)) << c.g.intra << "x" << c.g.inter;
      EXPECT_TRUE(Same(c.os, want.os)) << c.os.intra << "x" << c.os.inter;
      EXPECT_EQ(std::string(c.preset), name);
      EXPECT_EQ(c.replicaEveryMicrobatch, name == "fsdp-hybrid" ? 1 : 0);
      if (name == "zero++") {
        EXPECT_EQ(c.hpz, R);
        EXPECT_TRUE(c.qwz && c.qgz);
      }
      if (name == "zero-topo") {
        EXPECT_EQ(c.hpzInt8, R % 2 == 0 ? 1 : 0);
        EXPECT_EQ(c.qgz, 1);
        // A shape without device pairs degrades and says so.
        EXPECT_EQ(std::string(c.note).empty(), R % 2 == 0) << c.note;
      }
      if (name == "fsdp-hybrid" || name == "mics") {
        EXPECT_EQ(std::string(c.note).empty(), n > 1) << c.note;
      }
    }
  }
}

TEST(ShardPresets, UnknownNamesAndTheLinsPlaceholderAreRefused) {
  braidShardConfig_t c;
  EXPECT_EQ(braidShardPresetForShape("zero4", 4, 2, &c), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidShardGetLastError(nullptr)).find("unknown preset 'zero4'"),
            std::string::npos);
  EXPECT_EQ(braidShardPresetForShape("lins", 4, 2, &c), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidShardGetLastError(nullptr)).find("planner"), std::string::npos);
  EXPECT_EQ(braidShardPresetForShape("ddp", 0, 2, &c), braidErrInvalidArgument);
}

// Every valid configuration of a shape (all factor choices, partial nodes allowed).
std::vector<braidShardConfig_t> AllValid(int R, int n) {
  std::vector<int> dr, dn;
  for (int d = 1; d <= R; ++d)
    if (R % d == 0) dr.push_back(d);
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) dn.push_back(d);
  std::vector<braidShardConfig_t> out;
  for (int p0 : dr)
    for (int g0 : dr)
      for (int o0 : dr)
        for (int p1 : dn)
          for (int g1 : dn)
            for (int o1 : dn) {
              braidShardConfig_t c = Make(R, n, {p0, p1}, {g0, g1}, {o0, o1});
              c.allowPartialNode = 1;
              if (Why(c).empty()) out.push_back(c);
            }
  return out;
}

// What the step relies on: each state's groups have s_X ranks holding distinct shards; shards
// nest; replica groups have D / s_g ranks with the same G shard, one per G group; the
// redistribution group is the s_os / s_p ranks of one OS group whose OS shards tile one P shard.
TEST(ShardLayout, GroupsPartitionTheJobAndShardsNestForEveryValidConfiguration) {
  int checked = 0;
  for (auto [R, n] : std::vector<std::pair<int, int>>{{2, 2}, {4, 2}, {8, 1}, {4, 4}, {6, 2}}) {
    for (const braidShardConfig_t& c : AllValid(R, n)) {
      const int D = R * n;
      const int s[3] = {c.p.intra * c.p.inter, c.g.intra * c.g.inter, c.os.intra * c.os.inter};
      SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(n) + " p " + std::to_string(c.p.intra) +
                   "x" + std::to_string(c.p.inter) + " g " + std::to_string(c.g.intra) + "x" +
                   std::to_string(c.g.inter) + " os " + std::to_string(c.os.intra) + "x" +
                   std::to_string(c.os.inter));
      std::vector<RankLayout> l(D);
      for (int r = 0; r < D; ++r) l[r] = Layout(c, r);
      for (int st = kP; st <= kOs; ++st) {
        std::map<int, std::set<int>> groups;
        for (int r = 0; r < D; ++r) {
          ASSERT_GE(l[r].pos[st], 0);
          ASSERT_LT(l[r].pos[st], s[st]);
          groups[l[r].group[st]].insert(l[r].pos[st]);
        }
        ASSERT_EQ(static_cast<int>(groups.size()), D / s[st]);
        for (auto& [g, pos] : groups) ASSERT_EQ(static_cast<int>(pos.size()), s[st]);
      }
      std::map<int, std::set<int>> replicas, redist;
      std::map<int, int> redist_p;
      for (int r = 0; r < D; ++r) {
        ASSERT_EQ(l[r].pos[kOs] / (s[kOs] / s[kG]), l[r].pos[kG]);
        ASSERT_EQ(l[r].pos[kG] / (s[kG] / s[kP]), l[r].pos[kP]);
        replicas[l[r].replica_color].insert(l[r].group[kG]);
        redist[l[r].redist_color].insert(l[r].pos[kOs]);
        redist_p[l[r].redist_color] = l[r].pos[kP];
      }
      ASSERT_EQ(static_cast<int>(replicas.size()), s[kG]);
      for (auto& [k, gs] : replicas) ASSERT_EQ(static_cast<int>(gs.size()), D / s[kG]);
      for (auto& [k, pos] : redist) {
        ASSERT_EQ(static_cast<int>(pos.size()), s[kOs] / s[kP]);
        ASSERT_EQ(*pos.begin(), redist_p[k] * (s[kOs] / s[kP]));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(ShardLayout, IntraGroupsAreConsecutiveRanksOfANode) {
  braidShardConfig_t c;
  ASSERT_EQ(braidShardPresetForShape("paro-iig", 4, 2, &c), braidSuccess);
  // P groups: {0,1,2,3} and {4,5,6,7}; OS group: all 8.
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(Layout(c, r).group[kP], r / 4);
    EXPECT_EQ(Layout(c, r).pos[kP], r % 4);
    EXPECT_EQ(Layout(c, r).group[kOs], 0);
  }
}

// Per GPU memory, sharding.md section 4 (Psi parameters, N GPUs, groups of M = R, K = 12), in
// units of Psi bytes multiplied by N so every entry is an integer.
TEST(ShardMemory, FormulaMatchesTheSpecTables) {
  const int R = 8, n = 4, N = R * n, M = R;
  const uint64_t psi = 1ull << 30;  // divisible by every group size here: no rounding
  auto mem = [&](const char* preset) {
    braidShardConfig_t c;
    EXPECT_EQ(braidShardPresetForShape(preset, R, n, &c), braidSuccess);
    braidShardMemory_t m;
    EXPECT_EQ(braidShardMemoryFormula(&c, psi, 2, &m), braidSuccess);
    EXPECT_EQ(m.total, m.params + m.grads + m.optimizer);
    return m;
  };
  const uint64_t K = 12;
  EXPECT_EQ(mem("ddp").total, 16 * psi);
  EXPECT_EQ(mem("zero1").total, 2 * psi + 2 * psi + K * psi / N);
  EXPECT_EQ(mem("zero2").total, 2 * psi + 2 * psi / N + K * psi / N);
  EXPECT_EQ(mem("zero3").total, (4 * psi + K * psi) / N);
  EXPECT_EQ(mem("mics").total, (4 * psi + K * psi) / M);
  EXPECT_EQ(mem("fsdp-hybrid").total, (4 * psi + K * psi) / M);
  // ZeRO++ adds the hpZ secondary copy (2 Psi / M) to the zero3 states, counted with the
  // parameters; on one node there is no copy (it would be the primary shard).
  EXPECT_EQ(mem("zero++").total, 2 * psi / N + 2 * psi / M + 2 * psi / N + K * psi / N);
  EXPECT_EQ(mem("zero++").params, 2 * psi / N + 2 * psi / M);
  braidShardConfig_t one;
  ASSERT_EQ(braidShardPresetForShape("zero++", R, 1, &one), braidSuccess);
  braidShardMemory_t m1;
  ASSERT_EQ(braidShardMemoryFormula(&one, psi, 2, &m1), braidSuccess);
  EXPECT_EQ(m1.params, 2 * psi / R);
  // zero-topo: P over the device pair plus its INT8 copy over the pair (one byte per parameter
  // and a 4-byte scale per block of 2048, rounded up to 16 bytes).
  const braidQuantConfig_t int8 = {8, 2048, 1};
  size_t enc = 0;
  ASSERT_EQ(braidQuantizedSize(psi / 2, &int8, &enc), braidSuccess);
  EXPECT_EQ(enc, psi / 2 + 4 * (psi / 2 / 2048));
  EXPECT_EQ(mem("zero-topo").params, 2 * psi / 2 + enc);
  EXPECT_EQ(mem("zero-topo").grads, 2 * psi / M);
  EXPECT_EQ(mem("paro-igg").total, 2 * psi / M + 2 * psi / N + K * psi / N);
  EXPECT_EQ(mem("paro-iig").total, 2 * psi / M + 2 * psi / M + K * psi / N);
  EXPECT_EQ(mem("paro-nig").total, 2 * psi + 2 * psi / M + K * psi / N);
  braidShardMemory_t z3 = mem("zero3");
  EXPECT_EQ(z3.params, 2 * psi / N);
  EXPECT_EQ(z3.grads, 2 * psi / N);
  EXPECT_EQ(z3.optimizer, K * psi / N);
}

TEST(ShardMemory, PaddingRoundsUpAndFp32DoublesParamsAndGrads) {
  braidShardConfig_t c;
  ASSERT_EQ(braidShardPresetForShape("zero3", 3, 1, &c), braidSuccess);
  braidShardMemory_t m;
  ASSERT_EQ(braidShardMemoryFormula(&c, 10, 4, &m), braidSuccess);
  EXPECT_EQ(m.params, 14u);  // ceil(40 / 3)
  EXPECT_EQ(m.grads, 14u);
  EXPECT_EQ(m.optimizer, 40u);
}

TEST(ShardReport, SaysWhatTheRankHoldsAndWhichCollectivesRunOverWhichGroup) {
  braidShardConfig_t c;
  ASSERT_EQ(braidShardPresetForShape("paro-igg", 4, 2, &c), braidSuccess);
  char buf[4096];
  ASSERT_EQ(braidShardReport(&c, 5, 1000000, buf, sizeof(buf)), braidSuccess);
  std::string r = buf;
  EXPECT_NE(r.find("s_p = 4x1 (4), s_g = 4x2 (8), s_os = 4x2 (8)"), std::string::npos) << r;
  EXPECT_NE(r.find("rank 5 (node 1, local 1)"), std::string::npos) << r;
  EXPECT_NE(r.find("all-gather parameters over the p-group {4,5,6,7} (intra-node)"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("reduce-scatter gradients over the g-group {0,1,2,3,4,5,6,7}"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("all-gather updated parameters over"), std::string::npos) << r;
  EXPECT_NE(r.find("OS 12phi/8 = 1500000 B"), std::string::npos) << r;
  // An invalid configuration is refused with the reason.
  c.g.intra = 2;
  EXPECT_EQ(braidShardReport(&c, 0, 1, buf, sizeof(buf)), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidShardGetLastError(nullptr)).find("dependency rule"),
            std::string::npos);
  // Truncation keeps the string terminated.
  ASSERT_EQ(braidShardPresetForShape("ddp", 1, 1, &c), braidSuccess);
  char small[8];
  ASSERT_EQ(braidShardReport(&c, 0, 1, small, sizeof(small)), braidSuccess);
  EXPECT_EQ(std::string(small).size(), 7u);
}

}  // namespace
