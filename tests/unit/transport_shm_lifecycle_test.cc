// The shm transport's life around the endpoints: which peers it accepts, what it leaves in
// /dev/shm, how it sizes segments against free space, and its blob format.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <random>

#include "transport/shm/shm_transport.h"
#include "transport_shm_harness.h"

namespace braid::shm_test {
namespace {

class ShmLifecycleTest : public GuardedTest {};

TEST_F(ShmLifecycleTest, FactoryNameAndPriority) {
  EXPECT_STREQ(ShmTransportFactory()->name(), "shm");
  EXPECT_EQ(ShmTransportFactory()->priority(), 200);
}

TEST_F(ShmLifecycleTest, NothingLeftInDevShmAfterFinishConnect) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A", "A"}, 2, 64 << 10, &g).ok());
  EXPECT_EQ(ShmEntries(g.tag).size(), 3u) << "one segment per rank";
  ASSERT_TRUE(ConnectGroup(&g, /*finish=*/false).ok());
  EXPECT_EQ(ShmEntries(g.tag).size(), 3u);
  for (auto& i : g.inst) ASSERT_TRUE(i->finishConnect().ok());
  EXPECT_TRUE(ShmEntries(g.tag).empty()) << "a rank killed from now on leaves nothing behind";
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

TEST_F(ShmLifecycleTest, NothingLeftWhenInitStopsBeforeFinishConnect) {
  std::string tag;
  {
    Group g;
    ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
    tag = g.tag;
    ASSERT_EQ(ShmEntries(tag).size(), 2u);
    ASSERT_TRUE(ConnectGroup(&g, /*finish=*/false).ok());
  }
  EXPECT_TRUE(ShmEntries(tag).empty());
}

TEST_F(ShmLifecycleTest, SegmentIsPrivateToTheUser) {
  Group g;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 64 << 10, &g).ok());
  auto names = ShmEntries(g.tag);
  ASSERT_FALSE(names.empty());
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm/" + names[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(ShmLifecycleTest, InsufficientSpaceIsSystemErrorWithRemedy) {
  // 4 local ranks x 3 peers x 2 channels x (64 KiB + control) is ~1.6 MiB even at the minimum.
  shm::SetShmFreeBytesForTesting(1 << 20);
  Group g;
  Status st = CreateGroup({"A", "A", "A", "A"}, 2, 1 << 20, &g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.cls(), ErrorClass::kSystem);
  const std::string& m = st.message();
  EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  EXPECT_NE(m.find("/dev/shm has 1 MiB free, needs 2 MiB"), std::string::npos) << m;
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
  Group h;
  ASSERT_TRUE(CreateGroup({"A", "A"}, 1, 1000, &h).ok());
  EXPECT_EQ(shm::DecodeBlob(h.blobs[0]).ring_bytes, 65536u) << "64 KiB minimum";
}

TEST_F(ShmLifecycleTest, FitRingBytes) {
  EXPECT_EQ(shm::FitRingBytes(1 << 20, 1, 1, 100 << 20), 1u << 20);
  EXPECT_EQ(shm::FitRingBytes((1 << 20) + 5, 1, 1, 100 << 20), 1u << 20);
  EXPECT_EQ(shm::FitRingBytes(1 << 20, 1, 1, 1 << 20), 512u << 10);
  EXPECT_EQ(shm::FitRingBytes(1 << 20, 7, 4, 1 << 20), 0u);
  EXPECT_EQ(shm::FitRingBytes(uint64_t{1} << 40, 1, 1, uint64_t{1} << 40), shm::kMaxRingBytes);
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
  EXPECT_EQ(ShmEntries(g.tag).size(), 2u);
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
  b.segment = "/braid-x-r1-p2-n3";
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
  // Rank 1's segment disappears before rank 0 maps it (e.g. rank 1 already failed init).
  shm_unlink(shm::DecodeBlob(g.blobs[1]).segment.c_str());
  std::vector<std::vector<std::unique_ptr<Endpoint>>> out;
  Status st = g.inst[0]->connect({1}, g.blobs, Deadline::After(5000), &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.cls(), ErrorClass::kSystem);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace braid::shm_test
