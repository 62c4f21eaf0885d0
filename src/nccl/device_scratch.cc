#include "nccl/device_scratch.h"

#include <bit>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace braid::nccl {

namespace {

struct Scratch {
  device::DeviceRuntime* rt = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  std::vector<void*> replaced;  // older, smaller buffers: freed with the communicator
  size_t held = 0;              // bytes of ptr and of the replaced ones
};

struct AllScratch {
  std::mutex mu;
  std::unordered_map<ncclComm_t, Scratch> by_comm;
  size_t held = 0;
};
AllScratch& TheScratch() {
  static auto* s = new AllScratch;  // leaked: communicators may be destroyed during exit
  return *s;
}

}  // namespace

Result<void*> DeviceScratch(ncclComm_t comm, device::DeviceRuntime* rt, size_t bytes) {
  AllScratch& all = TheScratch();
  std::lock_guard<std::mutex> lock(all.mu);
  Scratch& s = all.by_comm[comm];
  if (s.ptr && s.bytes >= bytes) return s.ptr;
  const size_t want = std::bit_ceil(std::max<size_t>(bytes, 4096));
  auto p = rt->allocDevice(want);
  if (!p.ok())
    return Status(p.status())
        .prepend("allocating " + std::to_string(want) + " bytes of device scratch: ");
  if (s.ptr) s.replaced.push_back(s.ptr);
  s.rt = rt;
  s.ptr = *p;
  s.bytes = want;
  s.held += want;
  all.held += want;
  return s.ptr;
}

void DropDeviceScratch(ncclComm_t comm, bool keep) {
  Scratch s;
  {
    AllScratch& all = TheScratch();
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = all.by_comm.find(comm);
    if (it == all.by_comm.end()) return;
    s = std::move(it->second);
    all.by_comm.erase(it);
    all.held -= s.held;
  }
  if (keep || !s.ptr) return;  // an abort's kernel may still read it: never freed
  s.replaced.push_back(s.ptr);
  for (void* p : s.replaced) (void)s.rt->freeDevice(p);  // the agent stopped: nothing uses them
}

size_t DeviceScratchBytes() {
  AllScratch& all = TheScratch();
  std::lock_guard<std::mutex> lock(all.mu);
  return all.held;
}

}  // namespace braid::nccl
