#include "nccl/peer_windows.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/runtime/comm_registry.h"
#include "device/peer_memory.h"
#include "nccl/known_buffers.h"
#include "nccl/stream_path.h"

namespace braid::nccl {

namespace {

// One rank's window, as the others see it. Fixed size, so one all-gather of bytes carries it.
struct WindowRecord {
  uint64_t addr = 0;    // the window in its process
  uint64_t size = 0;    // its bytes
  uint64_t offset = 0;  // from its device allocation's start (exported only)
  int32_t pid = 0;
  int32_t status = ncclSuccess;  // a local failure (then `reason`): every rank fails
  int32_t exported = 0;          // `handle` names its device allocation
  int32_t pad = 0;
  device::IpcHandle handle;
  char reason[176] = {};
};

// After the mapping: whether each rank mapped every peer it should have.
struct MapOutcome {
  int32_t status = ncclSuccess;
  char reason[188] = {};
};

template <size_t N>
void SetReason(char (&dst)[N], const std::string& s) {
  std::snprintf(dst, N, "%s", s.c_str());
}

// One all-gather of `mine` over `comm` (host memory, blocking).
template <typename T>
ncclResult_t Exchange(ncclComm_t comm, const T& mine, std::vector<T>* all, int nranks,
                      const char* func) {
  all->assign(static_cast<size_t>(nranks), T{});
  return FromBraid(braidAllGather(&mine, all->data(), sizeof(T), braidUint8, B(comm)), func);
}

}  // namespace

void UnmapPeerWindows(PeerWindows* w) {
  if (!w->acquired.empty())
    if (device::PeerMemoryMap* map = device::ProcessPeerMemory())
      for (const auto& h : w->acquired) (void)map->release(h);
  w->acquired.clear();
  w->peer.clear();
}

ncclResult_t MapPeerWindows(ncclComm_t comm, void* buff, size_t size, PeerWindows* out,
                            const char* func) {
  NCCL_CHECK(BeforeHostCall(comm, func));
  CommRef ref = LookupComm(B(comm));
  if (!ref) return Fail(ncclInvalidArgument, std::string(func) + ": invalid communicator");
  const int me = ref->rank(), n = ref->nranks();
  const std::vector<int>& node_of = ref->layout().node_of;

  WindowRecord mine;
  mine.addr = reinterpret_cast<uintptr_t>(buff);
  mine.size = size;
  mine.pid = static_cast<int32_t>(getpid());
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (rt) {
    auto info = ClassifyBuffer(rt, buff);
    if (!info.ok()) {
      mine.status = ncclUnhandledCudaError;
      SetReason(mine.reason, info.status().message());
    } else if (info->onDevice()) {
      if (!info->covers(buff, size)) {
        mine.status = ncclInvalidArgument;
        SetReason(mine.reason, std::to_string(size) + " bytes at " + device::PointerText(buff) +
                                   " run past the end of their device allocation");
      } else if (info->kind == device::MemoryKind::kDevice) {
        auto h = rt->exportAllocation(info->base);
        if (h.ok()) {
          mine.handle = *h;
          mine.exported = 1;
          mine.offset = mine.addr - reinterpret_cast<uintptr_t>(info->base);
        } else {
          // Not fatal: the window is then reachable from its own process only.
          SetReason(mine.reason, h.status().message());
        }
      }
    }
  }
  std::vector<WindowRecord> all;
  NCCL_CHECK(Exchange(comm, mine, &all, n, func));
  for (int r = 0; r < n; ++r)
    if (all[r].status != ncclSuccess)
      return Fail(static_cast<ncclResult_t>(all[r].status),
                  std::string(func) + ": rank " + std::to_string(r) + "'s window: " +
                      std::string(all[r].reason, strnlen(all[r].reason, sizeof(all[r].reason))));

  PeerWindows w;
  w.peer.assign(static_cast<size_t>(n), nullptr);
  w.peer[static_cast<size_t>(me)] = buff;
  MapOutcome outcome;
  device::PeerMemoryMap* map = rt ? device::ProcessPeerMemory() : nullptr;
  for (int r = 0; r < n && outcome.status == ncclSuccess; ++r) {
    const WindowRecord& rec = all[static_cast<size_t>(r)];
    if (r == me || node_of[static_cast<size_t>(r)] != node_of[static_cast<size_t>(me)]) continue;
    if (rec.pid == mine.pid) {
      // A rank of this process (ranks as threads): its address is valid here.
      w.peer[static_cast<size_t>(r)] = reinterpret_cast<void*>(rec.addr);
      continue;
    }
    if (!rec.exported || !map) continue;  // host memory: not mapped
    auto base = map->acquire(rec.handle);
    if (!base.ok()) {
      outcome.status = ncclUnhandledCudaError;
      SetReason(outcome.reason, "cannot map rank " + std::to_string(r) + "'s window (process " +
                                    std::to_string(rec.pid) + "): " + base.status().message());
      break;
    }
    w.acquired.push_back(rec.handle);
    w.peer[static_cast<size_t>(r)] = static_cast<char*>(*base) + rec.offset;
  }
  // Every rank learns whether every rank mapped its peers: a window is usable everywhere or
  // nowhere.
  std::vector<MapOutcome> outcomes;
  const ncclResult_t ex = Exchange(comm, outcome, &outcomes, n, func);
  if (ex != ncclSuccess) {
    UnmapPeerWindows(&w);
    return ex;
  }
  for (int r = 0; r < n; ++r)
    if (outcomes[r].status != ncclSuccess) {
      UnmapPeerWindows(&w);
      return Fail(static_cast<ncclResult_t>(outcomes[r].status),
                  std::string(func) + ": rank " + std::to_string(r) + " " +
                      std::string(outcomes[r].reason,
                                  strnlen(outcomes[r].reason, sizeof(outcomes[r].reason))));
    }
  *out = std::move(w);
  return ncclSuccess;
}

}  // namespace braid::nccl
