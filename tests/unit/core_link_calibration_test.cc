// CalibrateLinks (core/runtime/link_calibration.h) from one rank's side, with a scripted bootstrap
// and stream: the pairs chosen per layout, a failing or silent peer fails the measurement with the
// stream's error, the init deadline or the abort (never a hang), a malformed decision from rank
// 0 is refused, and a shared model is taken bit for bit. No sockets, no timing.
#include "core/runtime/link_calibration.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/link_profile.h"

namespace braid {
namespace {

// Answers every allGather with the scripted contributions of the other ranks (this rank's own
// message at its index).
class ScriptedBootstrap : public Bootstrap {
 public:
  ScriptedBootstrap(int rank, int nranks, std::vector<std::vector<std::string>> rounds)
      : rank_(rank), nranks_(nranks), rounds_(std::move(rounds)) {}
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const std::array<uint8_t, 16>& commNonce() const override { return nonce_; }
  Result<std::vector<std::string>> allGather(std::string_view mine, Deadline) override {
    if (round_ >= rounds_.size()) return InternalError("unexpected bootstrap round");
    std::vector<std::string> all = rounds_[round_++];
    all[rank_] = std::string(mine);
    sent_.emplace_back(mine);
    return all;
  }
  std::vector<std::string> sent_;

 private:
  int rank_, nranks_;
  std::vector<std::vector<std::string>> rounds_;
  size_t round_ = 0;
  std::array<uint8_t, 16> nonce_{};
};

// A stream that accepts everything sent and, on receive, fails (a dead peer) or has nothing.
class ScriptedEndpoint : public Endpoint {
 public:
  explicit ScriptedEndpoint(bool peer_dead) : peer_dead_(peer_dead) {}
  Result<size_t> send(const void*, size_t len) override { return len; }
  Result<size_t> recv(void*, size_t) override {
    if (peer_dead_) return RemoteError("tcp to rank 1 (host h, pid 7): the peer closed the stream");
    return size_t{0};
  }
  Result<std::span<const std::byte>> peek(size_t) override { return std::span<const std::byte>(); }
  void consume(size_t) override {}
  bool arm(bool, bool, std::vector<pollfd>&) override { return false; }
  void disarm(std::span<const pollfd>) override {}
  std::string describe() const override { return "tcp to rank 1 (host h, pid 7)"; }

 private:
  bool peer_dead_;
};

GroupLayout OneNode(int n) {
  GroupLayout l;
  l.nnodes = 1;
  for (int r = 0; r < n; ++r) {
    l.node_of.push_back(0);
    l.local_rank.push_back(r);
  }
  return l;
}

LinkCalibrationSetup MakeSetup(int rank, const GroupLayout& layout, Endpoint* ep) {
  LinkCalibrationSetup s;
  s.rank = rank;
  s.nranks = static_cast<int>(layout.node_of.size());
  s.layout = &layout;
  s.endpoint = [ep](int) { return ep; };
  s.spin_us = 0;
  s.where = "rank " + std::to_string(rank);
  return s;
}

TEST(CalibrateLinks, DeadPeerFailsTheMeasurementWithItsError) {
  const GroupLayout layout = OneNode(2);
  ScriptedEndpoint ep(/*peer_dead=*/true);
  ScriptedBootstrap bs(0, 2, {{"", ""}});
  auto r = CalibrateLinks(bs, MakeSetup(0, layout, &ep), Deadline::After(60000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kRemote);
  EXPECT_EQ(r.status().message(),
            "measuring the intra-node link: tcp to rank 1 (host h, pid 7): the peer closed the "
            "stream");
  EXPECT_EQ(bs.sent_, std::vector<std::string>{"M"});  // rank 0 decided to measure
}

TEST(CalibrateLinks, SilentPeerEndsAtTheDeadline) {
  const GroupLayout layout = OneNode(2);
  ScriptedEndpoint ep(/*peer_dead=*/false);
  ScriptedBootstrap bs(1, 2, {{"M", ""}});
  auto r = CalibrateLinks(bs, MakeSetup(1, layout, &ep), Deadline::After(0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kTimeout);
  EXPECT_EQ(r.status().message(),
            "measuring the intra-node link: link calibration: timed out waiting for tcp to rank 1 "
            "(host h, pid 7) (the init deadline, BRAID_TIMEOUT, passed; set "
            "BRAID_LINK_CALIBRATION=0 to skip the measurement)");
}

TEST(CalibrateLinks, AbortEndsTheMeasurement) {
  const GroupLayout layout = OneNode(2);
  ScriptedEndpoint ep(/*peer_dead=*/false);
  ScriptedBootstrap bs(1, 2, {{"M", ""}});
  std::atomic<bool> aborted{true};
  auto r =
      CalibrateLinks(bs, MakeSetup(1, layout, &ep), Deadline::After(60000).abortableBy(&aborted));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().cls(), ErrorClass::kAborted);
}

TEST(CalibrateLinks, RanksOutsideThePairOnlyWaitForTheResult) {
  // Rank 2 of 3 measures nothing: it takes rank 0's measurement from the second round.
  const GroupLayout layout = OneNode(3);
  LinkProfile measured;
  measured.set(LinkClass::kIntraNode, {3.5e-6, 6.25e9});
  ScriptedBootstrap bs(2, 3, {{"M", "", ""}, {FormatLinkProfile(measured), "", ""}});
  const int before = LinkMeasurementsRun();
  auto r = CalibrateLinks(bs, MakeSetup(2, layout, nullptr), Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(LinkMeasurementsRun(), before);
  EXPECT_EQ(r->model.intra.alpha_s, 3.5e-6);
  EXPECT_EQ(r->model.intra.beta_bytes_s, 6.25e9);
  EXPECT_EQ(r->origin[0], LinkOrigin::kMeasured);
  EXPECT_EQ(r->origin[1], LinkOrigin::kDefault);
  EXPECT_EQ(r->describe(),
            "intra 3.50 us 6.25 GB/s (measured), inter 25.00 us 1.20 GB/s (default)");
}

TEST(CalibrateLinks, UnbelievableMeasurementOfThePingerMeansTheDefault) {
  // The pinger found its values absurd and sent nothing for the class: every rank keeps the
  // default for it.
  const GroupLayout layout = OneNode(3);
  ScriptedBootstrap bs(2, 3, {{"M", "", ""}, {"", "", ""}});
  auto r = CalibrateLinks(bs, MakeSetup(2, layout, nullptr), Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const LinkModel defaults;
  EXPECT_TRUE(r->model == defaults);
  EXPECT_EQ(r->origin[0], LinkOrigin::kDefault);
}

TEST(CalibrateLinks, MalformedDecisionOrResultIsRefused) {
  const GroupLayout layout = OneNode(3);
  const char kBadValue[] = "U\x01\x00version 1\nintra.alpha_s -1\nintra.beta_bytes_s 1e9\n";
  for (const std::string& bad : {std::string("X"), std::string("U\x07\x00", 3),
                                 std::string(kBadValue, sizeof(kBadValue) - 1)}) {
    ScriptedBootstrap bs(2, 3, {{bad, "", ""}});
    auto r = CalibrateLinks(bs, MakeSetup(2, layout, nullptr), Deadline::After(60000));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().cls(), ErrorClass::kRemote) << bad;
    EXPECT_EQ(r.status().message().rfind("malformed link model from rank 0: ", 0), 0u)
        << r.status().message();
  }
  ScriptedBootstrap bs(2, 3, {{"M", "", ""}, {"version 1\nintra.alpha_s 1\n", "", ""}});
  auto r = CalibrateLinks(bs, MakeSetup(2, layout, nullptr), Deadline::After(60000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "malformed link measurement from rank 0: intra has alpha_s but no beta_bytes_s "
            "(truncated?)");
}

TEST(CalibrateLinks, DisabledOnRankZeroSharesTheDefaults) {
  const GroupLayout layout = OneNode(2);
  ScriptedBootstrap bs(0, 2, {{"", ""}});
  LinkCalibrationSetup s = MakeSetup(0, layout, nullptr);
  s.enabled = false;
  auto r = CalibrateLinks(bs, s, Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(bs.sent_, std::vector<std::string>{std::string("U\0\0", 3)});
  EXPECT_EQ(r->origin[0], LinkOrigin::kDefault);
}

TEST(CalibrateLinks, InheritedModelIsSharedAsIs) {
  const GroupLayout layout = OneNode(2);
  ScriptedBootstrap bs(0, 2, {{"", ""}});
  LinkCalibrationSetup s = MakeSetup(0, layout, nullptr);
  s.inherited = LinkModel{{1.0 / 3 * 1e-5, 7.7e9}, {3e-5, 1e9}};
  auto r = CalibrateLinks(bs, s, Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->model == *s.inherited);
  EXPECT_EQ(r->origin[0], LinkOrigin::kInherited);
  EXPECT_EQ(r->origin[1], LinkOrigin::kInherited);
}

TEST(CalibrateLinks, PairsFollowTheLayout) {
  // Rank 0 alone on its node, two ranks on the next: intra is measured by ranks 1 and 2, inter
  // by ranks 0 and 1. Rank 3 (node 2, alone) takes part in neither and measures nothing.
  GroupLayout l;
  l.nnodes = 3;
  l.node_of = {0, 1, 1, 2};
  l.local_rank = {0, 0, 1, 0};
  LinkProfile intra;
  intra.set(LinkClass::kIntraNode, {4e-6, 5e9});
  LinkProfile both;
  both.set(LinkClass::kIntraNode, {9e-6, 2e9});
  both.set(LinkClass::kInterNode, {4e-5, 1e9});
  // Round 2: rank 1 (intra pinger) sends intra; rank 0 (inter pinger) sends both, but its intra
  // is ignored: a class is taken only from the rank that measured it.
  ScriptedBootstrap bs(
      3, 4, {{"M", "", "", ""}, {FormatLinkProfile(both), FormatLinkProfile(intra), "", ""}});
  const int before = LinkMeasurementsRun();
  auto r = CalibrateLinks(bs, MakeSetup(3, l, nullptr), Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(LinkMeasurementsRun(), before);
  EXPECT_EQ(r->model.intra.alpha_s, 4e-6);
  EXPECT_EQ(r->model.inter.alpha_s, 4e-5);
  EXPECT_EQ(r->origin[0], LinkOrigin::kMeasured);
  EXPECT_EQ(r->origin[1], LinkOrigin::kMeasured);
}

// Two nodes of two ranks (node-major).
GroupLayout TwoByTwo() {
  GroupLayout l;
  l.nnodes = 2;
  l.node_of = {0, 0, 1, 1};
  l.local_rank = {0, 1, 0, 1};
  return l;
}

TEST(CalibrateLinks, MeasuredInterLinkIsOneNicOfTheNodes) {
  // With 2 NICs a node, the inter pair (ranks 0 and 2) measures one NIC to one NIC: the model's
  // inter link, one node's, is both together; intra is as measured.
  const GroupLayout l = TwoByTwo();
  LinkProfile both;
  both.set(LinkClass::kIntraNode, {2e-6, 5e9});
  both.set(LinkClass::kInterNode, {3e-5, 1.25e8});
  ScriptedBootstrap bs(3, 4, {{"M", "", "", ""}, {FormatLinkProfile(both), "", "", ""}});
  LinkCalibrationSetup s = MakeSetup(3, l, nullptr);
  s.nics_per_node = 2;
  auto r = CalibrateLinks(bs, s, Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.nics_per_node, 2);
  EXPECT_EQ(r->model.inter.beta_bytes_s, 2.5e8);
  EXPECT_EQ(r->model.inter.alpha_s, 3e-5);
  EXPECT_EQ(r->model.intra.beta_bytes_s, 5e9);
  EXPECT_EQ(r->model.nic().beta_bytes_s, 1.25e8);
  EXPECT_EQ(r->describe(),
            "intra 2.00 us 5.00 GB/s (measured), inter 30.00 us 0.25 GB/s (measured), 2 NICs per "
            "node");
}

TEST(CalibrateLinks, SharedModelTakesTheNodesNicsButNotTheirBandwidthAgain) {
  // A profile holds the model's inter link (a node's, written so by a communicator that measured
  // it) and the defaults are a node's link: taken as they are, with this communicator's NICs.
  const GroupLayout l = TwoByTwo();
  ScriptedBootstrap bs(0, 4, {{"", "", "", ""}});
  LinkCalibrationSetup s = MakeSetup(0, l, nullptr);
  s.enabled = false;
  s.nics_per_node = 2;
  auto r = CalibrateLinks(bs, s, Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model.nics_per_node, 2);
  EXPECT_EQ(r->model.inter.beta_bytes_s, LinkModel{}.inter.beta_bytes_s);
  // Rank 2 receives the profile's model from rank 0.
  LinkProfile p;
  p.set(LinkClass::kInterNode, {3e-5, 2.5e8});
  ScriptedBootstrap bs2(2, 4, {{std::string("U\0\2", 3) + FormatLinkProfile(p), "", "", ""}});
  LinkCalibrationSetup s2 = MakeSetup(2, l, nullptr);
  s2.nics_per_node = 2;
  auto r2 = CalibrateLinks(bs2, s2, Deadline::After(60000));
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  EXPECT_EQ(r2->origin[1], LinkOrigin::kProfile);
  EXPECT_EQ(r2->model.inter.beta_bytes_s, 2.5e8);
  EXPECT_EQ(r2->model.nics_per_node, 2);
}

TEST(CalibrateLinks, InheritedModelKeepsItsNics) {
  const GroupLayout l = TwoByTwo();
  ScriptedBootstrap bs(0, 4, {{"", "", "", ""}});
  LinkCalibrationSetup s = MakeSetup(0, l, nullptr);
  LinkModel parent{{1e-6, 4e9}, {2e-5, 5e8}};
  parent.nics_per_node = 4;
  s.inherited = parent;
  s.nics_per_node = 2;  // this communicator's ranks use two: the parent's bandwidth counts four
  auto r = CalibrateLinks(bs, s, Deadline::After(60000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->model == parent);
}

}  // namespace
}  // namespace braid
