// The tuner: the override grammar (every accepted form, every error with its message), choose()
// with overrides and fallbacks, and the cost model's default table.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/tuner.h"

namespace braid {
namespace {

constexpr uint64_t K = 1024;

std::vector<TunerRule> Parse(const std::string& spec) {
  auto r = ParseTunerOverride(spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << r.status().message();
  return r.ok() ? *r : std::vector<TunerRule>{};
}

void ExpectParseError(const std::string& spec, const std::string& needle) {
  auto r = ParseTunerOverride(spec);
  ASSERT_FALSE(r.ok()) << "accepted '" << spec << "'";
  EXPECT_EQ(r.status().cls(), ErrorClass::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << spec << " -> " << r.status().message();
}

bool Same(const TunerRule& r, CollKind k, uint64_t lo, uint64_t hi, const std::string& algo) {
  return r.kind == k && r.min_bytes == lo && r.max_bytes == hi && r.algorithm == algo;
}

TEST(TunerGrammar, RangesAndEntries) {
  auto rules = Parse("allreduce:ring@0-64K,rd@64K-inf;allgather:ring");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_TRUE(Same(rules[0], CollKind::kAllReduce, 0, 64 * K, "ring"));
  EXPECT_TRUE(Same(rules[1], CollKind::kAllReduce, 64 * K, UINT64_MAX, "rd"));
  EXPECT_TRUE(Same(rules[2], CollKind::kAllGather, 0, UINT64_MAX, "ring"));
}

TEST(TunerGrammar, SizesAreBinaryAndCaseInsensitive) {
  auto rules = Parse("broadcast:tree@1k-2M,ring@2m-3G,ring@3221225472-inf");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_TRUE(Same(rules[0], CollKind::kBroadcast, K, 2 * K * K, "tree"));
  EXPECT_TRUE(Same(rules[1], CollKind::kBroadcast, 2 * K * K, 3 * K * K * K, "ring"));
  EXPECT_EQ(rules[2].min_bytes, 3 * K * K * K);
}

TEST(TunerGrammar, WhitespaceAndEmptyEntriesAreTolerated) {
  auto rules = Parse(" reduce : tree @ 0 - 4K , ring ; ;");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_TRUE(Same(rules[0], CollKind::kReduce, 0, 4 * K, "tree"));
  EXPECT_TRUE(Same(rules[1], CollKind::kReduce, 0, UINT64_MAX, "ring"));
  EXPECT_TRUE(Parse("").empty());
}

TEST(TunerGrammar, AllAndNcclStyleBareNames) {
  EXPECT_EQ(Parse("all:ring").size(), 7u);  // every collective but grouped point-to-point
  auto rules = Parse("Tree,Ring");          // NCCL_ALGO style
  ASSERT_EQ(rules.size(), 14u);
  // Choice-major: every collective's rules keep the choices' order (the order of preference).
  EXPECT_TRUE(Same(rules[0], CollKind::kAllReduce, 0, UINT64_MAX, "tree"));
  EXPECT_TRUE(Same(rules[7], CollKind::kAllReduce, 0, UINT64_MAX, "ring"));
  EXPECT_EQ(Parse("ring;allreduce:rd").size(), 8u);
}

TEST(TunerGrammar, Errors) {
  // The list of known names grows as algorithms land: check its start only.
  ExpectParseError("allreduce:nope",
                   "unknown algorithm 'nope' (known: ring, rd, rabenseifner, tree, bruck, "
                   "pat, pairwise, dissemination");
  ExpectParseError("allfoo:ring", "unknown collective 'allfoo'");
  ExpectParseError(":ring", "missing collective name");
  ExpectParseError("allreduce:", "no algorithm after 'allreduce:'");
  ExpectParseError("allreduce:ring,,rd", "empty choice in 'allreduce:ring,,rd'");
  ExpectParseError("allreduce:@0-1K", "missing algorithm name in '@0-1K'");
  ExpectParseError("allreduce:ring@64K", "range '64K' must be lo-hi");
  ExpectParseError("allreduce:ring@1X-2K", "bad size '1x' (suffixes: K, M, G)");
  ExpectParseError("allreduce:ring@K-2K", "bad size 'k'");
  ExpectParseError("allreduce:ring@1KB-2K", "bad size '1kb'");
  ExpectParseError("allreduce:ring@-1K", "missing size");
  ExpectParseError("allreduce:ring@1K-", "missing size");
  ExpectParseError("allreduce:ring@64K-64K", "empty range '64K-64K'");
  ExpectParseError("allreduce:ring@1M-1K", "empty range");
  ExpectParseError("allreduce:ring@inf-inf", "empty range");
  ExpectParseError("allreduce:ring@99999999999999999999-inf", "too large");
  ExpectParseError("allreduce:ring@99999999999G-inf", "too large");
  ExpectParseError("CollnetDirect", "unknown algorithm 'collnetdirect'");
}

TEST(TunerCreate, RejectsBadOverride) {
  auto t = Tuner::Create("allreduce:nope", 4, LinkModel{}, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nope"), std::string::npos);
}

CollArgs Req(CollKind kind, int n, uint64_t bytes, DataType dt = DataType::kFloat32) {
  CollArgs a;
  a.kind = kind;
  a.dtype = dt;
  a.nranks = n;
  const bool per_rank = kind == CollKind::kAllGather || kind == CollKind::kReduceScatter ||
                        kind == CollKind::kAllToAll;
  a.count = kind == CollKind::kBarrier ? 0 : bytes / DataTypeSize(dt) / (per_rank ? n : 1);
  return a;
}

const char* Choose(const Tuner& t, const CollArgs& a) {
  const Algorithm* algo = t.choose(a);
  return algo ? algo->name() : "(null)";
}

TEST(TunerChoose, DefaultsPickLatencyAlgorithmsSmallAndRingLarge) {
  for (int n : {4, 8, 16, 64}) {
    auto t = Tuner::Create("", n, LinkModel{}, nullptr);
    ASSERT_TRUE(t.ok());
    SCOPED_TRACE("N=" + std::to_string(n) + "\n" + t->describe());
    EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, n, 64)), "rd");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, n, 256 * K * K)), "ring");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kBroadcast, n, 64)), "tree");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kBroadcast, n, 256 * K * K)), "ring");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kReduce, n, 64)), "tree");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kReduce, n, 256 * K * K)), "ring");
    // On a power of two the butterfly's log2 N rounds of one message each (which carry the
    // call agreement) beat the ring's N-1 steps, and tie with Bruck's (registry order: "rd").
    EXPECT_STREQ(Choose(*t, Req(CollKind::kAllGather, n, 64 * n)), "rd");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kReduceScatter, n, 64 * n)), "rd");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kReduceScatter, n, 256 * K * K)), "ring");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kAllToAll, n, 64 * K * n)), "pairwise");
    EXPECT_STREQ(Choose(*t, Req(CollKind::kBarrier, n, 0)), "dissemination");
  }
}

// Elsewhere Bruck's ceil(log2 N) rounds of one message each (gathered rotated at latency-bound
// sizes) beat the ring's N-1 steps (a run that wrapped around recvbuf cost a second message per
// round, and the ring won at N = 4).
TEST(TunerChoose, BruckGathersSmallOnOtherRankCounts) {
  for (int n : {5, 6, 12}) {
    auto t = Tuner::Create("", n, LinkModel{}, nullptr);
    ASSERT_TRUE(t.ok());
    SCOPED_TRACE("N=" + std::to_string(n) + "\n" + t->describe());
    EXPECT_STREQ(Choose(*t, Req(CollKind::kAllGather, n, 64 * n)), "bruck");
  }
}

// Rabenseifner's all-reduce saves rounds, not bytes: ranked only where a node's ranks talk over
// TCP (it measured slower than the ring over shared memory), on a power of two on one node.
TEST(TunerChoose, RabenseifnerOnlyWhereTheRanksTalkOverTcp) {
  LinkModel tcp;
  tcp.intra_tcp = true;
  for (int n : {4, 8}) {
    auto shm = Tuner::Create("", n, LinkModel{}, nullptr);
    auto sockets = Tuner::Create("", n, tcp, nullptr);
    ASSERT_TRUE(shm.ok() && sockets.ok());
    SCOPED_TRACE("N=" + std::to_string(n) + "\n" + shm->describe() + sockets->describe());
    for (uint64_t bytes = 64; bytes <= uint64_t{1} << 30; bytes *= 4)
      EXPECT_STRNE(Choose(*shm, Req(CollKind::kAllReduce, n, bytes)), "rabenseifner") << bytes;
    EXPECT_STREQ(Choose(*sockets, Req(CollKind::kAllReduce, n, 64)), "rd");
    EXPECT_STREQ(Choose(*sockets, Req(CollKind::kAllReduce, n, 1 * K * K)), "rabenseifner");
    EXPECT_STREQ(Choose(*sockets, Req(CollKind::kAllReduce, n, 256 * K * K)), "ring");
  }
  auto six = Tuner::Create("", 6, tcp, nullptr);
  ASSERT_TRUE(six.ok());
  EXPECT_STRNE(Choose(*six, Req(CollKind::kAllReduce, 6, 1 * K * K)), "rabenseifner");
}

// On one node the butterfly gathers up to kButterflyAllGatherMaxBytes (one round fewer than the
// ring's steps at 4 ranks, same bytes); above, the ring.
TEST(TunerChoose, ButterflyGathersUpToTwoMebibytesOnOneNode) {
  auto t = Tuner::Create("", 4, LinkModel{}, nullptr);
  ASSERT_TRUE(t.ok());
  SCOPED_TRACE(t->describe());
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllGather, 4, 512 * K)), "rd");
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllGather, 4, 2 * K * K)), "rd");
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllGather, 4, 16 * K * K)), "ring");
  EXPECT_STREQ(Choose(*t, Req(CollKind::kReduceScatter, 4, 512 * K)), "ring");
}

TEST(TunerChoose, OverrideWinsWhenItCanServe) {
  auto t = Tuner::Create("allreduce:ring@0-64K,rd@64K-inf", 8, LinkModel{}, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, 8, 1 * K)), "ring");
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, 8, 64 * K)), "rd");  // ranges are [lo, hi)
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, 8, 64 * K * K)), "rd");
  // Other collectives keep their defaults.
  EXPECT_STREQ(Choose(*t, Req(CollKind::kBroadcast, 8, 64)), "tree");
}

TEST(TunerChoose, OverrideThatCannotServeFallsBack) {
  auto t = Tuner::Create("allreduce:pairwise;alltoall:pairwise;broadcast:rd,ring", 8, LinkModel{},
                         nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, 8, 64)), "rd");             // default
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllReduce, 8, 256 * K * K)), "ring");  // default
  EXPECT_STREQ(Choose(*t, Req(CollKind::kBroadcast, 8, 64)), "ring");           // next choice
  EXPECT_STREQ(Choose(*t, Req(CollKind::kAllToAll, 8, 64 * K)), "pairwise");
  // NCCL style: "tree" serves broadcast and reduce; the rest fall back to the defaults.
  auto nccl = Tuner::Create("tree", 8, LinkModel{}, nullptr);
  ASSERT_TRUE(nccl.ok());
  EXPECT_STREQ(Choose(*nccl, Req(CollKind::kBroadcast, 8, 256 * K * K)), "tree");
  EXPECT_STREQ(Choose(*nccl, Req(CollKind::kReduce, 8, 256 * K * K)), "tree");
  EXPECT_STREQ(Choose(*nccl, Req(CollKind::kAllReduce, 8, 256 * K * K)), "ring");
}

TEST(TunerChoose, NoAlgorithmForAnInvalidRequest) {
  auto t = Tuner::Create("", 4, LinkModel{}, nullptr);
  ASSERT_TRUE(t.ok());
  CollArgs a = Req(CollKind::kAllToAll, 4, 64 * K);
  a.in_place = true;  // the C API has no in-place all-to-all
  EXPECT_EQ(t->choose(a), nullptr);
}

TEST(TunerChoose, SingleRankAndLargeGroups) {
  auto one = Tuner::Create("", 1, LinkModel{}, nullptr);
  ASSERT_TRUE(one.ok());
  EXPECT_NE(one->choose(Req(CollKind::kAllReduce, 1, 1 * K)), nullptr);
  // Creation must stay cheap at scale: closed forms only, no simulation.
  auto big = Tuner::Create("", 1024, LinkModel{}, nullptr);
  ASSERT_TRUE(big.ok());
  EXPECT_STREQ(Choose(*big, Req(CollKind::kAllReduce, 1024, 8)), "rd");
  EXPECT_STREQ(Choose(*big, Req(CollKind::kAllReduce, 1024, 1024 * K * K)), "ring");
}

TEST(TunerDescribe, ListsOverridesAndTheModelTable) {
  auto t = Tuner::Create("allreduce:ring@0-64K", 8, LinkModel{}, nullptr);
  ASSERT_TRUE(t.ok());
  const std::string d = t->describe();
  EXPECT_NE(d.find("8 ranks"), std::string::npos) << d;
  EXPECT_NE(d.find("override  allreduce      0-64K        ring"), std::string::npos) << d;
  EXPECT_NE(d.find("model     allreduce      0-"), std::string::npos) << d;
  EXPECT_NE(d.find("model     barrier        0-inf        dissemination"), std::string::npos) << d;
  for (const char* coll : {"reducescatter", "allgather", "broadcast", "reduce", "alltoall"})
    EXPECT_NE(d.find(coll), std::string::npos) << coll;
}

TEST(TunerDescribe, TableCoversEverySizeWithoutGaps) {
  GroupLayout layout;
  layout.nnodes = 2;
  for (int r = 0; r < 16; ++r) {
    layout.node_of.push_back(r / 8);
    layout.local_rank.push_back(r % 8);
  }
  auto t = Tuner::Create("", 16, LinkModel{}, &layout);
  ASSERT_TRUE(t.ok());
  // Every size of every collective gets an algorithm that serves it.
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                     CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllToAll})
    for (uint64_t bytes = 64; bytes <= (uint64_t{1} << 34); bytes *= 8) {
      CollArgs a = Req(k, 16, bytes);
      a.layout = &layout;
      const Algorithm* algo = t->choose(a);
      ASSERT_NE(algo, nullptr) << CollKindName(k) << " " << bytes;
      EXPECT_TRUE(algo->supports(a));
    }
}

TEST(CollBytes, CountsTheWholeBuffer) {
  CollArgs a;
  a.nranks = 4;
  a.count = 10;
  a.dtype = DataType::kFloat64;
  a.kind = CollKind::kAllReduce;
  EXPECT_EQ(CollBytes(a), 80u);
  a.kind = CollKind::kAllGather;
  EXPECT_EQ(CollBytes(a), 320u);
  a.kind = CollKind::kReduceScatter;
  EXPECT_EQ(CollBytes(a), 320u);
  a.kind = CollKind::kAllToAll;
  EXPECT_EQ(CollBytes(a), 320u);
  a.kind = CollKind::kBroadcast;
  EXPECT_EQ(CollBytes(a), 80u);
  a.kind = CollKind::kBarrier;
  a.count = 0;
  EXPECT_EQ(CollBytes(a), 0u);
}

}  // namespace
}  // namespace braid
