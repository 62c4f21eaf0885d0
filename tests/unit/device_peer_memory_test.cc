// Peer device memory (CUDA IPC) on the emulated device, the part of issue 39's intra-node GPU path
// that CI can run: an allocation exported by one process is mapped by another (a forked child
// with an emulated device of its own), both see each other's writes through the runtime's
// copies, and every refusal (a garbage handle, this process's own handle, an interior pointer,
// an allocation freed by its owner, freeing a mapping instead of closing it) is an error, not
// other bytes. PeerMemoryMap opens each allocation once and closes it with its last user.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "device/cpu/emulated_device.h"
#include "device/ipc_probe.h"
#include "device/peer_memory.h"

using braid::ErrorClass;
using braid::device::EmulatedDevice;
using braid::device::IpcHandle;
using braid::device::IpcProbe;
using braid::device::PeerMemoryMap;

namespace {

// Runs `body` in a forked child (with a 30 s alarm, so a hang fails) and returns its exit code;
// 128 + signal when it was killed.
int InChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    _exit(body());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 131 + seed);
  return v;
}

// Copies `bytes` of device memory `d` to the host through `dev`'s stream.
std::vector<unsigned char> Read(EmulatedDevice& dev, const void* d, size_t bytes) {
  std::vector<unsigned char> out(bytes);
  auto s = dev.createStream();
  if (!s.ok() || !dev.copyAsync(out.data(), d, bytes, *s).ok() || !dev.synchronize(*s).ok() ||
      !dev.destroyStream(*s).ok())
    out.clear();
  return out;
}
bool Write(EmulatedDevice& dev, void* d, const std::vector<unsigned char>& v) {
  auto s = dev.createStream();
  return s.ok() && dev.copyAsync(d, v.data(), v.size(), *s).ok() && dev.synchronize(*s).ok() &&
         dev.destroyStream(*s).ok();
}

class PeerMemoryTest : public ::testing::TestWithParam<EmulatedDevice::Mode> {
 protected:
  EmulatedDevice dev_{GetParam()};
};

TEST_P(PeerMemoryTest, AnotherProcessMapsTheAllocationAndBothSeeEachOthersWrites) {
  const size_t n = 3 * 4096 + 17;
  void* d = *dev_.allocDevice(n);
  ASSERT_TRUE(Write(dev_, d, Pattern(n, 7)));
  auto h = dev_.exportAllocation(d);
  ASSERT_TRUE(h.ok()) << h.status().message();
  const IpcHandle handle = *h;
  const EmulatedDevice::Mode mode = GetParam();

  const int code = InChild([&] {
    EmulatedDevice child(mode);
    auto p = child.openPeerAllocation(handle);
    if (!p.ok()) return 2;
    auto c = child.classify(static_cast<char*>(*p) + 5);
    if (!c.ok() || !c->onDevice() || c->base != *p || c->size < n) return 3;
    if (Read(child, *p, n) != Pattern(n, 7)) return 4;
    if (!Write(child, *p, Pattern(n, 99))) return 5;
    // A mapping is closed, not freed.
    if (child.freeDevice(*p).cls() != ErrorClass::kInvalidArgument) return 6;
    // Nor exported again: only the owner's allocation has a handle.
    if (child.exportAllocation(*p).ok()) return 7;
    if (!child.closePeerAllocation(*p).ok()) return 8;
    if (child.closePeerAllocation(*p).ok()) return 9;  // twice
    return child.deviceAllocations() == 0 ? 0 : 10;
  });
  EXPECT_EQ(code, 0);
  EXPECT_EQ(Read(dev_, d, n), Pattern(n, 99));  // the child's write, through the parent's copy
  EXPECT_TRUE(dev_.freeDevice(d).ok());

  // The owner freed it: the handle now names nothing, and opening it says so.
  const int gone = InChild([&] {
    EmulatedDevice child(mode);
    auto p = child.openPeerAllocation(handle);
    if (p.ok()) return 2;
    return p.status().message().find("is gone") != std::string::npos ? 0 : 3;
  });
  EXPECT_EQ(gone, 0);
}

TEST_P(PeerMemoryTest, RefusesWhatIsNotAPeerAllocation) {
  void* d = *dev_.allocDevice(100);
  // An interior pointer, host memory, host-mapped memory: no handle.
  EXPECT_EQ(dev_.exportAllocation(static_cast<char*>(d) + 1).status().cls(),
            ErrorClass::kInvalidArgument);
  int local = 0;
  EXPECT_EQ(dev_.exportAllocation(&local).status().cls(), ErrorClass::kInvalidArgument);
  void* pinned = *dev_.allocHostMapped(64);
  EXPECT_EQ(dev_.exportAllocation(pinned).status().cls(), ErrorClass::kInvalidArgument);
  // This process's own handle: InvalidUsage (use the pointer), as CUDA refuses it.
  auto h = dev_.exportAllocation(d);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(dev_.openPeerAllocation(*h).status().cls(), ErrorClass::kInvalidUsage);
  // Garbage.
  IpcHandle junk;
  std::memset(junk.bytes, 0x5a, sizeof(junk.bytes));
  EXPECT_EQ(dev_.openPeerAllocation(junk).status().cls(), ErrorClass::kInvalidArgument);
  EXPECT_EQ(dev_.closePeerAllocation(d).cls(), ErrorClass::kInvalidArgument);
  EXPECT_TRUE(dev_.freeHostMapped(pinned).ok());
  EXPECT_TRUE(dev_.freeDevice(d).ok());
}

TEST_P(PeerMemoryTest, TheMapOpensEachAllocationOnceAndClosesItWithItsLastUser) {
  void* a = *dev_.allocDevice(4096);
  void* b = *dev_.allocDevice(8192);
  const IpcHandle ha = *dev_.exportAllocation(a), hb = *dev_.exportAllocation(b);
  EXPECT_FALSE(ha == hb);
  const EmulatedDevice::Mode mode = GetParam();
  const int code = InChild([&] {
    EmulatedDevice child(mode);
    PeerMemoryMap map(&child);
    auto p1 = map.acquire(ha);
    auto p2 = map.acquire(ha);
    auto p3 = map.acquire(hb);
    if (!p1.ok() || !p2.ok() || !p3.ok() || *p1 != *p2 || *p1 == *p3) return 2;
    if (map.opens() != 2 || map.mapped() != 2 || child.deviceAllocations() != 2) return 3;
    if (!map.release(ha).ok() || map.mapped() != 2) return 4;  // one user left
    if (!map.release(ha).ok() || map.mapped() != 1) return 5;  // closed
    if (child.deviceAllocations() != 1) return 6;
    if (map.release(ha).cls() != ErrorClass::kInvalidArgument) return 7;  // not acquired
    IpcHandle junk;
    std::memset(junk.bytes, 1, sizeof(junk.bytes));
    if (map.acquire(junk).ok() || map.opens() != 3 || map.mapped() != 1) return 8;
    return 0;  // hb still mapped: the map's destructor closes it
  });
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(dev_.freeDevice(a).ok());
  EXPECT_TRUE(dev_.freeDevice(b).ok());
}

// The init-time probe (device/ipc_probe.h): its text names the handle and the device, another
// process opens it, garbage is refused, and a probe of freed memory no longer opens. A runtime
// whose device memory the host reaches (kHostMemory: ranks there share host memory anyway) makes
// no probe, so no peer is mapped through it.
TEST_P(PeerMemoryTest, TheIpcProbeNamesItsDeviceAndOpensInAnotherProcess) {
  IpcProbe probe = IpcProbe::Make(&dev_, nullptr);
  if (dev_.deviceMemoryHostAccessible()) {
    EXPECT_TRUE(probe.empty());
    EXPECT_EQ(probe.tryOpen("00@0").cls(), ErrorClass::kInvalidUsage);  // no probe here
    return;
  }
  ASSERT_FALSE(probe.empty());
  const std::string text = probe.text();
  const size_t at = text.find('@');
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(at, 2 * IpcHandle::kBytes);
  EXPECT_EQ(IpcProbe::DeviceOf(text), 0);  // the emulated device is device 0
  EXPECT_EQ(IpcProbe::DeviceOf(text.substr(0, at)), -1);
  EXPECT_EQ(IpcProbe::DeviceOf("ab@3"), 3);
  EXPECT_EQ(dev_.deviceAllocations(), 1u);
  const EmulatedDevice::Mode mode = GetParam();
  const int code = InChild([&] {
    EmulatedDevice child(mode);
    IpcProbe mine = IpcProbe::Make(&child, nullptr);
    if (mine.empty()) return 2;
    if (!mine.tryOpen(text).ok()) return 3;
    if (!mine.tryOpen(text.substr(0, at)).ok()) return 4;  // the device part is optional
    if (mine.tryOpen("zz" + text.substr(2)).cls() != ErrorClass::kInvalidArgument) return 5;
    if (mine.tryOpen(text.substr(1)).cls() != ErrorClass::kInvalidArgument) return 6;
    return child.deviceAllocations() == 1 ? 0 : 7;  // the open was closed again
  });
  EXPECT_EQ(code, 0);
  probe.reset();
  EXPECT_TRUE(probe.empty());
  EXPECT_EQ(dev_.deviceAllocations(), 0u);
  const int gone = InChild([&] {
    EmulatedDevice child(mode);
    IpcProbe mine = IpcProbe::Make(&child, nullptr);
    return !mine.empty() && !mine.tryOpen(text).ok() ? 0 : 2;
  });
  EXPECT_EQ(gone, 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, PeerMemoryTest,
                         ::testing::Values(EmulatedDevice::Mode::kSeparate,
                                           EmulatedDevice::Mode::kHostMemory),
                         [](const auto& info) {
                           return info.param == EmulatedDevice::Mode::kSeparate ? "Separate"
                                                                                : "HostMemory";
                         });

}  // namespace
