// The emulated device (device/cpu/emulated_device.h): the CPU implementation of the device
// runtime that CI runs in place of a GPU. Classification, copies, streams run in FIFO order,
// write/wait of host-mapped flags, the peer reduce, and its error paths.
#include "device/cpu/emulated_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

using braid::device::EmulatedDevice;
using braid::device::FlagReached;
using braid::device::MemoryKind;
using braid::device::StreamHandle;

namespace {

class EmulatedDeviceTest : public ::testing::TestWithParam<EmulatedDevice::Mode> {
 protected:
  EmulatedDevice dev_{GetParam()};
};

TEST_P(EmulatedDeviceTest, ClassifiesItsAllocationsAndNothingElse) {
  auto d = dev_.allocDevice(1000);
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto h = dev_.allocHostMapped(64);
  ASSERT_TRUE(h.ok());
  std::vector<char> foreign(100);

  auto c = dev_.classify(static_cast<char*>(*d) + 999);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, MemoryKind::kDevice);
  EXPECT_EQ(c->device, 0);
  EXPECT_EQ(c->base, *d);
  EXPECT_TRUE(c->covers(static_cast<char*>(*d) + 10, c->size - 10));
  EXPECT_FALSE(c->covers(static_cast<char*>(*d) + 10, c->size - 9));
  EXPECT_TRUE(c->onDevice());

  c = dev_.classify(*h);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, MemoryKind::kPinnedHost);
  EXPECT_FALSE(c->onDevice());

  c = dev_.classify(foreign.data());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, MemoryKind::kHost);
  EXPECT_EQ(c->base, nullptr);

  // Device memory is separate from its host view exactly in kSeparate mode.
  auto view = dev_.hostView(*d, 1000);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(*view == *d, GetParam() == EmulatedDevice::Mode::kHostMemory);
  EXPECT_EQ(dev_.deviceMemoryHostAccessible(), GetParam() == EmulatedDevice::Mode::kHostMemory);

  EXPECT_EQ(dev_.deviceAllocations(), 1u);
  EXPECT_TRUE(dev_.freeDevice(*d).ok());
  EXPECT_EQ(dev_.deviceAllocations(), 0u);
  EXPECT_EQ(dev_.classify(*d)->kind, MemoryKind::kHost);
  EXPECT_FALSE(dev_.freeDevice(*d).ok());  // twice
  EXPECT_FALSE(dev_.freeDevice(*h).ok());  // the wrong kind
  EXPECT_TRUE(dev_.freeHostMapped(*h).ok());
}

TEST_P(EmulatedDeviceTest, CopiesRoundTripBitExact) {
  const size_t n = 12345;
  std::vector<unsigned char> src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  void* a = *dev_.allocDevice(n);
  void* b = *dev_.allocDevice(n);
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(dev_.copyAsync(a, src.data(), n, *s).ok());   // host -> device
  ASSERT_TRUE(dev_.copyAsync(b, a, n, *s).ok());            // device -> device
  ASSERT_TRUE(dev_.copyAsync(back.data(), b, n, *s).ok());  // device -> host
  ASSERT_TRUE(dev_.synchronize(*s).ok());
  EXPECT_EQ(std::memcmp(src.data(), back.data(), n), 0);
  // A copy that runs past the allocation is refused when queued, not when it runs.
  const size_t size = dev_.classify(a)->size;
  auto st = dev_.copyAsync(static_cast<char*>(a) + 1, src.data(), size, *s);
  EXPECT_EQ(st.cls(), braid::ErrorClass::kInvalidArgument);
  EXPECT_NE(st.message().find("run past the end"), std::string::npos) << st.message();
  EXPECT_TRUE(dev_.synchronize(*s).ok());
  EXPECT_TRUE(dev_.destroyStream(*s).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

TEST_P(EmulatedDeviceTest, StreamRunsItsWorkInOrder) {
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  void* d = *dev_.allocDevice(sizeof(int));
  std::vector<int> order;
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i) {
    // A copy between host functions: it sees the value the previous function wrote.
    ASSERT_TRUE(dev_.launchHostFunction(*s, [&, i] { order.push_back(i); }).ok());
    static int value;
    ASSERT_TRUE(dev_.launchHostFunction(*s, [i] { value = i; }).ok());
    ASSERT_TRUE(dev_.copyAsync(d, &value, sizeof(int), *s).ok());
    ASSERT_TRUE(
        dev_.launchHostFunction(
                *s, [&, d] { seen.push_back(*static_cast<int*>(*dev_.hostView(d, sizeof(int)))); })
            .ok());
  }
  ASSERT_TRUE(dev_.synchronize(*s).ok());
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(dev_.destroyStream(*s).ok());
  EXPECT_TRUE(dev_.freeDevice(d).ok());
}

TEST_P(EmulatedDeviceTest, WaitValueBlocksTheStreamUntilTheFlagIsWritten) {
  auto flags = static_cast<uint32_t*>(*dev_.allocHostMapped(2 * sizeof(uint32_t)));
  uint32_t* started = &flags[0];
  uint32_t* go = &flags[1];
  auto a = dev_.createStream();
  auto b = dev_.createStream();
  ASSERT_TRUE(a.ok() && b.ok());
  std::atomic<int> payload{0};
  std::atomic<int> marker{-1};
  ASSERT_TRUE(dev_.writeValue32(*a, started, 1).ok());
  ASSERT_TRUE(dev_.waitValue32(*a, go, 7).ok());
  ASSERT_TRUE(dev_.launchHostFunction(*a, [&] { marker = payload.load(); }).ok());
  // Stream a is behind its wait once it wrote `started`; nothing releases it yet.
  ASSERT_TRUE(
      dev_.hostWaitFlag(started, 1, std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  EXPECT_EQ(marker.load(), -1);
  // A smaller value does not release it (GEQ); stream b's write of 7 does, after its payload.
  dev_.hostWriteFlag(go, 6);
  ASSERT_TRUE(dev_.launchHostFunction(*b, [&] { payload = 42; }).ok());
  ASSERT_TRUE(dev_.writeValue32(*b, go, 7).ok());
  ASSERT_TRUE(dev_.synchronize(*a).ok());
  EXPECT_EQ(marker.load(), 42);
  // The host waits sleep until a deadline.
  EXPECT_FALSE(
      dev_.hostWaitFlag(go, 8, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
  EXPECT_TRUE(dev_.destroyStream(*a).ok());
  EXPECT_TRUE(dev_.destroyStream(*b).ok());
  EXPECT_TRUE(dev_.freeHostMapped(flags).ok());
}

TEST_P(EmulatedDeviceTest, DefaultStreamAndBadHandles) {
  int x = 0;
  ASSERT_TRUE(dev_.launchHostFunction(nullptr, [&] { x = 5; }).ok());
  ASSERT_TRUE(dev_.synchronize(nullptr).ok());
  EXPECT_EQ(x, 5);
  EXPECT_TRUE(dev_.checkStream(nullptr).ok());
  int not_a_stream;
  auto st = dev_.checkStream(&not_a_stream);
  EXPECT_EQ(st.cls(), braid::ErrorClass::kInvalidArgument);
  EXPECT_NE(st.message().find("not a live stream"), std::string::npos) << st.message();
  EXPECT_FALSE(dev_.launchHostFunction(&not_a_stream, [] {}).ok());
  EXPECT_FALSE(dev_.destroyStream(nullptr).ok());
  // Flags must be host-mapped memory.
  uint32_t plain = 0;
  EXPECT_FALSE(dev_.writeValue32(nullptr, &plain, 1).ok());
  EXPECT_FALSE(dev_.waitValue32(nullptr, &plain, 1).ok());
}

TEST_P(EmulatedDeviceTest, DestroyingAStreamStopsAPendingWait) {
  auto flag = static_cast<uint32_t*>(*dev_.allocHostMapped(sizeof(uint32_t)));
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  bool ran = false;
  ASSERT_TRUE(dev_.waitValue32(*s, flag, 1).ok());
  ASSERT_TRUE(dev_.launchHostFunction(*s, [&] { ran = true; }).ok());
  EXPECT_TRUE(dev_.destroyStream(*s).ok());  // returns: the wait fails, the rest still runs
  EXPECT_TRUE(ran);
  EXPECT_TRUE(dev_.freeHostMapped(flag).ok());
}

// Host-mapped memory that a queued op still uses (a wait on a paused stream here) is not freed:
// the free is refused and counted, and the op still reads live memory. Once the op ran, the free
// succeeds. A paused stream does not see its flag until resumed.
TEST_P(EmulatedDeviceTest, AFreeUnderAQueuedOpIsRefusedAndCounted) {
  auto flag = static_cast<uint32_t*>(*dev_.allocHostMapped(sizeof(uint32_t)));
  auto data = static_cast<uint32_t*>(*dev_.allocHostMapped(64));
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(dev_.pauseStream(*s).ok());
  ASSERT_TRUE(dev_.waitValue32(*s, flag, 1).ok());
  ASSERT_TRUE(dev_.writeValue32(*s, data, 9).ok());
  dev_.hostWriteFlag(flag, 1);
  braid::Status refused = dev_.freeHostMapped(flag);
  EXPECT_EQ(refused.cls(), braid::ErrorClass::kInvalidUsage) << refused.message();
  EXPECT_NE(refused.message().find("queued stream operations"), std::string::npos);
  EXPECT_FALSE(dev_.freeHostMapped(data).ok());
  EXPECT_EQ(dev_.unsafeFrees(), 2u);
  EXPECT_EQ(data[0], 0u);  // paused: nothing ran
  ASSERT_TRUE(dev_.resumeStream(*s).ok());
  ASSERT_TRUE(dev_.synchronize(*s).ok());
  EXPECT_EQ(data[0], 9u);
  EXPECT_TRUE(dev_.freeHostMapped(flag).ok());
  EXPECT_TRUE(dev_.freeHostMapped(data).ok());
  EXPECT_EQ(dev_.unsafeFrees(), 2u);
  EXPECT_FALSE(dev_.pauseStream(reinterpret_cast<braid::device::StreamHandle>(0x10)).ok());
  EXPECT_TRUE(dev_.destroyStream(*s).ok());
}

// A stream destroyed while paused is not held: its work runs (a pending wait fails), no hang.
TEST_P(EmulatedDeviceTest, DestroyingAPausedStreamDoesNotHang) {
  auto flag = static_cast<uint32_t*>(*dev_.allocHostMapped(sizeof(uint32_t)));
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  bool ran = false;
  ASSERT_TRUE(dev_.pauseStream(*s).ok());
  ASSERT_TRUE(dev_.waitValue32(*s, flag, 1).ok());
  ASSERT_TRUE(dev_.launchHostFunction(*s, [&] { ran = true; }).ok());
  EXPECT_TRUE(dev_.destroyStream(*s).ok());
  EXPECT_TRUE(ran);
  EXPECT_TRUE(dev_.freeHostMapped(flag).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, EmulatedDeviceTest,
                         ::testing::Values(EmulatedDevice::Mode::kSeparate,
                                           EmulatedDevice::Mode::kHostMemory),
                         [](const auto& info) {
                           return info.param == EmulatedDevice::Mode::kSeparate ? "Separate"
                                                                                : "HostMemory";
                         });

// The peer reduce (the kernel the intra-node device collectives queue): sources reduced in order
// into every destination; pairwise, each source copied into its destination (all-to-all); nothing
// when `skip` holds the skip value; and every malformed shape refused when queued.
TEST_P(EmulatedDeviceTest, PeerReduceReducesOrCopiesPairwiseAndRefusesBadShapes) {
  const size_t n = 1001;
  std::vector<int32_t> x(n), y(n), back(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<int32_t>(i * 3 + 1);
    y[i] = -static_cast<int32_t>(i * 7);
  }
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  void* c = *dev_.allocDevice(n * 4);
  void* d = *dev_.allocDevice(n * 4);
  auto* skip = static_cast<uint32_t*>(*dev_.allocHostMapped(4));
  *skip = 0;
  auto s = dev_.createStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(dev_.copyAsync(a, x.data(), n * 4, *s).ok());
  ASSERT_TRUE(dev_.copyAsync(b, y.data(), n * 4, *s).ok());
  const auto read = [&](const void* p) {
    EXPECT_TRUE(dev_.copyAsync(back.data(), p, n * 4, *s).ok());
    EXPECT_TRUE(dev_.synchronize(*s).ok());
    return back;
  };
  braid::device::PeerReduce r;
  r.type = braid::DataType::kInt32;
  r.op = braid::ReduceOp::kSum;
  r.src = {a, b};
  r.dst = {c, d};
  r.count = n;
  r.skip = skip;
  r.skip_value = 1;
  ASSERT_TRUE(dev_.launchPeerReduce(r, *s).ok());
  std::vector<int32_t> sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = x[i] + y[i];
  EXPECT_EQ(read(c), sum);
  EXPECT_EQ(read(d), sum);
  braid::device::PeerReduce pairs = r;
  pairs.pairwise = true;
  ASSERT_TRUE(dev_.launchPeerReduce(pairs, *s).ok());
  EXPECT_EQ(read(c), x);
  EXPECT_EQ(read(d), y);
  // Skipped: the ranks disagreed; nothing is written.
  *skip = 1;
  pairs.src = {b, a};
  ASSERT_TRUE(dev_.launchPeerReduce(pairs, *s).ok());
  EXPECT_EQ(read(c), x);
  *skip = 0;
  // Malformed: pairwise with unequal counts or a division, no skip word, too many sources.
  braid::device::PeerReduce bad = pairs;
  bad.dst = {c};
  EXPECT_EQ(dev_.launchPeerReduce(bad, *s).cls(), braid::ErrorClass::kInvalidArgument);
  bad = pairs;
  bad.divide_by = 2;
  EXPECT_EQ(dev_.launchPeerReduce(bad, *s).cls(), braid::ErrorClass::kInvalidArgument);
  bad = r;
  bad.skip = nullptr;
  EXPECT_EQ(dev_.launchPeerReduce(bad, *s).cls(), braid::ErrorClass::kInvalidArgument);
  bad = r;
  bad.src.assign(braid::device::kMaxPeerRanks + 1, a);
  EXPECT_EQ(dev_.launchPeerReduce(bad, *s).cls(), braid::ErrorClass::kInvalidArgument);
  bad = r;
  bad.src.clear();
  EXPECT_EQ(dev_.launchPeerReduce(bad, *s).cls(), braid::ErrorClass::kInvalidArgument);
  EXPECT_TRUE(dev_.synchronize(*s).ok());
  EXPECT_TRUE(dev_.destroyStream(*s).ok());
  for (void* p : {a, b, c, d}) EXPECT_TRUE(dev_.freeDevice(p).ok());
  EXPECT_TRUE(dev_.freeHostMapped(skip).ok());
}

TEST(FlagReached, ComparesCyclicallyAsCudaGeq) {
  EXPECT_TRUE(FlagReached(5, 5));
  EXPECT_TRUE(FlagReached(6, 5));
  EXPECT_FALSE(FlagReached(4, 5));
  EXPECT_TRUE(FlagReached(0, 0xffffffffu));   // wrapped past
  EXPECT_FALSE(FlagReached(0xffffffffu, 0));  // not yet wrapped
}

}  // namespace
