#include "device/peer_memory.h"

#include <cstring>
#include <string_view>

namespace braid::device {

size_t PeerMemoryMap::HandleHash::operator()(const IpcHandle& h) const {
  return std::hash<std::string_view>()(
      std::string_view(reinterpret_cast<const char*>(h.bytes), IpcHandle::kBytes));
}

PeerMemoryMap::~PeerMemoryMap() {
  for (auto& [h, e] : entries_) (void)runtime_->closePeerAllocation(e.base);
}

Result<void*> PeerMemoryMap::acquire(const IpcHandle& h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(h);
  if (it != entries_.end()) {
    ++it->second.users;
    return it->second.base;
  }
  // Opened under the lock: two threads acquiring one handle must not both open it (the second
  // open fails on CUDA). Opens are rare (a window registration), so the lock's hold is fine.
  ++opens_;
  BRAID_ASSIGN_OR_RETURN(void* base, runtime_->openPeerAllocation(h));
  entries_.emplace(h, Entry{base, 1});
  return base;
}

Status PeerMemoryMap::release(const IpcHandle& h) {
  void* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(h);
    if (it == entries_.end())
      return InvalidArgument("peer memory: the IPC handle was not acquired");
    if (--it->second.users > 0) return Status::Ok();
    base = it->second.base;
    entries_.erase(it);
  }
  return runtime_->closePeerAllocation(base);
}

size_t PeerMemoryMap::mapped() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t PeerMemoryMap::opens() {
  std::lock_guard<std::mutex> lock(mu_);
  return opens_;
}

PeerMemoryMap* ProcessPeerMemory() {
  static std::mutex mu;
  static PeerMemoryMap* map = nullptr;  // leaked on purpose (see the header)
  DeviceRuntime* rt = ActiveDeviceRuntime();
  if (!rt) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!map) map = new PeerMemoryMap(rt);
  return map;
}

}  // namespace braid::device
