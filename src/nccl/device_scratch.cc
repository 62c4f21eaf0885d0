#include "nccl/device_scratch.h"

#include <bit>
#include <mutex>
#include <map>
#include <utility>
#include <vector>

namespace braid::nccl {

namespace {

struct Scratch {
  device::DeviceRuntime* rt = nullptr;
  bool host_mapped = false;
  void* ptr = nullptr;
  size_t bytes = 0;
  std::vector<void*> replaced;  // older, smaller buffers: freed with the communicator
  size_t held = 0;              // bytes of ptr and of the replaced ones
};

struct AllScratch {
  std::mutex mu;
  std::map<std::pair<ncclComm_t, ScratchUse>, Scratch> by_comm;
  size_t held = 0;
};
AllScratch& TheScratch() {
  static auto* s = new AllScratch;  // leaked: communicators may be destroyed during exit
  return *s;
}

}  // namespace

Result<void*> DeviceScratch(ncclComm_t comm, device::DeviceRuntime* rt, size_t bytes,
                            ScratchUse use) {
  AllScratch& all = TheScratch();
  std::lock_guard<std::mutex> lock(all.mu);
  Scratch& s = all.by_comm[{comm, use}];
  if (s.ptr && s.bytes >= bytes) return s.ptr;
  const size_t want = std::bit_ceil(std::max<size_t>(bytes, 4096));
  const bool host_mapped = use != ScratchUse::kInPlaceInput;
  auto p = host_mapped ? rt->allocHostMapped(want) : rt->allocDevice(want);
  if (!p.ok())
    return Status(p.status())
        .prepend("allocating " + std::to_string(want) + " bytes of " +
                 (host_mapped ? "host-mapped" : "device") + " scratch: ");
  if (s.ptr) s.replaced.push_back(s.ptr);
  s.rt = rt;
  s.host_mapped = host_mapped;
  s.ptr = *p;
  s.bytes = want;
  s.held += want;
  all.held += want;
  return s.ptr;
}

void DropDeviceScratch(ncclComm_t comm, bool keep) {
  std::vector<Scratch> dropped;
  {
    AllScratch& all = TheScratch();
    std::lock_guard<std::mutex> lock(all.mu);
    for (auto it = all.by_comm.lower_bound({comm, ScratchUse{}});
         it != all.by_comm.end() && it->first.first == comm;) {
      all.held -= it->second.held;
      dropped.push_back(std::move(it->second));
      it = all.by_comm.erase(it);
    }
  }
  if (keep) return;  // an abort's kernel may still read them: never freed
  for (Scratch& s : dropped) {
    if (!s.ptr) continue;
    s.replaced.push_back(s.ptr);
    for (void* p : s.replaced)  // the agent stopped: nothing uses them
      (void)(s.host_mapped ? s.rt->freeHostMapped(p) : s.rt->freeDevice(p));
  }
}

size_t DeviceScratchBytes() {
  AllScratch& all = TheScratch();
  std::lock_guard<std::mutex> lock(all.mu);
  return all.held;
}

}  // namespace braid::nccl
