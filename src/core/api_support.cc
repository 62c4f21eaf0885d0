#include "core/api_support.h"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/group.h"

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

thread_local std::string t_last_error;

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
  return ref;
}

CommRef LookupComm(braidComm_t comm) {
  if (!comm) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Registry().find(comm);
  return it == Registry().end() ? nullptr : it->second;
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

braidResult_t Fail(braidComm* comm, const Status& st) {
  t_last_error = st.message();
  if (comm) comm->setLastError(st.message());
  return st.code();
}

braidResult_t Fail(const Status& st) {
  return Fail(nullptr, st);
}

const char* ThreadLastError() {
  return t_last_error.c_str();
}

braidResult_t RunOperation(const CommRef& comm, std::shared_ptr<Operation> op,
                           braidRequest_t* request) {
  if (InGroup()) {
    GroupAddCollective(comm, op, request == nullptr);
    if (request) *request = new braidRequest{op};
    return braidSuccess;
  }
  if (request) {
    comm->submit(op);
    *request = new braidRequest{std::move(op)};
    return braidSuccess;
  }
  if (!comm->config().inline_blocking || !comm->runInline(*op)) {
    comm->submit(op);
    op->wait(Deadline::Never(), comm->config().spin_us);
  }
  if (!op->status().ok()) return Fail(comm.get(), op->status());
  return braidSuccess;
}

braidResult_t InitChildComm(const braidComm& parent, braidComm_t* child, int nranks,
                            const braidUniqueId& id, int rank, const braidConfig_t* config) {
  braidConfig_t inherited = BRAID_CONFIG_INITIALIZER;
  const std::string& transports = parent.config().transports;
  const std::string& algo = parent.config().algo;
  if (!config) {
    inherited.timeout_ms = parent.config().timeout_ms;
    inherited.transports = transports.empty() ? nullptr : transports.c_str();
    inherited.algorithms = algo.empty() ? nullptr : algo.c_str();
    config = &inherited;
  }
  return InitComm(child, nranks, id, rank, config, &parent.tuner().model());
}

Status RunInternal(const CommRef& comm, OpDesc desc) {
  auto op = std::make_shared<Operation>(std::move(desc));
  if (!comm->runInline(*op)) {
    comm->submit(op);
    op->wait(Deadline::Never(), comm->config().spin_us);
  }
  return op->status();
}

}  // namespace braid
