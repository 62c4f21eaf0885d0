// The shm transport's life around the endpoints: which peers it accepts, that it never names
// anything in /dev/shm, how it sizes segments (budget, free space), and its blob format.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <random>

#include "transport/shm/shm_arena.h"
#include "transport/shm/shm_sizing.h"
#include "transport/shm/shm_transport.h"
#include "transport_shm_harness.h"

namespace braid::shm_test {
namespace {

class ShmLifecycleTest : public GuardedTest {};

TEST_F(ShmLifecycleTest, FactoryNameAndPriority) {
  EXPECT_STREQ(ShmTransportFactory()->name(), "shm");
  EXPECT_EQ(ShmTransportFactory()->priority(), 200);
}

TEST_F(ShmLifecycleTest, SegmentsAreNeverNamedInDevShm) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A", "A"}, 2, 64 << 10, &g).ok());
  EXPECT_TRUE(ShmEntries(g.tag).empty()) << "a rank killed from now on leaves nothing behind";
  for (int r = 0; r < 3; ++r) {
    const std::string loc = shm::DecodeBlob(g.blobs[static_cast<size_t>(r)]).segment;
    EXPECT_TRUE(shm::IsSegmentLocatorOf(loc, getpid())) << loc;
    // The file lives in /dev/shm's file system (its size limit applies) without a name there.
    struct stat by_loc, dir;
    ASSERT_EQ(stat(loc.c_str(), &by_loc), 0) << loc;
    ASSERT_EQ(stat("/dev/shm", &dir), 0);
    EXPECT_EQ(by_loc.st_dev, dir.st_dev);
    EXPECT_EQ(by_loc.st_nlink, 0u);
  }
  ASSERT_TRUE(ConnectGroup(&g, /*finish=*/false).ok());
  EXPECT_TRUE(ShmEntries(g.tag).empty());
  for (auto& i : g.inst) ASSERT_TRUE(i->finishConnect().ok());
  EXPECT_TRUE(ShmEntries(g.tag).empty());
  // The mappings outlive the names.
  uint64_t v = 0x1234;
  ASSERT_EQ(*g.ep(2, 0, 1)->send(&v, sizeof(v)), sizeof(v));
  v = 0;
  ASSERT_EQ(*g.ep(0, 2, 1)->recv(&v, sizeof(v)), sizeof(v));
  EXPECT_EQ(v, 0x1234u);
  // Endpoints may outlive their instance (they hold the mappings).
  g.inst.clear();
  ASSERT_EQ(*g.ep(1, 0)->send(&v, sizeof(v)), sizeof(v));
  ASSERT_EQ(*g.ep(0, 1)->recv(&v, sizeof(v)), sizeof(v));
}

TEST_F(ShmLifecycleTest, SegmentsAreReservedUpFront) {
  // Every page is allocated at create (a full /dev/shm fails init, never SIGBUS later).
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A", "A"}, 2, 1 << 20, &g).ok());
  const shm::SegmentLayout l = shm::PlanSegment(1 << 20, 3, 2, uint64_t{1} << 40).layout;
  for (const auto& blob : g.blobs) {
    struct stat st;
    ASSERT_EQ(stat(shm::DecodeBlob(blob).segment.c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), l.totalBytes());
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, l.totalBytes());
  }
}

TEST_F(ShmLifecycleTest, SegmentIsPrivateToTheUser) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
  struct stat st;
  ASSERT_EQ(stat(shm::DecodeBlob(g.blobs[0]).segment.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(ShmLifecycleTest, InsufficientSpaceIsSystemErrorWithRemedy) {
  // 4 local ranks x 3 peers x 2 channels: a page of header and controls and 2 pages for 6 rings
  // of 1 KiB each, 48 KiB for the host even at the minimum.
  shm::SetShmFreeBytesForTesting(16 << 10);
  Group g;
  Status st = CreateGroup({"A", "A", "A", "A"}, 2, 1 << 20, &g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.cls(), ErrorClass::kSystem);
  const std::string& m = st.message();
  EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  EXPECT_NE(m.find("/dev/shm has 16 KiB free, needs 48 KiB"), std::string::npos) << m;
  EXPECT_NE(m.find("docker --shm-size"), std::string::npos) << m;
  EXPECT_NE(m.find("BRAID_NCHANNELS"), std::string::npos) << m;
  EXPECT_TRUE(ShmEntries(g.tag).empty());
}

TEST_F(ShmLifecycleTest, NoSpaceMessage) {
  EXPECT_EQ(shm::NoSpaceMessage(12 << 20, 112 << 20),
            "/dev/shm has 12 MiB free, needs 112 MiB: enlarge it (docker --shm-size) or set "
            "BRAID_SHM_RING_BYTES lower");
  // "needs" rounds up, never reading smaller than the truth.
  EXPECT_NE(shm::NoSpaceMessage(0, (1 << 20) + 1).find("needs 2 MiB"), std::string::npos);
  EXPECT_NE(shm::NoSpaceMessage(0, 100 << 10).find("needs 100 KiB"), std::string::npos);
  EXPECT_NE(shm::NoSpaceMessage(uint64_t{3} << 29, 0).find("has 1.5 GiB"), std::string::npos);
}

TEST_F(ShmLifecycleTest, RingsShrinkWhenSpaceIsShort) {
  // 2 local ranks share 8 MiB: 4 MiB each fits a 2 MiB ring (plus header), not 4 MiB.
  shm::SetShmFreeBytesForTesting(8 << 20);
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 16 << 20, &g).ok());
  for (auto& b : g.blobs) EXPECT_EQ(shm::DecodeBlob(b).ring_bytes, uint64_t{2} << 20);
  ASSERT_TRUE(ConnectGroup(&g).ok());
  std::vector<std::byte> buf(4 << 20);
  auto n = g.ep(0, 1)->send(buf.data(), buf.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, size_t{2} << 20);
}

TEST_F(ShmLifecycleTest, RingBytesRoundDownToPowerOfTwoWithinLimits) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 100000, &g).ok());
  EXPECT_EQ(shm::DecodeBlob(g.blobs[0]).ring_bytes, 65536u);
  EXPECT_EQ(shm::RequestedRingBytes(1000), shm::kMinRingBytes);
  EXPECT_EQ(shm::RequestedRingBytes(uint64_t{1} << 40), shm::kMaxRingBytes);
}

constexpr uint64_t kLots = uint64_t{1} << 40;  // free space that never limits

TEST_F(ShmLifecycleTest, SmallJobsKeepTheRequestedRingForEveryPair) {
  // 18 ranks x 17 peers x 3 lanes x 1 MiB = 918 MiB: within the budget, so uniform rings.
  for (uint32_t n : {2u, 8u, 18u}) {
    const shm::SegmentPlan p = shm::PlanSegment(1 << 20, n, 3, kLots);
    EXPECT_EQ(p.layout.ring_bytes, 1u << 20) << n;
    EXPECT_EQ(p.layout.arena_bytes, uint64_t{n - 1} * 3 * (1 << 20)) << n;
    EXPECT_FALSE(p.below_request);
  }
}

TEST_F(ShmLifecycleTest, ManyRanksShareTheHostBudget) {
  for (uint32_t n : {19u, 32u, 64u, 128u, 256u}) {
    const shm::SegmentPlan p = shm::PlanSegment(1 << 20, n, 3, kLots);
    const shm::SegmentLayout& l = p.layout;
    EXPECT_TRUE(p.below_request) << n;
    EXPECT_FALSE(p.short_of_space) << n;
    EXPECT_LE(n * l.totalBytes(), shm::kHostSegmentBudgetBytes) << n;
    EXPECT_GT(n * l.totalBytes(), shm::kHostSegmentBudgetBytes - n * shm::kPageBytes) << n;
    EXPECT_EQ(l.totalBytes() % shm::kPageBytes, 0u) << "tmpfs counts whole pages";
    // Every ring can get the minimum, and kFullSizeRings of them the full ring size.
    EXPECT_GE(l.arena_bytes, l.nrings() * l.min_ring_bytes +
                                 shm::kFullSizeRings * (l.ring_bytes - l.min_ring_bytes))
        << n;
    // About half of the arena for the minimum.
    EXPECT_LE(2 * l.nrings() * l.min_ring_bytes, l.arena_bytes) << n;
    EXPECT_GT(4 * l.nrings() * l.min_ring_bytes, l.arena_bytes) << n;
    EXPECT_LE(l.ring_bytes, 1u << 20);
  }
  EXPECT_EQ(shm::PlanSegment(1 << 20, 32, 3, kLots).layout.ring_bytes, 1u << 20);
  EXPECT_EQ(shm::PlanSegment(1 << 20, 256, 3, kLots).layout.ring_bytes, 128u << 10);
  EXPECT_EQ(shm::PlanSegment(1 << 20, 256, 3, kLots).layout.min_ring_bytes, 2u << 10);
}

TEST_F(ShmLifecycleTest, HostBoundHoldsAtAnyScaleAndFreeSpaceIsHard) {
  for (uint32_t n = 2; n <= 1024; n = n * 3 / 2 + 1)
    for (uint32_t lanes : {1u, 3u, 17u}) {
      const shm::SegmentPlan p = shm::PlanSegment(1 << 20, n, lanes, kLots);
      ASSERT_NE(p.layout.nslots, 0u);
      EXPECT_LE(n * p.layout.totalBytes(), shm::HostSegmentBytesBound(n, lanes)) << n;
    }
  // At 2048 ranks the minimum rings alone exceed the budget: the bound says by how much.
  EXPECT_GT(shm::HostSegmentBytesBound(2048, 3), shm::kHostSegmentBudgetBytes);
  // Free space shrinks what the budget would give, down to nothing.
  const shm::SegmentPlan p = shm::PlanSegment(1 << 20, 8, 3, 64 << 20);
  EXPECT_TRUE(p.short_of_space);
  EXPECT_LE(8 * p.layout.totalBytes(), uint64_t{64} << 20);
  EXPECT_EQ(shm::PlanSegment(1 << 20, 8, 3, 64 << 10).layout.nslots, 0u);
}

TEST_F(ShmLifecycleTest, ArenaClaimsGiveTheFirstRingsTheFullSizeAndEveryRingTheMinimum) {
  {
    // A minimum of 2 units: 6 rings, 24 units, full 8: 8, 8 (then 8 left, owed to the 4 others),
    // then 2 each.
    shm::SegmentLayout l{6, 1, 8 * shm::kMinRingBytes, 24 * shm::kMinRingBytes,
                         2 * shm::kMinRingBytes};
    shm::ArenaControl arena;
    arena.state.store(shm::ArenaInitialState(l.nrings()));
    std::vector<uint64_t> got;
    for (int i = 0; i < 6; ++i) {
      auto a = shm::ClaimRingArea(&arena, l);
      ASSERT_TRUE(a.ok()) << i;
      got.push_back(a->bytes / shm::kMinRingBytes);
    }
    EXPECT_EQ(got, (std::vector<uint64_t>{8, 8, 2, 2, 2, 2}));
    EXPECT_FALSE(shm::IsValidRingArea({l.arenaOffset(), shm::kMinRingBytes}, l)) << "below min";
  }
  // 10 rings, an arena of 40 units, full rings of 8: after 4 full rings (32 units) the other 6
  // are owed one unit each, so the fifth may take 3 (rounded down to 2), the sixth 2, the rest 1.
  shm::SegmentLayout l{10, 1, 8 * shm::kMinRingBytes, 40 * shm::kMinRingBytes};
  shm::ArenaControl arena;
  arena.state.store(shm::ArenaInitialState(l.nrings()));
  std::vector<uint64_t> got;
  uint64_t next = l.arenaOffset();
  for (int i = 0; i < 10; ++i) {
    auto a = shm::ClaimRingArea(&arena, l);
    ASSERT_TRUE(a.ok()) << i << ": " << a.status().message();
    EXPECT_EQ(a->offset, next);
    EXPECT_TRUE(shm::IsValidRingArea(*a, l));
    next += a->bytes;
    got.push_back(a->bytes / shm::kMinRingBytes);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{8, 8, 8, 8, 2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(next, l.totalBytes());
  auto extra = shm::ClaimRingArea(&arena, l);
  ASSERT_FALSE(extra.ok()) << "more claims than rings: corrupt";
  // Areas a writer could publish that a reader must refuse.
  EXPECT_FALSE(shm::IsValidRingArea({l.arenaOffset(), 16 * shm::kMinRingBytes}, l));
  EXPECT_FALSE(shm::IsValidRingArea({l.arenaOffset() + 8, shm::kMinRingBytes}, l));
  EXPECT_FALSE(shm::IsValidRingArea({l.arenaOffset(), 3 * shm::kMinRingBytes}, l));
  EXPECT_FALSE(shm::IsValidRingArea({0, shm::kMinRingBytes}, l));
  EXPECT_FALSE(shm::IsValidRingArea({l.totalBytes(), shm::kMinRingBytes}, l));
  EXPECT_FALSE(
      shm::IsValidRingArea({l.totalBytes() - shm::kMinRingBytes, 2 * shm::kMinRingBytes}, l));
  EXPECT_TRUE(shm::IsValidRingArea({l.totalBytes() - shm::kMinRingBytes, shm::kMinRingBytes}, l));
}

TEST_F(ShmLifecycleTest, CanConnectOnlyOnTheSameHost) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A", "B", "B"}, 1, 64 << 10, &g).ok());
  auto can = [&](int a, int b) { return g.inst[static_cast<size_t>(a)]->canConnect(b, g.blobs); };
  EXPECT_TRUE(can(0, 1));
  EXPECT_TRUE(can(1, 0));
  EXPECT_TRUE(can(2, 3));
  EXPECT_TRUE(can(3, 2));
  for (int a : {0, 1})
    for (int b : {2, 3}) {
      EXPECT_FALSE(can(a, b));
      EXPECT_FALSE(can(b, a));
    }
  EXPECT_FALSE(can(0, 0));
  EXPECT_FALSE(can(0, 7));
  EXPECT_FALSE(can(0, -1));
  ASSERT_TRUE(ConnectGroup(&g).ok());
  uint64_t v = 5;
  ASSERT_EQ(*g.ep(3, 2)->send(&v, sizeof(v)), sizeof(v));
  ASSERT_EQ(*g.ep(2, 3)->recv(&v, sizeof(v)), sizeof(v));
}

TEST_F(ShmLifecycleTest, LoneRankCreatesNoSegment) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A", "B"}, 1, 64 << 10, &g).ok());
  EXPECT_FALSE(shm::DecodeBlob(g.blobs[0]).segment.empty());
  EXPECT_FALSE(shm::DecodeBlob(g.blobs[1]).segment.empty());
  EXPECT_TRUE(shm::DecodeBlob(g.blobs[2]).valid);
  EXPECT_TRUE(shm::DecodeBlob(g.blobs[2]).segment.empty());
  for (int p : {0, 1}) {
    EXPECT_FALSE(g.inst[2]->canConnect(p, g.blobs));
    EXPECT_FALSE(g.inst[static_cast<size_t>(p)]->canConnect(2, g.blobs));
  }
}

TEST_F(ShmLifecycleTest, CanConnectNeedsMatchingNamespacesAndValidBlobs) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
  auto with = [&](auto mutate) {
    auto blobs = g.blobs;
    shm::ShmBlob b = shm::DecodeBlob(blobs[1]);
    mutate(b);
    blobs[1] = shm::EncodeBlob(b);
    return std::make_pair(g.inst[0]->canConnect(1, blobs), g.inst[1]->canConnect(0, blobs));
  };
  const auto no = std::make_pair(false, false);
  EXPECT_EQ(with([](shm::ShmBlob&) {}), std::make_pair(true, true));
  EXPECT_EQ(with([](shm::ShmBlob& b) { b.shm_dev += 1; }), no) << "another /dev/shm";
  EXPECT_EQ(with([](shm::ShmBlob& b) { b.pidns += 1; }), no) << "another pid namespace";
  EXPECT_EQ(with([](shm::ShmBlob& b) { b.uid += 1; }), no) << "another user";
  EXPECT_EQ(with([](shm::ShmBlob& b) { b.host_id = "B"; }), no);
  EXPECT_EQ(with([](shm::ShmBlob& b) { b.segment.clear(); }), no);
  auto blobs = g.blobs;
  blobs[1] = "garbage";
  EXPECT_FALSE(g.inst[0]->canConnect(1, blobs));
  EXPECT_FALSE(g.inst[1]->canConnect(0, blobs));
  blobs[1] = "";
  EXPECT_FALSE(g.inst[0]->canConnect(1, blobs));
}

TEST_F(ShmLifecycleTest, BlobRoundTripAndMalformedInput) {
  shm::ShmBlob b;
  b.valid = true;
  b.segment = "/proc/4242/fd/7";
  b.ring_bytes = 1 << 20;
  b.pid = 4242;
  b.host_id = "host:with:colons;and\nnewline";
  b.doorbell = "bell:1";
  b.shm_dev = 77;
  b.pidns = 4026531836ULL;
  b.uid = 1000;
  std::string text = shm::EncodeBlob(b);
  shm::ShmBlob d = shm::DecodeBlob(text);
  ASSERT_TRUE(d.valid);
  EXPECT_EQ(d.segment, b.segment);
  EXPECT_EQ(d.ring_bytes, b.ring_bytes);
  EXPECT_EQ(d.pid, b.pid);
  EXPECT_EQ(d.host_id, b.host_id);
  EXPECT_EQ(d.doorbell, b.doorbell);
  EXPECT_EQ(d.shm_dev, b.shm_dev);
  EXPECT_EQ(d.pidns, b.pidns);
  EXPECT_EQ(d.uid, b.uid);
  // Every truncation and random mutations decode without crashing; truncations are invalid.
  for (size_t n = 0; n < text.size(); ++n) EXPECT_FALSE(shm::DecodeBlob(text.substr(0, n)).valid);
  std::mt19937 rng(1);
  for (int i = 0; i < 5000; ++i) {
    std::string m = text;
    for (int k = 0; k < 3; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    (void)shm::DecodeBlob(m);
  }
  EXPECT_FALSE(shm::DecodeBlob("shm1seg:99999999999999999999999:x").valid);
  EXPECT_FALSE(shm::DecodeBlob(std::string(100000, 'a')).valid);
}

TEST_F(ShmLifecycleTest, StaleSegmentsOfDeadProcessesAreRemoved) {
  // A pid that existed and is gone: a reaped child.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string tag = UniqueTag();
  const uint64_t ns = shm::PidNamespaceId();
  const std::string dead = shm::SegmentName(tag + "dead", 0, child, ns);
  const std::string alive = shm::SegmentName(tag + "alive", 0, getpid(), ns);
  const std::string other_ns = shm::SegmentName(tag + "otherns", 0, child, ns + 1);
  for (const auto& n : {dead, alive, other_ns}) {
    int fd = shm_open(n.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << n;
    close(fd);
  }
  EXPECT_GE(shm::RemoveStaleSegments(), 1);
  EXPECT_TRUE(ShmEntries(tag + "dead").empty());
  EXPECT_EQ(ShmEntries(tag + "alive").size(), 1u) << "the creator still runs";
  EXPECT_EQ(ShmEntries(tag + "otherns").size(), 1u) << "a pid in another namespace means nothing";
  shm_unlink(alive.c_str());
  shm_unlink(other_ns.c_str());
}

TEST_F(ShmLifecycleTest, ConnectReportsAVanishedSegment) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
  // Rank 1 closes the descriptor behind its locator before rank 0 maps it (e.g. rank 1 already
  // failed init).
  g.inst[1].reset();
  std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
  Status st = g.inst[0]->connect({1}, g.blobs, Deadline::After(5000), &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.cls(), ErrorClass::kSystem);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(out.empty());
}

TEST_F(ShmLifecycleTest, ConnectOpensOnlyTheSegmentOfThePeerItNames) {
  Group g, other;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &other).ok());
  auto connect_with = [&](const std::string& blob1) {
    auto blobs = g.blobs;
    blobs[1] = blob1;
    std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
    return g.inst[0]->connect({1}, blobs, Deadline::After(5000), &out);
  };
  // Only /proc/<its pid>/fd/<n> is ever opened on a peer's word.
  for (const char* bad : {"/etc/passwd", "/proc/1/fd/0", "/proc/self/fd/3"}) {
    shm::ShmBlob b = shm::DecodeBlob(g.blobs[1]);
    b.segment = bad;
    Status st = connect_with(shm::EncodeBlob(b));
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.cls(), ErrorClass::kRemote) << st.message();
  }
  {
    shm::ShmBlob b = shm::DecodeBlob(g.blobs[1]);
    b.segment = "/proc/" + std::to_string(getpid()) + "/fd/007";
    EXPECT_FALSE(connect_with(shm::EncodeBlob(b)).ok()) << "one spelling per descriptor";
  }
  // A segment of this process, but of another communicator, or of another rank.
  Status st = connect_with(other.blobs[1]);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not rank 1's segment of this communicator"), std::string::npos)
      << st.message();
  shm::ShmBlob b = shm::DecodeBlob(g.blobs[1]);
  b.segment = shm::DecodeBlob(g.blobs[0]).segment;
  st = connect_with(shm::EncodeBlob(b));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not rank 1's segment"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace braid::shm_test
