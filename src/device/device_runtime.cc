// The device runtime's small shared parts and the choice of the process's runtime.
#include "device/device_runtime.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "device/cpu/emulated_device.h"
#include "device/cuda/cuda_runtime_driver.h"

namespace braid::device {

const char* MemoryKindName(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned host";
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kManaged:
      return "managed";
  }
  return "unknown";
}

std::string PointerText(const void* p) {
  char b[32];
  std::snprintf(b, sizeof(b), "%p", p);
  return b;
}

bool PointerInfo::covers(const void* p, size_t bytes) const {
  if (!base || size == 0) return true;
  const auto b = reinterpret_cast<uintptr_t>(base);
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= b && a - b <= size && bytes <= size - (a - b);
}

namespace {

// Leaked on purpose: streams and stream agents may still use the runtime while the process exits.
std::atomic<DeviceRuntime*> g_runtime{nullptr};
std::mutex g_choose;

}  // namespace

DeviceRuntime* ActiveDeviceRuntime() {
  return g_runtime.load(std::memory_order_acquire);
}

DeviceRuntime* ChooseDeviceRuntime() {
  if (DeviceRuntime* r = g_runtime.load(std::memory_order_acquire)) return r;
  std::lock_guard<std::mutex> lock(g_choose);
  if (DeviceRuntime* r = g_runtime.load(std::memory_order_relaxed)) return r;
  const char* want = std::getenv("BRAID_DEVICE");
  DeviceRuntime* chosen = nullptr;
  // CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue on a GPU) is modelled by the emulated
  // device too, so that a false dependency between streams deadlocks a test here.
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const bool single_queue = connections && std::strcmp(connections, "1") == 0;
  const auto poll = EmulatedDevice::kDefaultFlagPoll;
  if (want && std::strcmp(want, "emulated") == 0) {
    chosen = new EmulatedDevice(EmulatedDevice::Mode::kSeparate, poll, single_queue);
  } else if (want && std::strcmp(want, "emulated-host") == 0) {
    chosen = new EmulatedDevice(EmulatedDevice::Mode::kHostMemory, poll, single_queue);
  } else if (want && std::strcmp(want, "none") == 0) {
    return nullptr;
  } else {
    // Unset, "cuda" or anything else: CUDA when the application has loaded it.
    chosen = LoadCudaDriverRuntime().release();
    if (!chosen) return nullptr;  // asked again later: CUDA may be loaded by then
  }
  g_runtime.store(chosen, std::memory_order_release);
  return chosen;
}

}  // namespace braid::device
