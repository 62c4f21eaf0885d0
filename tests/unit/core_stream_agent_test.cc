// The stream agent (core/runtime/stream_agent.h) on the emulated device, without a communicator:
// calls whose `run` is a host transform stand in for collectives. Ordering on the stream (a call
// starts after the stream's earlier work and the stream's later work sees its result), staging of
// device buffers, calls ordered on several streams, flag slot reuse, and the failure paths: a
// failing call, abort, bad arguments; each with streams of their own and on one hardware queue.
// Every check is bit-exact; nothing sleeps for ordering.
#include "core/runtime/stream_agent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "device/cpu/emulated_device.h"

using braid::HostPointers;
using braid::Status;
using braid::StreamAgent;
using braid::StreamBuffer;
using braid::StreamCall;
using braid::device::EmulatedDevice;
using braid::device::StreamHandle;

namespace {

// The device's memory mode, and whether its streams share one hardware queue (as a GPU's do
// under CUDA_DEVICE_MAX_CONNECTIONS=1: a wait on one stream holds up the others; an agent that
// queued its own staging copies deadlocked there, as it would on such a GPU).
struct AgentParam {
  EmulatedDevice::Mode mode;
  bool single_queue;
};

// A gate on a stream: the stream's later work waits until the test opens it.
struct StreamGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Hold(EmulatedDevice& dev, StreamHandle s) {
    ASSERT_TRUE(dev.launchHostFunction(s,
                                       [this] {
                                         std::unique_lock<std::mutex> lock(mu);
                                         cv.wait(lock, [&] { return open; });
                                       })
                    .ok());
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

class StreamAgentTest : public ::testing::TestWithParam<AgentParam> {
 protected:
  StreamBuffer Buffer(void* p, size_t bytes, bool read, bool written) {
    StreamBuffer b;
    b.ptr = p;
    b.bytes = bytes;
    b.read = read;
    b.written = written;
    b.info = *dev_.classify(p);
    return b;
  }
  uint32_t* At(void* device, size_t bytes) {
    return static_cast<uint32_t*>(*dev_.hostView(device, bytes));
  }
  // The "kernel" that sets n words of `buf` to `v`, queued on `s`.
  void FillOnStream(StreamHandle s, void* buf, size_t n, uint32_t v) {
    ASSERT_TRUE(dev_.launchHostFunction(s,
                                        [=, this] {
                                          uint32_t* p = At(buf, n * 4);
                                          for (size_t i = 0; i < n; ++i) p[i] = v;
                                        })
                    .ok());
  }
  // out[i] = in[i] * 3 + salt, on the host addresses the agent gives; checks that device memory
  // reaches it only as staged copies when the device is separate.
  StreamCall Transform(StreamHandle s, void* in, void* out, size_t n, uint32_t salt) {
    StreamCall c;
    c.what = "transform";
    c.streams = {s};
    c.buffers = {Buffer(in, n * 4, true, false), Buffer(out, n * 4, false, true)};
    const bool separate = GetParam().mode == EmulatedDevice::Mode::kSeparate;
    c.run = [=](const HostPointers& h) -> Status {
      auto* src = static_cast<const uint32_t*>(h(in));
      auto* dst = static_cast<uint32_t*>(h(out));
      if (separate && (static_cast<const void*>(src) == in || static_cast<void*>(dst) == out))
        return braid::InternalError("device memory reached the call unstaged");
      for (size_t i = 0; i < n; ++i) dst[i] = src[i] * 3 + salt;
      return Status::Ok();
    };
    return c;
  }

  // Transform in pieces of `piece_words` words (StreamCall::pieces): what an element-wise
  // collective is cut into by the NCCL shim. Piece k transforms words [k * piece_words, ...).
  StreamCall TransformInPieces(StreamHandle s, void* in, void* out, size_t n, uint32_t salt,
                               size_t piece_words,
                               std::function<Status(size_t)> on_piece = nullptr) {
    StreamCall c = Transform(s, in, out, n, salt);
    c.run = [](const HostPointers&) { return braid::InternalError("a call in pieces ran whole"); };
    c.pieces = (n + piece_words - 1) / piece_words;
    c.piece_bytes = piece_words * 4;
    const bool separate = GetParam().mode == EmulatedDevice::Mode::kSeparate;
    c.run_piece = [=](const HostPointers& h, size_t k) -> Status {
      if (on_piece) BRAID_RETURN_IF_ERROR(on_piece(k));
      const size_t first = k * piece_words;
      const size_t count = std::min(piece_words, n - first);
      const void* in_k = static_cast<const char*>(in) + first * 4;
      void* out_k = static_cast<char*>(out) + first * 4;
      auto* src = static_cast<const uint32_t*>(h(in_k));
      auto* dst = static_cast<uint32_t*>(h(out_k));
      if (separate && (static_cast<const void*>(src) == in_k || static_cast<void*>(dst) == out_k))
        return braid::InternalError("device memory reached the piece unstaged");
      for (size_t i = 0; i < count; ++i) dst[i] = src[i] * 3 + salt;
      return Status::Ok();
    };
    return c;
  }

  // No test frees host-mapped memory (a staging buffer, a flag) that a queued stream operation
  // still uses.
  void TearDown() override { EXPECT_EQ(dev_.unsafeFrees(), 0u); }

  EmulatedDevice dev_{GetParam().mode, EmulatedDevice::kDefaultFlagPoll, GetParam().single_queue};
  braid::StreamFlagPool pool_{&dev_};
};

TEST_P(StreamAgentTest, CallsAreOrderedOnTheStream) {
  const size_t n = 1031;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  std::atomic<int> bad{0};
  {
    StreamAgent agent(&dev_, "test", &pool_);
    std::mt19937 rng(7);
    // The stream is held until every call is queued, so all 300 hold a slot at once.
    StreamGate gate;
    gate.Hold(dev_, s);
    for (uint32_t rep = 0; rep < 300; ++rep) {
      // The "kernel" that writes the input, late by a random few microseconds.
      const int delay_us = static_cast<int>(rng() % 30);
      ASSERT_TRUE(dev_.launchHostFunction(s,
                                          [=, this] {
                                            std::this_thread::sleep_for(
                                                std::chrono::microseconds(delay_us));
                                            uint32_t* p = At(in, n * 4);
                                            for (size_t i = 0; i < n; ++i)
                                              p[i] = rep * 1000003u + static_cast<uint32_t>(i);
                                          })
                      .ok());
      ASSERT_TRUE(agent.submit(Transform(s, in, out, n, rep)).ok());
      // The "kernel" that reads the result.
      ASSERT_TRUE(dev_.launchHostFunction(
                          s,
                          [=, this, &bad] {
                            const uint32_t* p = At(out, n * 4);
                            for (size_t i = 0; i < n; ++i)
                              if (p[i] != (rep * 1000003u + static_cast<uint32_t>(i)) * 3 + rep) {
                                ++bad;
                                return;
                              }
                          })
                      .ok());
    }
    gate.Open();
    EXPECT_TRUE(agent.drain().ok()) << agent.error().message();
    ASSERT_TRUE(dev_.synchronize(s).ok());
    // 300 calls queued at once held 300 slots; one at a time, they reuse the free ones.
    const size_t held = pool_.allocated();
    EXPECT_GE(held, 300u);
    for (uint32_t k = 0; k < 200; ++k) {
      ASSERT_TRUE(agent.submit(Transform(s, in, out, n, k)).ok());
      ASSERT_TRUE(agent.drain().ok());  // the agent has put the slot back (after writing `done`)
      ASSERT_TRUE(dev_.synchronize(s).ok());
    }
    EXPECT_EQ(pool_.allocated(), held);
  }
  // Every slot is back, the staging buffers' flag words too (kept while the agent lives).
  EXPECT_EQ(pool_.available(), pool_.allocated());
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

TEST_P(StreamAgentTest, InPlaceAndDestroyWaitsForQueuedCalls) {
  const size_t n = 100;
  void* buf = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  ASSERT_TRUE(dev_.launchHostFunction(s,
                                      [=, this] {
                                        uint32_t* p = At(buf, n * 4);
                                        for (size_t i = 0; i < n; ++i)
                                          p[i] = static_cast<uint32_t>(i);
                                      })
                  .ok());
  {
    StreamAgent agent(&dev_, "test", &pool_);
    for (uint32_t k = 0; k < 5; ++k) ASSERT_TRUE(agent.submit(Transform(s, buf, buf, n, k)).ok());
  }  // no drain: the destructor waits
  ASSERT_TRUE(dev_.synchronize(s).ok());
  const uint32_t* p = At(buf, n * 4);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    for (uint32_t k = 0; k < 5; ++k) v = v * 3 + k;
    ASSERT_EQ(p[i], v) << i;
  }
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(buf).ok());
}

TEST_P(StreamAgentTest, ACallOnTwoStreamsWaitsForBoth) {
  const size_t n = 64;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  StreamHandle s1 = *dev_.createStream();
  StreamHandle s2 = *dev_.createStream();
  FillOnStream(s1, a, n, 1);
  FillOnStream(s2, b, n, 2);
  StreamCall c;
  c.what = "pair";
  c.streams = {s1, s2};
  c.buffers = {Buffer(a, n * 4, true, true), Buffer(b, n * 4, true, true)};
  c.run = [=](const HostPointers& h) {
    auto* x = static_cast<uint32_t*>(h(a));
    auto* y = static_cast<uint32_t*>(h(b));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t t = x[i];
      x[i] = y[i] * 10;
      y[i] = t * 10;
    }
    return Status::Ok();
  };
  uint32_t after1 = 0, after2 = 0;
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent.submit(std::move(c)).ok());
    ASSERT_TRUE(dev_.launchHostFunction(s1, [&, this] { after1 = At(a, 4)[n - 1]; }).ok());
    ASSERT_TRUE(dev_.launchHostFunction(s2, [&, this] { after2 = At(b, 4)[0]; }).ok());
    ASSERT_TRUE(agent.drain().ok());
  }
  ASSERT_TRUE(dev_.synchronize(s1).ok());
  ASSERT_TRUE(dev_.synchronize(s2).ok());
  EXPECT_EQ(after1, 20u);
  EXPECT_EQ(after2, 10u);
  EXPECT_TRUE(dev_.destroyStream(s1).ok());
  EXPECT_TRUE(dev_.destroyStream(s2).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

// A call's second stream that gets to its wait only after the agent has ended (a GPU stream slow
// to get there): the flag it waits for must outlive the agent, which frees its staging buffers
// once their copies out ran. The flag used to sit in the staging buffer: freed under the wait
// (ASan saw it in CI on one hardware queue).
TEST_P(StreamAgentTest, ASecondStreamSlowToItsWaitOutlivesTheAgent) {
  const size_t n = 64;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  StreamHandle s1 = *dev_.createStream();
  StreamHandle s2 = *dev_.createStream();
  FillOnStream(s1, a, n, 3);
  StreamCall c;
  c.what = "pair";
  c.streams = {s1, s2};
  c.buffers = {Buffer(a, n * 4, true, true), Buffer(b, n * 4, false, true)};
  c.run = [=, this](const HostPointers& h) {
    auto* x = static_cast<uint32_t*>(h(a));
    auto* y = static_cast<uint32_t*>(h(b));
    for (size_t i = 0; i < n; ++i) y[i] = x[i] + 4;
    // Both streams wrote `ready`: s2 now sits in (or before) its wait for the call's end, and
    // stays there, blind to the flag, until resumed.
    return dev_.pauseStream(s2);
  };
  uint32_t after2 = 0;
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent.submit(std::move(c)).ok());
    ASSERT_TRUE(dev_.launchHostFunction(s2, [&, this] { after2 = At(b, 4)[n - 1]; }).ok());
    ASSERT_TRUE(agent.drain().ok());
  }  // the agent's end: s1 wrote the results back, so the staging buffer is freed
  EXPECT_EQ(dev_.unsafeFrees(), 0u);
  ASSERT_TRUE(dev_.resumeStream(s2).ok());
  ASSERT_TRUE(dev_.synchronize(s1).ok());
  ASSERT_TRUE(dev_.synchronize(s2).ok());
  EXPECT_EQ(after2, 7u);
  EXPECT_TRUE(dev_.destroyStream(s1).ok());
  EXPECT_TRUE(dev_.destroyStream(s2).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

// Polls (bounded) until a submit waits for a staging buffer: a state, not a time.
bool AwaitStagingWait(StreamAgent& agent) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (agent.stagingStats().waits == 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Past the staging cap, a call waits for the oldest call in flight to have its results copied
// back, then takes its buffer: one buffer for two calls, the first held back by its stream while
// the second is submitted. Both results bit-exact.
TEST_P(StreamAgentTest, PastTheStagingCapACallWaitsForTheOldest) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is staged";
  const size_t n = 1024;  // in + out: one 8 KiB staging buffer per call
  void* in = *dev_.allocDevice(n * 4);
  void* out1 = *dev_.allocDevice(n * 4);
  void* out2 = *dev_.allocDevice(n * 4);
  for (size_t i = 0; i < n; ++i) At(in, n * 4)[i] = static_cast<uint32_t>(i * 2654435761u);
  StreamHandle s = *dev_.createStream();
  StreamGate gate;
  gate.Hold(dev_, s);
  {
    StreamAgent agent(&dev_, "test", &pool_);
    agent.setStagingCap(8192, std::chrono::minutes(2));  // waits as long as it takes
    ASSERT_TRUE(agent.submit(Transform(s, in, out1, n, 1)).ok());
    Status second;
    std::thread t([&] { second = agent.submit(Transform(s, in, out2, n, 2)); });
    const bool waited = AwaitStagingWait(agent);
    gate.Open();
    t.join();
    ASSERT_TRUE(waited) << "the second call never waited for a staging buffer";
    ASSERT_TRUE(second.ok()) << second.message();
    ASSERT_TRUE(agent.drain().ok()) << agent.error().message();
    ASSERT_TRUE(dev_.synchronize(s).ok());
    EXPECT_EQ(agent.stagingStats().buffers, 1u);
    EXPECT_EQ(agent.stagingStats().bytes, 8192u);
    EXPECT_EQ(agent.stagingStats().waits, 1u);
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(i * 2654435761u);
    ASSERT_EQ(At(out1, n * 4)[i], x * 3 + 1) << i;
    ASSERT_EQ(At(out2, n * 4)[i], x * 3 + 2) << i;
  }
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  for (void* p : {in, out1, out2}) EXPECT_TRUE(dev_.freeDevice(p).ok());
}

// A call larger than the whole cap, with nothing in flight to wait for, takes a buffer past it;
// the next call reuses it.
TEST_P(StreamAgentTest, ACallLargerThanTheStagingCapTakesItAlone) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is staged";
  const size_t n = 1024;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  for (size_t i = 0; i < n; ++i) At(in, n * 4)[i] = static_cast<uint32_t>(i);
  StreamHandle s = *dev_.createStream();
  {
    StreamAgent agent(&dev_, "test", &pool_);
    agent.setStagingCap(4096);
    for (uint32_t salt = 0; salt < 2; ++salt) {
      ASSERT_TRUE(agent.submit(Transform(s, in, out, n, salt)).ok());
      ASSERT_TRUE(agent.drain().ok()) << agent.error().message();
      ASSERT_TRUE(dev_.synchronize(s).ok());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(At(out, n * 4)[i], i * 3 + salt) << i;
    }
    EXPECT_EQ(agent.stagingStats().buffers, 1u);
    EXPECT_EQ(agent.stagingStats().bytes, 8192u);
    EXPECT_EQ(agent.stagingStats().waits, 0u);
  }
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// The wait at the cap is bounded (ranks that call two communicators in different orders could
// otherwise wait on each other for good): past the bound a call allocates past the cap. The first
// call's stream stays held through the whole wait; both results bit-exact once it runs.
TEST_P(StreamAgentTest, ABoundedWaitAtTheStagingCapAllocatesPastIt) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is staged";
  const size_t n = 1024;
  void* in = *dev_.allocDevice(n * 4);
  void* out1 = *dev_.allocDevice(n * 4);
  void* out2 = *dev_.allocDevice(n * 4);
  for (size_t i = 0; i < n; ++i) At(in, n * 4)[i] = static_cast<uint32_t>(i + 5);
  StreamHandle s = *dev_.createStream();
  StreamGate gate;
  gate.Hold(dev_, s);
  {
    StreamAgent agent(&dev_, "test", &pool_);
    agent.setStagingCap(8192, std::chrono::milliseconds(20));
    ASSERT_TRUE(agent.submit(Transform(s, in, out1, n, 1)).ok());
    ASSERT_TRUE(agent.submit(Transform(s, in, out2, n, 2)).ok());  // waits 20 ms, then allocates
    EXPECT_EQ(agent.stagingStats().waits, 1u);
    EXPECT_EQ(agent.stagingStats().past_cap, 1u);
    EXPECT_EQ(agent.stagingStats().buffers, 2u);
    gate.Open();
    ASSERT_TRUE(agent.drain().ok()) << agent.error().message();
    ASSERT_TRUE(dev_.synchronize(s).ok());
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(i + 5);
    ASSERT_EQ(At(out1, n * 4)[i], x * 3 + 1) << i;
    ASSERT_EQ(At(out2, n * 4)[i], x * 3 + 2) << i;
  }
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  for (void* p : {in, out1, out2}) EXPECT_TRUE(dev_.freeDevice(p).ok());
}

// A free buffer far larger than a call stays for large calls while the cap lets a right-sized one
// be made (else after one large call every small call would share it, one at a time).
TEST_P(StreamAgentTest, ASmallCallKeepsOffALargeFreeStagingBuffer) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is staged";
  const size_t big = 16384, small = 1024;  // in + out: 128 KiB, then 8 KiB of staging
  void* in = *dev_.allocDevice(big * 4);
  void* out = *dev_.allocDevice(big * 4);
  for (size_t i = 0; i < big; ++i) At(in, big * 4)[i] = static_cast<uint32_t>(i);
  StreamHandle s = *dev_.createStream();
  {
    StreamAgent agent(&dev_, "test", &pool_);
    agent.setStagingCap(64 << 10, std::chrono::minutes(2));
    for (size_t count : {big, small, small}) {
      ASSERT_TRUE(agent.submit(Transform(s, in, out, count, 7)).ok());
      ASSERT_TRUE(agent.drain().ok()) << agent.error().message();
      ASSERT_TRUE(dev_.synchronize(s).ok());
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(At(out, big * 4)[i], i * 3 + 7) << i;
    }
    EXPECT_EQ(agent.stagingStats().buffers, 2u);  // 128 KiB (past the cap, alone) and 8 KiB
    EXPECT_EQ(agent.stagingStats().bytes, (128u << 10) + 8192u);
    EXPECT_EQ(agent.stagingStats().waits, 0u);
  }
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// An abort ends a submit waiting for a staging buffer (its stream held back for good): the call
// fails as aborted, naming the wait, and nothing hangs.
TEST_P(StreamAgentTest, AbortEndsAWaitForAStagingBuffer) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is staged";
  const size_t n = 1024;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  StreamGate gate;
  gate.Hold(dev_, s);
  {
    StreamAgent agent(&dev_, "test", &pool_);
    std::atomic<int> dropped{0};
    agent.setOnDroppedCall([&] { ++dropped; });
    agent.setStagingCap(8192, std::chrono::minutes(2));  // waits as long as it takes
    ASSERT_TRUE(agent.submit(Transform(s, in, out, n, 1)).ok());
    Status second;
    std::thread t([&] { second = agent.submit(Transform(s, in, out, n, 2)); });
    const bool waited = AwaitStagingWait(agent);
    agent.abort("the test aborts");
    t.join();
    EXPECT_TRUE(waited);
    EXPECT_EQ(dropped.load(), 0);  // the aborting caller handles the communicator
    EXPECT_EQ(second.cls(), braid::ErrorClass::kAborted) << second.message();
    EXPECT_NE(second.message().find("staging buffer"), std::string::npos) << second.message();
    EXPECT_NE(second.message().find("the test aborts"), std::string::npos) << second.message();
  }
  gate.Open();  // the stream runs on: the first call's `done` was written by the abort
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// Calls of one communicator on different streams keep their submission order for the data too
// (NCCL serialises a communicator's kernels): the second call, on a stream that is free, reads
// what the first, on a stream held back, writes; its copy in must wait for the first call's copy
// out.
TEST_P(StreamAgentTest, CallsOnTwoStreamsKeepTheirOrder) {
  const size_t n = 257;
  void* a = *dev_.allocDevice(n * 4);
  void* x = *dev_.allocDevice(n * 4);
  void* y = *dev_.allocDevice(n * 4);
  StreamHandle s1 = *dev_.createStream();
  StreamHandle s2 = *dev_.createStream();
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  ASSERT_TRUE(dev_.launchHostFunction(s1,
                                      [&, this] {
                                        std::unique_lock<std::mutex> lock(mu);
                                        cv.wait(lock, [&] { return open; });
                                        uint32_t* p = At(a, n * 4);
                                        for (size_t i = 0; i < n; ++i)
                                          p[i] = static_cast<uint32_t>(i) + 5;
                                      })
                  .ok());
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent.submit(Transform(s1, a, x, n, 1)).ok());  // x = a * 3 + 1, held back
    ASSERT_TRUE(agent.submit(Transform(s2, x, y, n, 2)).ok());  // y = x * 3 + 2
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
    ASSERT_TRUE(agent.drain().ok()) << agent.error().message();
  }
  ASSERT_TRUE(dev_.synchronize(s1).ok());
  ASSERT_TRUE(dev_.synchronize(s2).ok());
  const uint32_t* got = At(y, n * 4);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], ((static_cast<uint32_t>(i) + 5) * 3 + 1) * 3 + 2) << i;
  EXPECT_TRUE(dev_.destroyStream(s1).ok());
  EXPECT_TRUE(dev_.destroyStream(s2).ok());
  for (void* p : {a, x, y}) EXPECT_TRUE(dev_.freeDevice(p).ok());
}

TEST_P(StreamAgentTest, AFailedCallReleasesTheStreamAndIsKept) {
  const size_t n = 16;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  // Held until every call is queued, so that none has failed yet when the next is submitted.
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  ASSERT_TRUE(dev_.launchHostFunction(s,
                                      [&] {
                                        std::unique_lock<std::mutex> lock(mu);
                                        cv.wait(lock, [&] { return open; });
                                      })
                  .ok());
  StreamAgent agent(&dev_, "rank 0/2", &pool_);
  std::atomic<int> ran{0};
  StreamCall ok = Transform(s, in, out, n, 0);
  ok.run = [&](const HostPointers&) {
    ++ran;
    return Status::Ok();
  };
  ASSERT_TRUE(agent.submit(std::move(ok)).ok());
  StreamCall failing = Transform(s, in, out, n, 0);
  failing.what = "ncclAllReduce";
  failing.run = [](const HostPointers&) {
    return braid::InvalidUsage("mismatched call: count 10 here, 11 on rank 1");
  };
  ASSERT_TRUE(agent.submit(std::move(failing)).ok());
  StreamCall skipped = Transform(s, in, out, n, 1);
  skipped.run = [&](const HostPointers&) {
    ran += 100;
    return Status::Ok();
  };
  ASSERT_TRUE(agent.submit(std::move(skipped)).ok());
  std::atomic<bool> after{false};
  ASSERT_TRUE(dev_.launchHostFunction(s, [&] { after = true; }).ok());
  {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
  }
  cv.notify_all();
  // The stream goes on past the failed call and the one skipped after it.
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_TRUE(after.load());
  EXPECT_EQ(ran.load(), 1);
  Status e = agent.drain();
  EXPECT_EQ(e.cls(), braid::ErrorClass::kInvalidUsage);
  EXPECT_EQ(
      e.message(),
      "[rank 0/2] ncclAllReduce (stream-ordered): mismatched call: count 10 here, 11 on rank 1");
  // Later calls report it and are not queued.
  Status again = agent.submit(Transform(s, in, out, n, 2));
  EXPECT_EQ(again.cls(), braid::ErrorClass::kInvalidUsage);
  EXPECT_NE(again.message().find("transform: not run: an earlier stream-ordered call failed: "
                                 "[rank 0/2] ncclAllReduce"),
            std::string::npos)
      << again.message();
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

TEST_P(StreamAgentTest, AbortReleasesAStreamWhoseCallWaitsForReady) {
  const size_t n = 16;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  // A "kernel" that blocks the stream until the test opens the gate.
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  ASSERT_TRUE(dev_.launchHostFunction(s,
                                      [&] {
                                        std::unique_lock<std::mutex> lock(mu);
                                        cv.wait(lock, [&] { return open; });
                                      })
                  .ok());
  std::atomic<int> ran{0};
  auto agent = std::make_unique<StreamAgent>(&dev_, "test", &pool_);
  StreamCall c = Transform(s, in, out, n, 0);
  c.run = [&](const HostPointers&) {
    ++ran;
    return Status::Ok();
  };
  StreamCall c2 = Transform(s, in, out, n, 0);
  c2.run = c.run;
  ASSERT_TRUE(agent->submit(std::move(c)).ok());
  ASSERT_TRUE(agent->submit(std::move(c2)).ok());
  agent->abort("test abort");
  agent.reset();  // joins: neither call ran
  {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
  }
  cv.notify_all();
  ASSERT_TRUE(dev_.synchronize(s).ok());  // released: `done` was written for both
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// A call with device work (StreamCall::device_work, the peer-window path): out[i] = in[i] * 3 +
// salt as a "kernel" on the call's stream, between the agent's `go` and `done`. `log` records the
// order of agree, the work and finish; the work reads `skip` as a GPU kernel would.
struct DeviceWorkLog {
  std::mutex mu;
  std::vector<std::string> events;
  std::atomic<int> skipped{0};
  void Add(std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
};

StreamCall DeviceWorkCall(EmulatedDevice& dev, StreamHandle s, void* in, void* out, size_t n,
                          uint32_t salt, DeviceWorkLog* log, Status agreement = Status::Ok(),
                          std::function<void()> in_work = nullptr) {
  StreamCall c;
  c.what = "ncclAllReduce";
  c.streams = {s};
  c.buffers = {};
  for (auto [p, rd, wr] : {std::tuple<void*, bool, bool>{in, true, false},
                           std::tuple<void*, bool, bool>{out, false, true}}) {
    StreamBuffer b;
    b.ptr = p;
    b.bytes = n * 4;
    b.read = rd;
    b.written = wr;
    b.info = *dev.classify(p);
    c.buffers.push_back(b);
  }
  c.run = [](const HostPointers&) {
    return braid::InternalError("device work ran as a host call");
  };
  c.device_work = std::make_shared<braid::DeviceWork>();
  c.device_work->queue = [&dev, in, out, n, salt, log, in_work](
                             StreamHandle st, const uint32_t* skip, uint32_t value) {
    return dev.launchHostFunction(st, [&dev, in, out, n, salt, log, in_work, skip, value] {
      if (std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(skip)).load() == value) {
        ++log->skipped;
        return;
      }
      if (in_work) in_work();
      const auto* src = static_cast<const uint32_t*>(*dev.hostView(in, n * 4));
      auto* dst = static_cast<uint32_t*>(*dev.hostView(out, n * 4));
      for (size_t i = 0; i < n; ++i) dst[i] = src[i] * 3 + salt;
      log->Add("work " + std::to_string(salt));
    });
  };
  c.device_work->agree = [log, salt, agreement] {
    log->Add("agree " + std::to_string(salt));
    return agreement;
  };
  c.device_work->finish = [log, salt] {
    log->Add("finish " + std::to_string(salt));
    return Status::Ok();
  };
  return c;
}

TEST_P(StreamAgentTest, DeviceWorkRunsBetweenGoAndDoneInOrder) {
  const size_t n = 64;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  StreamAgent agent(&dev_, "rank 0/2", &pool_);
  DeviceWorkLog log;
  std::atomic<int> bad{0};
  const int calls = 200;
  for (int k = 0; k < calls; ++k) {
    const uint32_t v = static_cast<uint32_t>(k * 7);
    FillOnStream(s, a, n, v);  // the stream's earlier work: the call must see it
    ASSERT_TRUE(
        agent.submit(DeviceWorkCall(dev_, s, a, b, n, static_cast<uint32_t>(k), &log)).ok());
    ASSERT_TRUE(dev_.launchHostFunction(s,
                                        [&, v, k] {  // the stream's later work sees the result
                                          const uint32_t* p = At(b, n * 4);
                                          for (size_t i = 0; i < n; ++i)
                                            if (p[i] != v * 3 + static_cast<uint32_t>(k)) ++bad;
                                        })
                    .ok());
  }
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_TRUE(agent.drain().ok());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(log.skipped.load(), 0);
  // Each call: agree, its work, finish; calls in submission order.
  ASSERT_EQ(log.events.size(), 3u * calls);
  for (int k = 0; k < calls; ++k) {
    EXPECT_EQ(log.events[3 * k], "agree " + std::to_string(k));
    EXPECT_EQ(log.events[3 * k + 1], "work " + std::to_string(k));
    EXPECT_EQ(log.events[3 * k + 2], "finish " + std::to_string(k));
  }
  // Every slot came back (three per call: ready/done, go/end, skip), none lost.
  EXPECT_EQ(pool_.available(), pool_.allocated());
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

TEST_P(StreamAgentTest, DeviceWorkSkipsWhenTheRanksDisagree) {
  const size_t n = 16;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  std::memset(At(b, n * 4), 0x5a, n * 4);
  StreamHandle s = *dev_.createStream();
  StreamAgent agent(&dev_, "rank 1/3", &pool_);
  DeviceWorkLog log;
  ASSERT_TRUE(agent
                  .submit(DeviceWorkCall(dev_, s, a, b, n, 1, &log,
                                         braid::InvalidUsage("rank 2 has other offsets")))
                  .ok());
  ASSERT_TRUE(dev_.synchronize(s).ok());  // released
  Status e = agent.drain();
  EXPECT_EQ(e.cls(), braid::ErrorClass::kInvalidUsage);
  EXPECT_EQ(e.message(),
            "[rank 1/3] ncclAllReduce (stream-ordered, on the device): rank 2 has other offsets");
  EXPECT_EQ(log.skipped.load(), 1);
  EXPECT_EQ(log.events, std::vector<std::string>{"agree 1"});  // no work, no finish
  const auto* p = static_cast<const unsigned char*>(*dev_.hostView(b, n * 4));
  for (size_t i = 0; i < n * 4; ++i) EXPECT_EQ(p[i], 0x5a) << i;
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

TEST_P(StreamAgentTest, AbortWhileTheDeviceWorkRunsReleasesTheStream) {
  const size_t n = 16;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  StreamGate gate;
  std::atomic<bool> in_work{false};
  auto agent = std::make_unique<StreamAgent>(&dev_, "test", &pool_);
  DeviceWorkLog log;
  ASSERT_TRUE(agent
                  ->submit(DeviceWorkCall(dev_, s, a, b, n, 1, &log, Status::Ok(),
                                          [&] {
                                            in_work = true;
                                            std::unique_lock<std::mutex> lock(gate.mu);
                                            gate.cv.wait(lock, [&] { return gate.open; });
                                          }))
                  .ok());
  // A second call queued behind it: it must not run after the abort.
  ASSERT_TRUE(agent->submit(DeviceWorkCall(dev_, s, a, b, n, 2, &log)).ok());
  while (!in_work.load()) std::this_thread::yield();
  agent->abort("test abort");
  Status e = agent->drain();
  EXPECT_EQ(e.cls(), braid::ErrorClass::kAborted);
  EXPECT_NE(e.message().find("while the call's device work ran"), std::string::npos) << e.message();
  agent.reset();
  gate.Open();
  ASSERT_TRUE(dev_.synchronize(s).ok());  // the first ends, the second is told to skip
  EXPECT_EQ(log.skipped.load(), 1);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

TEST_P(StreamAgentTest, AbortBeforeReadySkipsTheDeviceWork) {
  const size_t n = 16;
  void* a = *dev_.allocDevice(n * 4);
  void* b = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  StreamGate gate;
  gate.Hold(dev_, s);
  auto agent = std::make_unique<StreamAgent>(&dev_, "test", &pool_);
  DeviceWorkLog log;
  ASSERT_TRUE(agent->submit(DeviceWorkCall(dev_, s, a, b, n, 1, &log)).ok());
  agent->abort("test abort");
  agent.reset();
  gate.Open();
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_EQ(log.skipped.load(), 1);
  EXPECT_TRUE(log.events.empty());
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

TEST_P(StreamAgentTest, BadStreamOrBufferIsRefusedAtOnce) {
  const size_t n = 16;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamAgent agent(&dev_, "test", &pool_);
  int not_a_stream;
  Status st = agent.submit(Transform(&not_a_stream, in, out, n, 0));
  EXPECT_EQ(st.cls(), braid::ErrorClass::kInvalidArgument);
  EXPECT_NE(st.message().find("not a live stream"), std::string::npos) << st.message();
  // Past the end of its allocation (a page, 4096 bytes).
  const size_t size = dev_.classify(out)->size;
  st = agent.submit(Transform(nullptr, in, out, size / 4 + 1, 0));
  EXPECT_EQ(st.cls(), braid::ErrorClass::kInvalidArgument);
  EXPECT_NE(st.message().find("run past the end"), std::string::npos) << st.message();
  // Nothing was queued, nothing is kept.
  EXPECT_TRUE(agent.drain().ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// A device call that fails while it is being ordered (after the checks; the device refuses a
// copy, a flag write or wait, or the work's launch) part way through what submit queues: the
// submit fails naming the device's error, the stream runs on (every `done` it may wait for is
// written), the failure is kept (later calls are refused naming it, drain reports it), and the
// agent says once that a call was dropped (the shim revokes the communicator: the peers' parts
// of the call are queued). Each point is hit after earlier work of the call was queued.
struct OrderingFault {
  const char* name;
  EmulatedDevice::FaultOp op;
  int pass;          // calls of `op` that succeed first
  bool device_work;  // the call has device work with a `prepare` (else a staged Transform)
  bool two_streams;
  bool staged_only = false;  // reached only where device memory is staged (copied)
};

class StreamAgentFaultTest
    : public ::testing::TestWithParam<std::tuple<AgentParam, OrderingFault>> {};

TEST_P(StreamAgentFaultTest, AFailureWhileOrderingReleasesTheStreamIsKeptAndToldOnce) {
  const auto& [mode, fault] = GetParam();
  if (fault.staged_only && mode.mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "device memory is host memory here: nothing is copied";
  EmulatedDevice dev(mode.mode, EmulatedDevice::kDefaultFlagPoll, mode.single_queue);
  braid::StreamFlagPool pool(&dev);
  const size_t n = 64;
  void* in = *dev.allocDevice(n * 4);
  void* out = *dev.allocDevice(n * 4);
  void* scratch = *dev.allocDevice(n * 4);
  StreamHandle s = *dev.createStream();
  StreamHandle s2 = *dev.createStream();
  for (size_t i = 0; i < n; ++i) static_cast<uint32_t*>(*dev.hostView(in, n * 4))[i] = 7;
  std::memset(*dev.hostView(out, n * 4), 0x5a, n * 4);
  {
    StreamAgent agent(&dev, "rank 0/2", &pool);
    std::atomic<int> dropped{0};
    agent.setOnDroppedCall([&] { ++dropped; });
    StreamCall call;
    DeviceWorkLog log;
    std::atomic<int> ran{0};
    if (fault.device_work) {
      call = DeviceWorkCall(dev, s, in, out, n, 1, &log);
      call.device_work->prepare = [&dev, scratch, in, n](StreamHandle st) {
        return dev.copyAsync(scratch, in, n * 4, st);
      };
    } else {
      call.what = "ncclAllReduce";
      call.streams = {s};
      if (fault.two_streams) call.streams.push_back(s2);
      for (auto [p, rd, wr] : {std::tuple<void*, bool, bool>{in, true, false},
                               std::tuple<void*, bool, bool>{out, false, true}}) {
        StreamBuffer b;
        b.ptr = p;
        b.bytes = n * 4;
        b.read = rd;
        b.written = wr;
        b.info = *dev.classify(p);
        call.buffers.push_back(b);
      }
      call.run = [&](const HostPointers&) {
        ++ran;
        return Status::Ok();
      };
    }
    dev.failAfter(fault.op, fault.pass);
    Status st = agent.submit(std::move(call));
    ASSERT_EQ(dev.injectedFailures(), 1) << "the fault was not reached: " << st.message();
    EXPECT_EQ(st.cls(), braid::ErrorClass::kSystem) << st.message();
    EXPECT_NE(st.message().find("ncclAllReduce: ordering the call on its stream: "),
              std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("injected failure"), std::string::npos) << st.message();
    EXPECT_EQ(dropped.load(), 1);
    // The streams run on: whatever the call queued before the failure is released.
    std::atomic<bool> after{false};
    ASSERT_TRUE(dev.launchHostFunction(s, [&] { after = true; }).ok());
    EXPECT_TRUE(dev.synchronize(s).ok());
    EXPECT_TRUE(dev.synchronize(s2).ok());
    EXPECT_TRUE(after.load());
    // Nothing of the call ran: no host run, no device work, the output untouched.
    EXPECT_EQ(ran.load(), 0);
    EXPECT_TRUE(log.events.empty());
    const auto* o = static_cast<const unsigned char*>(*dev.hostView(out, n * 4));
    for (size_t i = 0; i < n * 4; ++i) ASSERT_EQ(o[i], 0x5a) << i;
    // Kept: the next call is refused naming it (its own `prepare` never queued), drain reports it.
    StreamCall next = DeviceWorkCall(dev, s, in, out, n, 2, &log);
    std::atomic<bool> prepared{false};
    next.device_work->prepare = [&](StreamHandle) {
      prepared = true;
      return Status::Ok();
    };
    Status again = agent.submit(std::move(next));
    EXPECT_NE(again.message().find("not run: an earlier stream-ordered call failed: ncclAllReduce: "
                                   "ordering the call on its stream: "),
              std::string::npos)
        << again.message();
    EXPECT_FALSE(prepared.load());
    EXPECT_EQ(dropped.load(), 1);  // told once
    Status e = agent.drain();
    EXPECT_NE(e.message().find("injected failure"), std::string::npos) << e.message();
  }
  EXPECT_TRUE(dev.synchronize(s).ok());
  EXPECT_EQ(dev.unsafeFrees(), 0u);
  EXPECT_TRUE(dev.destroyStream(s).ok());
  EXPECT_TRUE(dev.destroyStream(s2).ok());
  EXPECT_TRUE(dev.freeDevice(in).ok());
  EXPECT_TRUE(dev.freeDevice(out).ok());
  EXPECT_TRUE(dev.freeDevice(scratch).ok());
}

using Fault = EmulatedDevice::FaultOp;
INSTANTIATE_TEST_SUITE_P(
    Modes, StreamAgentFaultTest,
    ::testing::Combine(::testing::Values(AgentParam{EmulatedDevice::Mode::kSeparate, false},
                                         AgentParam{EmulatedDevice::Mode::kHostMemory, false},
                                         AgentParam{EmulatedDevice::Mode::kSeparate, true}),
                       ::testing::Values(
                           // A second stream's `ready` written, the first's fails.
                           OrderingFault{"SecondReady", Fault::kWriteValue, 1, false, true},
                           // The copy in of a staged call fails (its `ready` not yet written).
                           OrderingFault{"CopyIn", Fault::kCopy, 0, false, false, true},
                           // Every `ready` written, the wait for `done` fails.
                           OrderingFault{"WaitForDone", Fault::kWaitValue, 0, false, false},
                           // A later wait of a call on two streams fails (for a `ready` of the
                           // second, or for `done`).
                           OrderingFault{"SecondStreamWait", Fault::kWaitValue, 1, false, true},
                           // `prepare` queued its copy, then the call's `ready` fails.
                           OrderingFault{"ReadyAfterPrepare", Fault::kWriteValue, 0, true, false},
                           // `ready` and the wait for `go` queued, the work's end fails.
                           OrderingFault{"WorkEnd", Fault::kWriteValue, 1, true, false})),
    [](const auto& info) {
      const AgentParam& m = std::get<0>(info.param);
      return std::string(std::get<1>(info.param).name) +
             (m.mode == EmulatedDevice::Mode::kSeparate ? "_separate" : "_host") +
             (m.single_queue ? "_one_queue" : "");
    });

// A call in pieces (the staging pipeline) computes what it would whole: out of place and in
// place, a count that is no multiple of the piece, 40 calls queued behind a held stream, each
// written by a "kernel" before it and checked by one after it. Staged (separate device memory),
// every piece runs on its own copies; on host-accessible memory the pieces run back to back.
TEST_P(StreamAgentTest, ACallInPiecesIsTheCallWhole) {
  const size_t n = 1031, piece = 64;  // 17 pieces, the last of 7 words
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  std::atomic<int> bad{0};
  {
    StreamAgent agent(&dev_, "test", &pool_);
    StreamGate gate;
    gate.Hold(dev_, s);
    for (uint32_t rep = 0; rep < 40; ++rep) {
      const bool in_place = rep % 3 == 2;
      void* src = in_place ? out : in;
      ASSERT_TRUE(dev_.launchHostFunction(s,
                                          [=, this] {
                                            uint32_t* p = At(src, n * 4);
                                            for (size_t i = 0; i < n; ++i)
                                              p[i] = rep * 7919u + static_cast<uint32_t>(i);
                                          })
                      .ok());
      ASSERT_TRUE(agent.submit(TransformInPieces(s, src, out, n, rep, piece)).ok());
      ASSERT_TRUE(dev_.launchHostFunction(
                          s,
                          [=, this, &bad] {
                            const uint32_t* p = At(out, n * 4);
                            for (size_t i = 0; i < n; ++i)
                              if (p[i] != (rep * 7919u + static_cast<uint32_t>(i)) * 3 + rep) {
                                ++bad;
                                return;
                              }
                          })
                      .ok());
    }
    gate.Open();
    EXPECT_TRUE(agent.drain().ok()) << agent.error().message();
    ASSERT_TRUE(dev_.synchronize(s).ok());
    const bool staged = GetParam().mode == EmulatedDevice::Mode::kSeparate;
    EXPECT_EQ(agent.stagingStats().pieces, staged ? 40u * 17u : 0u);
  }
  // Every piece's flag slot is back in the pool.
  EXPECT_EQ(pool_.available(), pool_.allocated());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// Two read buffers that overlap (one staged region, not one buffer): the region is copied whole
// before the first piece, and every piece still reads both buffers' words.
TEST_P(StreamAgentTest, APiecewiseCallOverOverlappingBuffers) {
  const size_t n = 300, piece = 32, shift = 5;
  void* base = *dev_.allocDevice((n + shift) * 4);
  void* a = base;
  void* b = static_cast<char*>(base) + shift * 4;
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  ASSERT_TRUE(dev_.launchHostFunction(s,
                                      [=, this] {
                                        uint32_t* p = At(base, (n + shift) * 4);
                                        for (size_t i = 0; i < n + shift; ++i)
                                          p[i] = static_cast<uint32_t>(i * i);
                                      })
                  .ok());
  StreamCall c;
  c.what = "sum";
  c.streams = {s};
  c.buffers = {Buffer(a, n * 4, true, false), Buffer(b, n * 4, true, false),
               Buffer(out, n * 4, false, true)};
  c.run = [](const HostPointers&) { return braid::InternalError("ran whole"); };
  c.pieces = (n + piece - 1) / piece;
  c.piece_bytes = piece * 4;
  c.run_piece = [=](const HostPointers& h, size_t k) {
    const size_t first = k * piece, count = std::min(piece, n - first);
    auto* x = static_cast<const uint32_t*>(h(static_cast<const uint32_t*>(a) + first));
    auto* y = static_cast<const uint32_t*>(h(static_cast<const uint32_t*>(b) + first));
    auto* z = static_cast<uint32_t*>(h(static_cast<uint32_t*>(out) + first));
    for (size_t i = 0; i < count; ++i) z[i] = x[i] + y[i];
    return Status::Ok();
  };
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent.submit(std::move(c)).ok());
    EXPECT_TRUE(agent.drain().ok()) << agent.error().message();
  }
  ASSERT_TRUE(dev_.synchronize(s).ok());
  const uint32_t* z = At(out, n * 4);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(z[i], static_cast<uint32_t>(i * i + (i + shift) * (i + shift))) << i;
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(base).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// A copy the test holds back until a condition (or a bound that only a broken pipeline reaches).
struct CopyHold {
  std::mutex mu;
  std::condition_variable cv;
  bool first_piece_ran = false;
  bool released = false;      // the test's own gate (abort test)
  bool held_in_vain = false;  // the bound passed: the copy waited for a piece that never ran
  void PieceRan() {
    {
      std::lock_guard<std::mutex> lock(mu);
      first_piece_ran = true;
    }
    cv.notify_all();
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

// The pipeline: the first piece's collective runs before the last piece is copied in (issue 39:
// never a whole-buffer copy before the collective starts). The copy-in of the last piece is held
// until the first piece has run; a design that copies the whole buffer first would hold it until
// the 60 s bound and fail.
TEST_P(StreamAgentTest, TheFirstPieceRunsBeforeTheLastIsCopiedIn) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "nothing is staged on host-accessible device memory";
  const size_t n = 4096, piece = 1024;  // 4 pieces
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  CopyHold hold;
  const auto last_from = reinterpret_cast<uintptr_t>(in) + 3 * piece * 4;
  const auto last_end = reinterpret_cast<uintptr_t>(in) + n * 4;
  // Any copy that reads the last piece's words (a whole-buffer copy too).
  dev_.setCopyHook([&](const void*, const void* src, size_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(src);
    if (a + bytes <= last_from || a >= last_end) return;
    std::unique_lock<std::mutex> lock(hold.mu);
    if (!hold.cv.wait_for(lock, std::chrono::seconds(60), [&] { return hold.first_piece_ran; }))
      hold.held_in_vain = true;
  });
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent
                    .submit(TransformInPieces(s, in, out, n, 9, piece,
                                              [&](size_t k) {
                                                if (k == 0) hold.PieceRan();
                                                return Status::Ok();
                                              }))
                    .ok());
    EXPECT_TRUE(agent.drain().ok()) << agent.error().message();
    ASSERT_TRUE(dev_.synchronize(s).ok());
    EXPECT_FALSE(hold.held_in_vain) << "the last piece was copied in before the first ran";
    EXPECT_GE(agent.stagingStats().pieces_early, 1u);
    EXPECT_EQ(agent.stagingStats().pieces, 4u);
  }
  dev_.setCopyHook(nullptr);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// A piece that fails: the error is kept with the piece named, the later pieces do not run, the
// stream goes on (every piece's `done` written), and later calls report the error.
TEST_P(StreamAgentTest, AFailedPieceReleasesTheStreamAndIsKept) {
  const size_t n = 500, piece = 50;  // 10 pieces
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  std::atomic<int> ran{0};
  StreamAgent agent(&dev_, "rank 0/2", &pool_);
  StreamCall c = TransformInPieces(s, in, out, n, 1, piece, [&](size_t k) -> Status {
    if (k == 3) return braid::RemoteError("peer 1 died");
    ++ran;
    return Status::Ok();
  });
  c.what = "ncclAllReduce";
  ASSERT_TRUE(agent.submit(std::move(c)).ok());
  std::atomic<bool> after{false};
  ASSERT_TRUE(dev_.launchHostFunction(s, [&] { after = true; }).ok());
  ASSERT_TRUE(dev_.synchronize(s).ok());
  EXPECT_TRUE(after.load());
  EXPECT_EQ(ran.load(), 3);
  Status e = agent.drain();
  EXPECT_EQ(e.cls(), braid::ErrorClass::kRemote);
  EXPECT_EQ(e.message(), "[rank 0/2] ncclAllReduce (stream-ordered, piece 4 of 10): peer 1 died");
  EXPECT_FALSE(agent.submit(Transform(s, in, out, n, 2)).ok());
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

// An abort while a piece waits for its copy in: the call stops there, the stream is released
// (its held copy goes on once the test lets it), the error says the communicator was aborted.
TEST_P(StreamAgentTest, AbortWhileAPieceWaitsForItsCopy) {
  if (GetParam().mode != EmulatedDevice::Mode::kSeparate)
    GTEST_SKIP() << "nothing is staged on host-accessible device memory";
  const size_t n = 4096, piece = 1024;
  void* in = *dev_.allocDevice(n * 4);
  void* out = *dev_.allocDevice(n * 4);
  StreamHandle s = *dev_.createStream();
  CopyHold hold;
  const auto last_from = reinterpret_cast<uintptr_t>(in) + 3 * piece * 4;
  const auto last_end = reinterpret_cast<uintptr_t>(in) + n * 4;
  // Any copy that reads the last piece's words (a whole-buffer copy too).
  dev_.setCopyHook([&](const void*, const void* src, size_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(src);
    if (a + bytes <= last_from || a >= last_end) return;
    std::unique_lock<std::mutex> lock(hold.mu);
    hold.cv.wait(lock, [&] { return hold.released; });
  });
  std::atomic<int> ran{0};
  {
    StreamAgent agent(&dev_, "test", &pool_);
    ASSERT_TRUE(agent
                    .submit(TransformInPieces(s, in, out, n, 9, piece,
                                              [&](size_t k) {
                                                ++ran;
                                                if (k == 0) hold.PieceRan();
                                                return Status::Ok();
                                              }))
                    .ok());
    {
      std::unique_lock<std::mutex> lock(hold.mu);
      hold.cv.wait(lock, [&] { return hold.first_piece_ran; });
    }
    agent.abort("test abort");
    // The agent gives up on the held piece without the stream: the drain ends while the copy
    // is still held.
    Status e = agent.drain();
    EXPECT_EQ(e.cls(), braid::ErrorClass::kAborted) << e.message();
    hold.Release();
    ASSERT_TRUE(dev_.synchronize(s).ok());
  }
  // Pieces 1 and 2 may have run before the abort was seen; the last never did.
  EXPECT_GE(ran.load(), 1);
  EXPECT_LE(ran.load(), 3);
  dev_.setCopyHook(nullptr);
  EXPECT_TRUE(dev_.destroyStream(s).ok());
  EXPECT_TRUE(dev_.freeDevice(in).ok());
  EXPECT_TRUE(dev_.freeDevice(out).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamAgentTest,
                         ::testing::Values(AgentParam{EmulatedDevice::Mode::kSeparate, false},
                                           AgentParam{EmulatedDevice::Mode::kHostMemory, false},
                                           AgentParam{EmulatedDevice::Mode::kSeparate, true},
                                           AgentParam{EmulatedDevice::Mode::kHostMemory, true}),
                         [](const auto& info) {
                           std::string name = info.param.mode == EmulatedDevice::Mode::kSeparate
                                                  ? "Separate"
                                                  : "HostMemory";
                           return name + (info.param.single_queue ? "OneQueue" : "");
                         });

}  // namespace

namespace {

// The flag pool's rule, which a staging buffer's flag relies on (it starts from the value its word
// holds): a slot given back unused comes out again with the same value, its `done` still short of
// it; a released slot's next use waits for one more than its `done` holds.
TEST(StreamFlagPool, AnUnusedSlotComesBackAsItWas) {
  EmulatedDevice dev(EmulatedDevice::Mode::kSeparate);
  braid::StreamFlagPool pool(&dev);
  auto a = pool.acquire();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->value, 1u);
  pool.giveBackUnused(*a);
  auto b = pool.acquire();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->done, a->done);
  EXPECT_EQ(b->value, 1u);
  EXPECT_FALSE(dev.hostWaitFlag(b->done, b->value, {}));  // done holds 0
  dev.hostWriteFlag(b->done, b->value);
  pool.release(*b);
  auto c = pool.acquire();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->done, a->done);
  EXPECT_EQ(c->value, 2u);
  EXPECT_TRUE(dev.hostWaitFlag(c->done, c->value - 1, {}));
  EXPECT_FALSE(dev.hostWaitFlag(c->done, c->value, {}));
  EXPECT_EQ(pool.available(), pool.allocated() - 1);
}

}  // namespace
