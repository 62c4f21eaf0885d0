// ncclMemAlloc/Free and buffer/window registration. braid reads and writes user buffers
// directly and needs no registration, so a buffer registration is a handle the shim can validate
// (and a classification it keeps); a window registration also maps the node's peers' windows
// (nccl/peer_windows.h).
// ncclMemAlloc gives device memory where a device runtime is active (CUDA loaded, or
// BRAID_DEVICE's emulated device), as NCCL's does; host memory otherwise.
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "device/device_runtime.h"
#include "nccl/cuda_driver.h"
#include "nccl/known_buffers.h"
#include "nccl/peer_buffers.h"
#include "nccl/peer_windows.h"
#include "nccl/shim.h"

using namespace braid::nccl;

namespace {

constexpr size_t kAlignment = NCCL_WIN_REQUIRED_ALIGNMENT;

struct Registration {
  ncclComm_t comm;
  void* buff;
  size_t size;
  const void* allocation;  // the device allocation remembered for it (known_buffers.h), or null
  PeerWindows peers;       // a window's peers, mapped (nccl/peer_windows.h); empty otherwise
  uint64_t window_id = 0;  // a window's number on its communicator (0: a buffer registration)
};

// Live handles, so a bad or repeated deregistration is an error instead of a crash.
struct Registry {
  std::mutex mu;
  std::unordered_set<Registration*> live;
  // Windows registered so far per communicator: registration is collective, in one order on
  // every rank, so a window's number is the same on every rank.
  std::unordered_map<ncclComm_t, uint64_t> windows;
};
std::atomic<int> g_windows{0};  // live window registrations, all communicators

Registry& Handles() {
  static Registry* r = new Registry;  // leaked: handles may be released during exit
  return *r;
}

ncclResult_t Register(ncclComm_t comm, void* buff, size_t size, Registration** out,
                      const char* func) {
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(buff, "buff", func));
  if (size == 0) return Fail(ncclInvalidArgument, std::string(func) + ": size is 0");
  // The buffer's allocation is remembered until the deregistration, so calls on it need no
  // driver query (NCCL requires a registered buffer to stay allocated until then).
  const void* allocation = nullptr;
  if (braid::device::DeviceRuntime* rt = braid::device::ActiveDeviceRuntime()) {
    auto info = rt->classify(buff);
    if (info.ok() && info->kind != braid::device::MemoryKind::kHost && info->base) {
      RememberAllocation(*info);
      allocation = info->base;
    }
  }
  auto* reg = new Registration{comm, buff, size, allocation, {}, 0};
  std::lock_guard<std::mutex> lock(Handles().mu);
  Handles().live.insert(reg);
  *out = reg;
  return ncclSuccess;
}

ncclResult_t Deregister(ncclComm_t comm, void* handle, const char* func) {
  NCCL_CHECK(CheckComm(comm, func));
  NCCL_CHECK(CheckPtr(handle, "handle", func));
  auto* reg = static_cast<Registration*>(handle);
  {
    std::lock_guard<std::mutex> lock(Handles().mu);
    auto it = Handles().live.find(reg);
    if (it == Handles().live.end() || reg->comm != comm)
      return Fail(ncclInvalidArgument, std::string(func) +
                                           ": handle was not registered on this communicator "
                                           "(or was already deregistered)");
    Handles().live.erase(it);
  }
  if (reg->allocation) ForgetAllocation(reg->allocation);
  if (reg->window_id) g_windows.fetch_sub(1, std::memory_order_relaxed);
  UnmapPeerWindows(&reg->peers);
  delete reg;
  return ncclSuccess;
}

}  // namespace

bool braid::nccl::WindowSpan::everyPeerMapped() const {
  for (void* p : peer)
    if (!p) return false;
  return !peer.empty();
}

bool braid::nccl::FindWindow(ncclComm_t comm, const void* p, size_t bytes, WindowSpan* out) {
  if (g_windows.load(std::memory_order_relaxed) == 0) return false;  // every call asks
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(Handles().mu);
  // The oldest window that holds it (the lowest number): every rank picks the same one when a
  // program registered overlapping windows (the set's order differs between processes).
  const Registration* found = nullptr;
  for (const Registration* reg : Handles().live) {
    if (reg->comm != comm || reg->window_id == 0) continue;
    const auto b = reinterpret_cast<uintptr_t>(reg->buff);
    if (a < b || a - b > reg->size || bytes > reg->size - (a - b)) continue;
    if (!found || reg->window_id < found->window_id) found = reg;
  }
  if (!found) return false;
  out->id = found->window_id;
  out->offset = a - reinterpret_cast<uintptr_t>(found->buff);
  out->peer = found->peers.peer;
  return true;
}

void* braid::nccl::WindowPeerPointer(ncclWindow_t win, int peer) {
  auto* reg = reinterpret_cast<Registration*>(win);
  std::lock_guard<std::mutex> lock(Handles().mu);
  if (!Handles().live.count(reg) || peer < 0 || static_cast<size_t>(peer) >= reg->peers.peer.size())
    return nullptr;
  return reg->peers.peer[static_cast<size_t>(peer)];
}

void braid::nccl::DropRegistrations(ncclComm_t comm, bool keep_mappings) {
  // The per-call peer mappings (nccl/peer_buffers.h) go with the windows, under the same rule.
  DropPeerCache(comm, keep_mappings);
  std::vector<Registration*> mine;
  {
    std::lock_guard<std::mutex> lock(Handles().mu);
    Handles().windows.erase(comm);
    for (auto it = Handles().live.begin(); it != Handles().live.end();) {
      if ((*it)->comm == comm) {
        mine.push_back(*it);
        it = Handles().live.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Registration* reg : mine) {
    if (reg->allocation) ForgetAllocation(reg->allocation);
    if (reg->window_id) g_windows.fetch_sub(1, std::memory_order_relaxed);
    if (!keep_mappings) UnmapPeerWindows(&reg->peers);
    delete reg;
  }
}

NCCL_API_EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  const char* func = "ncclMemAlloc";
  NCCL_CHECK(CheckPtr(ptr, "ptr", func));
  if (size == 0) return Fail(ncclInvalidArgument, std::string(func) + ": size is 0");
  ProbeCudaDriver();
  if (braid::device::DeviceRuntime* rt = braid::device::ActiveDeviceRuntime()) {
    auto p = rt->allocDevice(size);
    if (!p.ok())
      return Fail(ncclUnhandledCudaError, std::string(func) + ": " + p.status().message());
    // Known until ncclMemFree: calls on it are classified without the driver.
    auto info = rt->classify(*p);
    if (info.ok()) RememberAllocation(*info);
    *ptr = *p;
    return ncclSuccess;
  }
  // Host memory, aligned as NCCL's windows require.
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < size)
    return Fail(ncclInvalidArgument,
                std::string(func) + ": size " + std::to_string(size) + " is too large");
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, rounded) != 0)
    return Fail(ncclSystemError,
                std::string(func) + ": cannot allocate " + std::to_string(size) + " bytes");
  *ptr = p;
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

NCCL_API_EXPORT ncclResult_t pncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  if (braid::device::DeviceRuntime* rt = braid::device::ActiveDeviceRuntime()) {
    auto info = ClassifyBuffer(rt, ptr);
    if (info.ok() && info->onDevice()) {
      ForgetAllocation(ptr, /*all=*/true);
      braid::Status st = rt->freeDevice(ptr);
      if (!st.ok()) return Fail(ncclUnhandledCudaError, "ncclMemFree: " + st.message());
      return ncclSuccess;
    }
  }
  std::free(ptr);
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclMemFree, (void* ptr))

NCCL_API_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                               void** handle) {
  NCCL_CHECK(CheckPtr(handle, "handle", "ncclCommRegister"));
  Registration* reg = nullptr;
  NCCL_CHECK(Register(comm, buff, size, &reg, "ncclCommRegister"));
  *handle = reg;
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommRegister,
                (const ncclComm_t comm, void* buff, size_t size, void** handle))

NCCL_API_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return Deregister(comm, handle, "ncclCommDeregister");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))

NCCL_API_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                     ncclWindow_t* win, int winFlags) {
  const char* func = "ncclCommWindowRegister";
  NCCL_CHECK(CheckPtr(win, "win", func));
  if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0)
    return Fail(ncclInvalidArgument,
                std::string(func) + ": invalid winFlags " + std::to_string(winFlags));
  Registration* reg = nullptr;
  NCCL_CHECK(Register(comm, buff, size, &reg, func));
  // Collective: every rank maps its node's peers' windows, or every rank fails.
  PeerWindows peers;
  const ncclResult_t mapped = MapPeerWindows(comm, buff, size, &peers, func);
  if (mapped != ncclSuccess) {
    const std::string why = LastError();
    (void)Deregister(comm, reg, func);
    LastError() = why;
    return mapped;
  }
  {
    std::lock_guard<std::mutex> lock(Handles().mu);
    reg->peers = std::move(peers);
    reg->window_id = ++Handles().windows[comm];
    g_windows.fetch_add(1, std::memory_order_relaxed);
  }
  *win = reinterpret_cast<ncclWindow_t>(reg);
  return ncclSuccess;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommWindowRegister,
                (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))

NCCL_API_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return Deregister(comm, win, "ncclCommWindowDeregister");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
