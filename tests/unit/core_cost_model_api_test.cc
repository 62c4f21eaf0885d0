// braidEstimateCollective and braidLinkProfileLoad (braid.h): the tuner's cost model in the
// public API, as the sharding planner calls it. The estimate must be the cheapest supporting
// algorithm's own closed form, a node's link shared by concurrent groups as SharedLink, and
// every bad argument refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "algorithms/board_schedules.h"
#include "algorithms/builtin_algorithms.h"
#include "algorithms/cost_model.h"
#include "algorithms/link_profile.h"
#include "algorithms/tuner.h"
#include "braid/braid.h"
#include "core/runtime/board_selection.h"
#include "core/runtime/link_fit.h"

namespace braid {
namespace {

constexpr braidLinkParams_t kLink = {2e-6, 300e9, 5e-6, 100e9, 1};

double Estimate(braidCollective_t c, uint64_t bytes, int R, int n, int share = 1, int bits = 0,
                std::string* name = nullptr, const braidLinkParams_t& link = kLink) {
  double s = -1;
  char algo[32] = "";
  EXPECT_EQ(braidEstimateCollective(c, bytes, braidBfloat16, bits, R, n, share, &link, &s, algo,
                                    sizeof algo),
            braidSuccess)
      << braidGetLastError(nullptr);
  if (name) *name = algo;
  return s;
}

// The tuner's choice (BestByModel): the cheapest algorithm that serves the call and that the
// tuner ranks there (rankedFor), so no algorithm the engine would not run is quoted.
TEST(CostModelApi, IsTheCheapestSupportingAlgorithmsClosedForm) {
  const struct {
    braidCollective_t c;
    CollKind k;
  } kinds[] = {{braidCollAllReduce, CollKind::kAllReduce},
               {braidCollReduceScatter, CollKind::kReduceScatter},
               {braidCollAllGather, CollKind::kAllGather},
               {braidCollBroadcast, CollKind::kBroadcast}};
  for (auto [R, n] : {std::pair{8, 1}, {4, 2}, {1, 4}, {8, 16}})
    for (const auto& kind : kinds)
      for (uint64_t bytes : {uint64_t{1} << 12, uint64_t{1} << 22, uint64_t{1} << 28}) {
        std::string name;
        const double s = Estimate(kind.c, bytes, R, n, 1, 0, &name);
        const Algorithm* chosen = FindAlgorithm(name);
        ASSERT_NE(chosen, nullptr) << name;
        GroupLayout layout;
        layout.nnodes = n;
        for (int r = 0; r < R * n; ++r) {
          layout.node_of.push_back(r / R);
          layout.local_rank.push_back(r % R);
        }
        CollArgs a;
        a.kind = kind.k;
        a.dtype = DataType::kBfloat16;
        a.nranks = R * n;
        a.nchannels = 2;
        a.layout = &layout;
        const uint64_t elems = bytes / 2;
        a.count = kind.k == CollKind::kAllGather || kind.k == CollKind::kReduceScatter
                      ? elems / (R * n)
                      : elems;
        LinkModel model;
        model.intra = {kLink.intraLatency, kLink.intraBandwidth};
        model.inter = {kLink.interLatency, kLink.interBandwidth};
        // On one node a small call may run on the host's board (its default size).
        if (chosen == &BoardAlgorithm()) {
          ASSERT_EQ(n, 1);
          a.board = DefaultBoardArgs();
        }
        EXPECT_DOUBLE_EQ(s, chosen->estimate_seconds(a, model)) << name;
        // hpat is by name only: quoting it would price a schedule the engine never picks.
        EXPECT_TRUE(chosen->rankedFor(a, model)) << name << " on " << R << "x" << n;
        a.board = {};
        for (const auto* list : {&AllAlgorithms(), &HierarchicalAlgorithms()})
          for (const Algorithm* other : *list) {
            // What the tuner ranks: an algorithm it would not run is not a candidate.
            if (!other->supports(a) || !other->rankedFor(a, model) ||
                (list != &AllAlgorithms() && n == 1))
              continue;
            EXPECT_LE(s, other->estimate_seconds(a, model) * (1 + 1e-12))
                << name << " vs " << other->name() << " on " << R << "x" << n;
          }
      }
}

// k groups on the same nodes share each node's link: the same as one group on a link with k
// times the latency and 1/k of the bandwidth (SharedLink, the simulator's serialised NIC).
TEST(CostModelApi, NicSharingIsTheSharedLink) {
  const uint64_t bytes = uint64_t{1} << 26;
  braidLinkParams_t shared = kLink;
  shared.interLatency *= 8;
  shared.interBandwidth /= 8;
  EXPECT_DOUBLE_EQ(Estimate(braidCollAllReduce, bytes, 1, 16, 8),
                   Estimate(braidCollAllReduce, bytes, 1, 16, 1, 0, nullptr, shared));
  // Inside a node sharing changes nothing.
  EXPECT_DOUBLE_EQ(Estimate(braidCollAllGather, bytes, 4, 1, 2),
                   Estimate(braidCollAllGather, bytes, 4, 1, 1));
  EXPECT_GT(Estimate(braidCollAllReduce, bytes, 1, 16, 8),
            Estimate(braidCollAllReduce, bytes, 1, 16, 1));
}

// Several NICs: a group of one rank per node crosses through its rank's NIC (interBandwidth /
// nics), shared only with the other groups on that NIC.
TEST(CostModelApi, GroupsSmallerThanTheNicsUseTheirRanksNics) {
  const uint64_t bytes = uint64_t{1} << 26;
  braidLinkParams_t four = kLink;
  four.nicsPerNode = 4;
  braidLinkParams_t one_nic = kLink;  // one of the 4 NICs, shared by 2 of the 8 groups
  one_nic.interBandwidth /= 4;
  EXPECT_DOUBLE_EQ(Estimate(braidCollAllReduce, bytes, 1, 16, 8, 0, nullptr, four),
                   Estimate(braidCollAllReduce, bytes, 1, 16, 2, 0, nullptr, one_nic));
  // A group that spans the NICs: the same as the node's link when alone (the closed forms spread
  // its ranks over the NICs), and cheaper with 8 NICs than with one for a flat crossing.
  braidLinkParams_t eight = kLink;
  eight.nicsPerNode = 8;
  EXPECT_LE(Estimate(braidCollAllGather, bytes, 8, 4, 1, 0, nullptr, eight),
            Estimate(braidCollAllGather, bytes, 8, 4, 1, 0, nullptr, kLink));
}

TEST(CostModelApi, OneRankIsFreeAndQuantizedIsCheaper) {
  std::string name;
  EXPECT_EQ(Estimate(braidCollAllReduce, 1 << 20, 1, 1, 1, 0, &name), 0.0);
  EXPECT_EQ(name, "none");
  const uint64_t bytes = uint64_t{1} << 28;
  const double plain = Estimate(braidCollAllGather, bytes, 8, 4);
  const double int8 = Estimate(braidCollAllGather, bytes, 8, 4, 1, 8);
  const double int4 = Estimate(braidCollReduceScatter, bytes, 8, 4, 1, 4);
  // Half the bytes (plus scales); latency terms keep the time above half.
  EXPECT_LT(int8, plain * 0.75);
  EXPECT_LT(int4, Estimate(braidCollReduceScatter, bytes, 8, 4) * 0.5);
}

TEST(CostModelApi, BadArgumentsAreRefusedWithAMessage) {
  double s = 0;
  auto refused = [&](braidResult_t rc, const char* needle) {
    EXPECT_EQ(rc, braidErrInvalidArgument) << needle;
    EXPECT_NE(std::string(braidGetLastError(nullptr)).find(needle), std::string::npos)
        << braidGetLastError(nullptr);
  };
  refused(braidEstimateCollective(braidCollAllReduce, 8, braidFloat32, 0, 2, 2, 1, nullptr, &s,
                                  nullptr, 0),
          "NULL");
  refused(braidEstimateCollective(static_cast<braidCollective_t>(9), 8, braidFloat32, 0, 2, 2, 1,
                                  &kLink, &s, nullptr, 0),
          "unknown collective 9");
  refused(braidEstimateCollective(braidCollAllReduce, 8, static_cast<braidDataType_t>(99), 0, 2, 2,
                                  1, &kLink, &s, nullptr, 0),
          "unknown datatype 99");
  refused(braidEstimateCollective(braidCollAllGather, 8, braidFloat32, 3, 2, 2, 1, &kLink, &s,
                                  nullptr, 0),
          "quantBits");
  refused(braidEstimateCollective(braidCollAllReduce, 8, braidFloat32, 8, 2, 2, 1, &kLink, &s,
                                  nullptr, 0),
          "quantized forms");
  refused(braidEstimateCollective(braidCollAllReduce, 8, braidFloat32, 0, 0, 2, 1, &kLink, &s,
                                  nullptr, 0),
          "ranks per node");
  refused(braidEstimateCollective(braidCollAllReduce, 8, braidFloat32, 0, 2, 2, 0, &kLink, &s,
                                  nullptr, 0),
          "nicSharing");
  braidLinkParams_t bad = kLink;
  bad.interBandwidth = 0;
  refused(braidEstimateCollective(braidCollAllReduce, 8, braidFloat32, 0, 2, 2, 1, &bad, &s,
                                  nullptr, 0),
          "bandwidth");
}

TEST(CostModelApi, LinkProfileLoad) {
  char path[] = "/tmp/braid_profile_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto write = [&](const char* text) {
    FILE* f = std::fopen(path, "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  write("version 1\ninter.alpha_s 4e-06\ninter.beta_bytes_s 2.5e10\n");
  braidLinkParams_t link = kLink;
  ASSERT_EQ(braidLinkProfileLoad(path, &link), braidSuccess) << braidGetLastError(nullptr);
  EXPECT_EQ(link.interLatency, 4e-6);
  EXPECT_EQ(link.interBandwidth, 2.5e10);
  EXPECT_EQ(link.intraBandwidth, kLink.intraBandwidth);  // not in the file: kept
  write("version 1\nintra.alpha_s banana\nintra.beta_bytes_s 1e9\n");
  EXPECT_EQ(braidLinkProfileLoad(path, &link), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("line 2"), std::string::npos)
      << braidGetLastError(nullptr);
  std::remove(path);
  EXPECT_EQ(braidLinkProfileLoad(path, &link), braidErrInvalidArgument);
  EXPECT_NE(std::string(braidGetLastError(nullptr)).find("does not exist"), std::string::npos);
  EXPECT_EQ(braidLinkProfileLoad(nullptr, &link), braidErrInvalidArgument);
}

// braid-info --profile's fit: the bandwidth for which the model predicts a measured all-gather.
// The model's own prediction for a known bandwidth must give that bandwidth back, for either
// level (the inter-node link shared by the node's concurrent groups included).
TEST(LinkFit, RecoversTheBandwidthBehindTheModelsOwnPrediction) {
  const struct {
    LinkLevel level;
    uint64_t bytes;
    int R, n, share;
    double beta;
  } cases[] = {{LinkLevel::kIntraNode, 16 << 20, 2, 1, 1, 1.4e9},
               {LinkLevel::kIntraNode, 64 << 20, 8, 1, 1, 3e11},
               {LinkLevel::kInterNode, 16 << 20, 1, 2, 2, 1.2e8},
               {LinkLevel::kInterNode, 64 << 20, 1, 16, 8, 1e11}};
  for (const auto& c : cases) {
    braidLinkParams_t truth = kLink;
    (c.level == LinkLevel::kIntraNode ? truth.intraBandwidth : truth.interBandwidth) = c.beta;
    double t = 0;
    ASSERT_EQ(braidEstimateCollective(braidCollAllGather, c.bytes, braidUint8, 0, c.R, c.n, c.share,
                                      &truth, &t, nullptr, 0),
              braidSuccess);
    // Start from another bandwidth: the fit must not read the true one.
    auto fit = FitLevelBandwidth(braidCollAllGather, c.bytes, c.R, c.n, c.share, kLink, c.level, t);
    ASSERT_TRUE(fit.ok()) << fit.status().message();
    EXPECT_FALSE(fit->clamped);
    EXPECT_NEAR(fit->beta_bytes_s / c.beta, 1.0, 1e-6) << c.R << "x" << c.n;
  }
}

TEST(LinkFit, ClampsTimesTheModelCannotProduceAndRefusesBadInput) {
  // Faster than the latencies alone: the highest believable bandwidth, marked clamped.
  auto fast =
      FitLevelBandwidth(braidCollAllGather, 1 << 20, 4, 1, 1, kLink, LinkLevel::kIntraNode, 1e-12);
  ASSERT_TRUE(fast.ok());
  EXPECT_TRUE(fast->clamped);
  EXPECT_EQ(fast->beta_bytes_s, kMaxBetaBytesPerSecond);
  // Slower than the slowest believable bandwidth allows.
  auto slow =
      FitLevelBandwidth(braidCollAllGather, 1 << 20, 1, 4, 1, kLink, LinkLevel::kInterNode, 1e6);
  ASSERT_TRUE(slow.ok());
  EXPECT_TRUE(slow->clamped);
  EXPECT_EQ(slow->beta_bytes_s, kMinBetaBytesPerSecond);
  // Either bound written as a profile reads back (the loader refuses values outside them).
  for (double beta : {fast->beta_bytes_s, slow->beta_bytes_s}) {
    LinkProfile p;
    p.set(LinkClass::kIntraNode, {1e-6, beta});
    auto back = ParseLinkProfile(FormatLinkProfile(p));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->of(LinkClass::kIntraNode).beta_bytes_s, beta);
  }
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL})
    EXPECT_FALSE(
        FitLevelBandwidth(braidCollAllGather, 1 << 20, 4, 1, 1, kLink, LinkLevel::kIntraNode, bad)
            .ok())
        << bad;
  auto bad_group =
      FitLevelBandwidth(braidCollAllGather, 1 << 20, 0, 1, 1, kLink, LinkLevel::kIntraNode, 1e-3);
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.status().message().find("ranks per node"), std::string::npos)
      << bad_group.status().message();
}

}  // namespace
}  // namespace braid
