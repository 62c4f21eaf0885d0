#include "core/runtime/comm_registry.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <openssl/crypto.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace braid {
namespace {

std::mutex g_mu;
std::unordered_map<braidComm_t, CommRef>& Registry() {
  static auto* r = new std::unordered_map<braidComm_t, CommRef>();  // never destroyed: safe at exit
  return *r;
}

// Handle values. A handle is not the object's address: the allocator reuses addresses, and a
// stale handle that aliased a new communicator would silently act on it. Handles are addresses
// in a reserved, inaccessible region, handed out in order and never twice (2^26 of them before
// the sequence wraps), so an application that dereferences one faults at once instead of
// reading our memory. Guarded by g_mu.
braidComm_t NextHandle() {
  constexpr size_t kRegionBytes = size_t{1} << 30;
  constexpr size_t kStride = 16;
  static uintptr_t base = [] {
    void* p =
        mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    // Without the reservation (address-space limit), fall back to a fixed unmapped-looking
    // range of odd values that no allocation returns (allocations are 16-aligned).
    return p == MAP_FAILED ? uintptr_t{0x7} : reinterpret_cast<uintptr_t>(p);
  }();
  static size_t next = 0;
  uintptr_t v = base + (next++ % (kRegionBytes / kStride)) * kStride;
  return reinterpret_cast<braidComm_t>(v);
}

// Handles unregistered so far (LookupComm's per-thread caches compare it).
std::atomic<uint64_t> g_unregistered{0};

struct LookupCache {
  braidComm_t handle = nullptr;
  std::weak_ptr<braidComm> ref;
  uint64_t unregistered = 0;
};

}  // namespace

braidComm_t RegisterComm(CommRef comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  braidComm_t handle = NextHandle();
  Registry()[handle] = std::move(comm);
  return handle;
}

CommRef UnregisterComm(braidComm_t comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Registry().find(comm);
  if (it == Registry().end()) return nullptr;
  CommRef ref = std::move(it->second);
  Registry().erase(it);
  // Every thread's cached lookup (LookupComm) is stale from here on.
  g_unregistered.fetch_add(1, std::memory_order_release);
  return ref;
}

CommRef LookupComm(braidComm_t comm) {
  if (!comm) return nullptr;
  // A thread usually calls on the same communicator again and again: its last lookup is cached,
  // which spares every call the registry's mutex and hash (a small call on the board costs
  // about as much as a dozen such steps). The cache is good while no handle has been
  // unregistered since it was filled: handles are never reused, so a cached handle that is still
  // registered maps to the same communicator. It holds a weak reference, so a destroyed
  // communicator is freed when its last call returns, not when this thread next calls.
  thread_local LookupCache cache;
  const uint64_t unregistered = g_unregistered.load(std::memory_order_acquire);
  if (comm == cache.handle && unregistered == cache.unregistered)
    if (CommRef ref = cache.ref.lock()) return ref;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Registry().find(comm);
  if (it == Registry().end()) return nullptr;
  // Read under the mutex, which every unregister takes: the entry is live as of this count.
  cache = {comm, it->second, g_unregistered.load(std::memory_order_relaxed)};
  return it->second;
}

std::vector<CommRef> LiveComms() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<CommRef> out;
  out.reserve(Registry().size());
  for (const auto& [handle, ref] : Registry()) out.push_back(ref);
  return out;
}

Result<CommRef> UsableComm(braidComm_t comm) {
  if (!comm) return InvalidArgument("the communicator is NULL");
  CommRef ref = LookupComm(comm);
  if (!ref)
    return InvalidUsage(
        "the communicator handle is not live: it was destroyed or aborted, or never initialised");
  switch (ref->state()) {
    case braidComm::State::kInitializing:
      return InvalidUsage(
          ref->where() +
          ": init is still in progress (non-blocking communicator or open group): poll "
          "braidCommGetAsyncError until it returns braidSuccess");
    case braidComm::State::kFailed: {
      Status st = InvalidUsage("the communicator's init failed: " + ref->asyncError().message());
      return st;
    }
    default:
      break;
  }
  return ref;
}

namespace {

// A process that exits without destroying its communicators (returning from main, exit()) leaves
// each with every call complete: a peer still waiting, or calling later, is told "exited" rather
// than "died" (issue 42; braidComm::leave). Only this process's own communicators: a child of
// fork() inherits the registry and must not speak on its parent's streams. _exit, a signal or a
// crash run no hook: peers then name a death, as they should.
void LeaveAtExit() {
  for (const CommRef& c : LiveComms()) c->leave(FailureCause::Reason::kExited);
}

}  // namespace

// Installed once a communicator is ready (everything its init set up exists), and after OpenSSL's
// own exit handler: handlers run in the reverse order of their installation, and the leaving
// rank's notices still need OpenSSL (the control handshake).
void InstallLeaveAtExit() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)OPENSSL_init_crypto(0, nullptr);
    (void)std::atexit(LeaveAtExit);
  });
}

}  // namespace braid
