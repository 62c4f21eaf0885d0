// The shm endpoint as a byte stream: order and integrity with odd sizes and wrap-around, peek /
// consume, large concurrent transfers, and sleeping/waking through arm() and the doorbells.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/proc_state.h"
#include "transport/shm/shm_sizing.h"
#include "transport/shm/shm_transport.h"
#include "transport_shm_harness.h"

namespace braid::shm_test {
namespace {

using braid_test_common::kPollSyscalls;
using braid_test_common::ThisThreadId;
using braid_test_common::WaitUntilBlockedIn;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr size_t kRing = 64 << 10;

class ShmStreamTest : public GuardedTest {};

// Streams `total` bytes a -> b on one thread, alternating odd-sized sends and receives, so the
// ring wraps at every possible offset.
void PumpOddSizes(Endpoint* a, Endpoint* b, uint64_t total, uint64_t seed) {
  static const size_t kSendSizes[] = {1, 7, 13, 4093, 65537, 3, 8191, 40000, 31, 12289};
  static const size_t kRecvSizes[] = {5, 9973, 1, 11, 70001, 17, 2, 6007, 33331};
  std::vector<std::byte> buf(80000);
  uint64_t sent = 0, received = 0;
  size_t si = 0, ri = 0;
  auto deadline = steady_clock::now() + std::chrono::seconds(30);
  while (received < total) {
    ASSERT_LT(steady_clock::now(), deadline)
        << "no progress: sent " << sent << " received " << received;
    if (sent < total) {
      size_t want = std::min<uint64_t>(kSendSizes[si++ % std::size(kSendSizes)], total - sent);
      for (size_t i = 0; i < want; ++i) buf[i] = PatternByte(sent + i, seed);
      auto n = a->send(buf.data(), want);
      ASSERT_TRUE(n.ok()) << n.status().message();
      ASSERT_LE(*n, want);
      sent += *n;
    }
    size_t want = kRecvSizes[ri++ % std::size(kRecvSizes)];
    auto n = b->recv(buf.data(), want);
    ASSERT_TRUE(n.ok()) << n.status().message();
    ASSERT_LE(*n, want);
    for (size_t i = 0; i < *n; ++i)
      ASSERT_EQ(buf[i], PatternByte(received + i, seed)) << "byte " << received + i;
    received += *n;
  }
  auto n = b->recv(buf.data(), 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u) << "stream delivered more than was sent";
}

TEST_F(ShmStreamTest, OddSizesAndWrapAroundBothDirections) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  PumpOddSizes(g.ep(0, 1), g.ep(1, 0), 20 * kRing + 12345, 1);
  PumpOddSizes(g.ep(1, 0), g.ep(0, 1), 20 * kRing + 777, 2);
  // Interleaved: both directions of one endpoint pair in flight at once.
  PumpOddSizes(g.ep(0, 1), g.ep(1, 0), 3 * kRing + 5, 3);
}

TEST_F(ShmStreamTest, SendAcceptsOnlyWhatFits) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  std::vector<std::byte> big(kRing * 2, std::byte{7});
  auto n = g.ep(0, 1)->send(big.data(), big.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, kRing);  // exactly the ring, no more
  n = g.ep(0, 1)->send(big.data(), 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  std::vector<std::byte> out(100);
  n = g.ep(1, 0)->recv(out.data(), 100);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 100u);
  n = g.ep(0, 1)->send(big.data(), big.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 100u);
  n = g.ep(0, 1)->send(big.data(), 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_F(ShmStreamTest, ChannelsAndPeersAreIndependent) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A", "A"}, 3, kRing, &g).ok());
  // Every (writer, reader, channel) gets its own marker; every receiver sees only its own.
  for (int w = 0; w < 3; ++w)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        if (w == r) continue;
        uint32_t v = static_cast<uint32_t>(w * 100 + r * 10 + c);
        auto n = g.ep(w, r, c)->send(&v, sizeof(v));
        ASSERT_TRUE(n.ok());
        ASSERT_EQ(*n, sizeof(v));
      }
  for (int w = 0; w < 3; ++w)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        if (w == r) continue;
        uint32_t v = 0;
        auto n = g.ep(r, w, c)->recv(&v, 8);
        ASSERT_TRUE(n.ok());
        ASSERT_EQ(*n, sizeof(v));
        EXPECT_EQ(v, static_cast<uint32_t>(w * 100 + r * 10 + c));
      }
}

TEST_F(ShmStreamTest, PeekAndConsume) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  Endpoint* tx = g.ep(0, 1);
  Endpoint* rx = g.ep(1, 0);

  auto v = rx->peek(100);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->empty());

  std::vector<std::byte> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = PatternByte(i, 9);
  ASSERT_EQ(*tx->send(data.data(), data.size()), data.size());

  v = rx->peek(0);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->empty());
  v = rx->peek(16);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 16u);
  EXPECT_EQ(std::memcmp(v->data(), data.data(), 16), 0);
  // Peek does not advance; consume advances by what is asked.
  v = rx->peek(1000);
  ASSERT_EQ(v->size(), 64u);
  rx->consume(10);
  v = rx->peek(1000);
  ASSERT_EQ(v->size(), 54u);
  EXPECT_EQ(std::memcmp(v->data(), data.data() + 10, 54), 0);
  // Consuming more than the last peek offered is clamped to it.
  v = rx->peek(4);
  rx->consume(1000);
  v = rx->peek(1000);
  ASSERT_EQ(v->size(), 50u);
  rx->consume(50);
  v = rx->peek(1000);
  EXPECT_TRUE(v->empty());
}

TEST_F(ShmStreamTest, PeekAtWrapPoint) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  Endpoint* tx = g.ep(0, 1);
  Endpoint* rx = g.ep(1, 0);
  std::vector<std::byte> buf(kRing);

  // 8-aligned read position 8 bytes before the wrap (the engine's case): the view is in place,
  // stops at the wrap point, and the rest follows in a second view.
  ASSERT_EQ(*tx->send(buf.data(), kRing - 8), kRing - 8);
  ASSERT_EQ(*rx->recv(buf.data(), kRing - 8), kRing - 8);
  std::vector<std::byte> d(24);
  for (size_t i = 0; i < d.size(); ++i) d[i] = PatternByte(i, 4);
  ASSERT_EQ(*tx->send(d.data(), d.size()), d.size());
  auto v = rx->peek(100);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 8u);
  EXPECT_EQ(std::memcmp(v->data(), d.data(), 8), 0);
  rx->consume(8);
  v = rx->peek(100);
  ASSERT_EQ(v->size(), 16u);
  EXPECT_EQ(std::memcmp(v->data(), d.data() + 8, 16), 0);
  rx->consume(16);

  // Odd read position 3 bytes before the wrap: peek still offers min(max, 8) bytes.
  ASSERT_EQ(*tx->send(buf.data(), kRing - 3 - 16), kRing - 19);
  ASSERT_EQ(*rx->recv(buf.data(), kRing - 19), kRing - 19);
  ASSERT_EQ(*tx->send(d.data(), 10), 10u);
  v = rx->peek(100);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 8u);
  EXPECT_EQ(std::memcmp(v->data(), d.data(), 8), 0);
  rx->consume(8);
  v = rx->peek(100);
  ASSERT_EQ(v->size(), 2u);
  EXPECT_EQ(std::memcmp(v->data(), d.data() + 8, 2), 0);
  rx->consume(2);

  // Fewer than 8 bytes across the wrap, and max below 8.
  ASSERT_EQ(*tx->send(buf.data(), kRing - 9), kRing - 9);  // read position 7 -> kRing - 2
  ASSERT_EQ(*rx->recv(buf.data(), kRing - 9), kRing - 9);
  ASSERT_EQ(*tx->send(d.data(), 5), 5u);
  v = rx->peek(4);
  ASSERT_EQ(v->size(), 4u);
  EXPECT_EQ(std::memcmp(v->data(), d.data(), 4), 0);
  v = rx->peek(100);
  ASSERT_EQ(v->size(), 5u);
  EXPECT_EQ(std::memcmp(v->data(), d.data(), 5), 0);
  rx->consume(5);
}

// Moves `total` bytes a -> b with one thread per side; each side sleeps in poll() whenever it
// cannot progress, as the engine does. A lost wake-up shows as a poll() timeout.
void ConcurrentTransfer(Group& g, int from, int to, uint64_t total, size_t chunk,
                        std::atomic<int>* timeouts, std::atomic<int>* sleeps) {
  Endpoint* tx = g.ep(from, to);
  Endpoint* rx = g.ep(to, from);
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    std::vector<std::byte> buf(chunk);
    uint64_t sent = 0;
    auto deadline = steady_clock::now() + std::chrono::seconds(60);
    while (sent < total && !failed && steady_clock::now() < deadline) {
      size_t want = std::min<uint64_t>(chunk, total - sent);
      for (size_t i = 0; i < want; ++i) buf[i] = PatternByte(sent + i, 77);
      size_t off = 0;
      while (off < want && !failed && steady_clock::now() < deadline) {
        auto n = tx->send(buf.data() + off, want - off);
        if (!n.ok()) {
          failed = true;
          break;
        }
        off += *n;
        if (*n == 0) {
          ++*sleeps;
          if (Sleep(tx, g.bells[static_cast<size_t>(from)], true, false, 5000) == 0) ++*timeouts;
        }
      }
      sent += off;
    }
    if (sent != total) failed = true;
  });
  std::vector<std::byte> buf(chunk + 13);
  uint64_t received = 0;
  bool bad = false;
  auto deadline = steady_clock::now() + std::chrono::seconds(60);
  while (received < total && !failed && steady_clock::now() < deadline) {
    auto n = rx->recv(buf.data(), buf.size());
    if (!n.ok()) {
      failed = true;
      break;
    }
    for (size_t i = 0; i < *n && !bad; ++i) bad = buf[i] != PatternByte(received + i, 77);
    if (bad) {
      failed = true;
      break;
    }
    received += *n;
    if (*n == 0) {
      ++*sleeps;
      if (Sleep(rx, g.bells[static_cast<size_t>(to)], false, true, 5000) == 0) ++*timeouts;
    }
  }
  writer.join();
  EXPECT_FALSE(bad) << "corrupt byte near offset " << received;
  EXPECT_FALSE(failed);
  EXPECT_EQ(received, total);
}

TEST_F(ShmStreamTest, SixtyFourMiBThroughSmallRingWithSleepingSides) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  std::atomic<int> timeouts{0}, sleeps{0};
  // Chunks larger and smaller than the ring, odd-sized so the wrap moves.
  ConcurrentTransfer(g, 0, 1, uint64_t{64} << 20, 100003, &timeouts, &sleeps);
  EXPECT_EQ(timeouts.load(), 0) << "a sleeping side was not woken (lost wake-up)";
  EXPECT_GT(sleeps.load(), 0) << "the sleeping path was exercised";
  ConcurrentTransfer(g, 1, 0, uint64_t{8} << 20, 4099, &timeouts, &sleeps);
  EXPECT_EQ(timeouts.load(), 0);
}

// Every ordered pair of `n` ranks streams `total` bytes on `channel` at once, each stream with its
// own writer and reader threads, spinning with yields (arm/disarm of one endpoint are not shared
// across threads). Returns the number of streams that failed.
int AllPairsConcurrently(Group& g, int n, int channel, uint64_t total) {
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      Endpoint* tx = g.ep(a, b, channel);
      Endpoint* rx = g.ep(b, a, channel);
      threads.emplace_back([&, a, b, tx] {
        std::vector<std::byte> buf(7777);
        uint64_t sent = 0;
        auto deadline = steady_clock::now() + std::chrono::seconds(60);
        while (sent < total && steady_clock::now() < deadline) {
          size_t want = std::min<uint64_t>(buf.size(), total - sent);
          for (size_t i = 0; i < want; ++i) buf[i] = PatternByte(sent + i, uint64_t(a * n + b));
          auto k = tx->send(buf.data(), want);
          if (!k.ok()) break;
          sent += *k;
          if (*k == 0) std::this_thread::yield();
        }
        if (sent != total) ++errors;
      });
      threads.emplace_back([&, a, b, rx] {
        std::vector<std::byte> buf(9001);
        uint64_t got = 0;
        auto deadline = steady_clock::now() + std::chrono::seconds(60);
        while (got < total && steady_clock::now() < deadline) {
          auto k = rx->recv(buf.data(), buf.size());
          if (!k.ok()) break;
          for (size_t i = 0; i < *k; ++i)
            if (buf[i] != PatternByte(got + i, uint64_t(a * n + b))) {
              ++errors;
              return;
            }
          got += *k;
          if (*k == 0) std::this_thread::yield();
        }
        if (got != total) ++errors;
      });
    }
  for (auto& t : threads) t.join();
  return errors.load();
}

TEST_F(ShmStreamTest, BothDirectionsConcurrentlyOnManyChannels) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A", "A"}, 2, kRing, &g).ok());
  EXPECT_EQ(AllPairsConcurrently(g, 3, 1, 8 << 20), 0);
}

TEST_F(ShmStreamTest, MinimumRingsCarryOddSizesBothWays) {
  // Free space for minimum rings only: every ring claims 1 KiB, so data wraps constantly.
  shm::SetShmFreeBytesForTesting(static_cast<int64_t>(3 * shm::MinimumSegmentBytes(3, 2)));
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A", "A"}, 2, 1 << 20, &g).ok());
  for (auto& b : g.blobs) EXPECT_EQ(shm::DecodeBlob(b).ring_bytes, shm::kMinRingBytes);
  PumpOddSizes(g.ep(0, 2, 1), g.ep(2, 0, 1), 200000, 11);
  PumpOddSizes(g.ep(2, 0, 1), g.ep(0, 2, 1), 200000, 12);
  std::vector<std::byte> big(8192);
  auto n = g.ep(1, 0, 0)->send(big.data(), big.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, shm::kMinRingBytes);
}

TEST_F(ShmStreamTest, RingsClaimedConcurrentlyFromSharedArenas) {
  // Arenas sized by free space (rings of 32 KiB): 3 writer threads claim from each reader's arena
  // at once, on both channels.
  const uint64_t seg = shm::MinimumSegmentBytes(4, 2) + 3 * (64 << 10);
  shm::SetShmFreeBytesForTesting(static_cast<int64_t>(4 * seg));
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A", "A", "A"}, 2, 1 << 20, &g).ok());
  EXPECT_EQ(AllPairsConcurrently(g, 4, 0, 2 << 20), 0);
  EXPECT_EQ(AllPairsConcurrently(g, 4, 1, 2 << 20), 0);
}

TEST_F(ShmStreamTest, SleepingReaderIsWokenByWriter) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  Endpoint* rx = g.ep(1, 0);
  std::vector<pollfd> fds;
  ASSERT_FALSE(rx->arm(false, true, fds)) << "empty ring: nothing to do";
  rx->disarm(fds);

  Endpoint* tx = g.ep(0, 1);
  // Causality, not durations: the writer writes once the reader sleeps in poll(), and poll() must
  // return after the write began (it slept until then).
  const pid_t sleeper = ThisThreadId();
  bool was_asleep = false;
  std::atomic<int64_t> sent_at{0};
  std::thread writer([&] {
    was_asleep = WaitUntilBlockedIn(sleeper, kPollSyscalls);
    sent_at = steady_clock::now().time_since_epoch().count();
    uint64_t v = 42;
    (void)tx->send(&v, sizeof(v));
  });
  std::vector<pollfd> p{pollfd{g.bells[1].fd(), POLLIN, 0}};
  ASSERT_FALSE(rx->arm(false, true, p));
  int rc = poll(p.data(), p.size(), 30000);
  int64_t woke_at = steady_clock::now().time_since_epoch().count();
  rx->disarm(p);
  writer.join();
  EXPECT_TRUE(was_asleep) << "the reader never slept in poll()";
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(p[0].revents & POLLIN) << "the doorbell rang";
  EXPECT_GE(woke_at, sent_at.load()) << "poll() returned before anything was written";
  g.bells[1].drain();
  uint64_t v = 0;
  EXPECT_EQ(*rx->recv(&v, sizeof(v)), sizeof(v));
  EXPECT_EQ(v, 42u);

  // With bytes already there, arm() reports progress instead of letting the engine sleep.
  ASSERT_EQ(*tx->send(&v, sizeof(v)), sizeof(v));
  std::vector<pollfd> q;
  EXPECT_TRUE(rx->arm(false, true, q));
  rx->disarm(q);
}

TEST_F(ShmStreamTest, SleepingWriterIsWokenByReader) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  Endpoint* tx = g.ep(0, 1);
  std::vector<std::byte> buf(kRing);
  ASSERT_EQ(*tx->send(buf.data(), buf.size()), kRing);
  std::vector<pollfd> fds;
  ASSERT_FALSE(tx->arm(true, false, fds)) << "full ring: nothing to do";
  tx->disarm(fds);

  Endpoint* rx = g.ep(1, 0);
  // The reader reads once the writer sleeps in poll() on the full ring.
  const pid_t sleeper = ThisThreadId();
  bool was_asleep = false;
  std::thread reader([&] {
    was_asleep = WaitUntilBlockedIn(sleeper, kPollSyscalls);
    std::vector<std::byte> b(1000);
    (void)rx->recv(b.data(), b.size());
  });
  std::vector<pollfd> p{pollfd{g.bells[0].fd(), POLLIN, 0}};
  ASSERT_FALSE(tx->arm(true, false, p));
  int rc = poll(p.data(), p.size(), 30000);  // 0 (a failure) only if the reader never rang
  tx->disarm(p);
  reader.join();
  EXPECT_TRUE(was_asleep) << "the writer never slept in poll()";
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(p[0].revents & POLLIN);
  g.bells[0].drain();
  EXPECT_EQ(*tx->send(buf.data(), buf.size()), 1000u);
}

TEST_F(ShmStreamTest, NoRingWithoutSleeper) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  uint64_t v = 1;
  ASSERT_EQ(*g.ep(0, 1)->send(&v, sizeof(v)), sizeof(v));
  ASSERT_EQ(*g.ep(1, 0)->recv(&v, sizeof(v)), sizeof(v));
  // Nobody was armed: no doorbell traffic (a ring per message would cost a syscall each).
  pollfd p[2] = {{g.bells[0].fd(), POLLIN, 0}, {g.bells[1].fd(), POLLIN, 0}};
  EXPECT_EQ(poll(p, 2, 0), 0);
}

TEST_F(ShmStreamTest, Describe) {
  Group g;
  ASSERT_TRUE(BuildGroup({"A", "A"}, 1, kRing, &g).ok());
  std::string d = g.ep(0, 1)->describe();
  EXPECT_NE(d.find("shm to rank 1"), std::string::npos) << d;
  EXPECT_NE(d.find("pid " + std::to_string(getpid())), std::string::npos) << d;
}

}  // namespace
}  // namespace braid::shm_test
