#include "nccl/peer_buffers.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include <unistd.h>

#include "device/peer_memory.h"

namespace braid::nccl {

namespace {

std::atomic<uint64_t> g_calls{0};

struct Caches {
  std::mutex mu;
  std::map<ncclComm_t, std::shared_ptr<PeerAllocationCache>> by_comm;
};
Caches& AllCaches() {
  static auto* c = new Caches;  // never destroyed: agents may outlive static destruction
  return *c;
}

bool Overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
  return a < b + bn && b < a + an;
}

}  // namespace

bool MakePeerBufferRecord(device::DeviceRuntime* rt, const void* p, const device::PointerInfo& info,
                          PeerBufferRecord* out) {
  // Managed memory has no IPC handle; an allocation of unknown extent cannot be described.
  if (info.kind != device::MemoryKind::kDevice || !info.base || info.size == 0) return false;
  auto h = rt->exportAllocation(info.base);
  if (!h.ok()) return false;
  out->handle = *h;
  out->base = reinterpret_cast<uintptr_t>(info.base);
  out->size = info.size;
  out->offset = reinterpret_cast<uintptr_t>(p) - out->base;
  out->present = 1;
  return true;
}

PeerAllocationCache::PeerAllocationCache(device::DeviceRuntime* runtime, int rank, int32_t pid)
    : runtime_(runtime), rank_(rank), pid_(pid) {}

PeerAllocationCache::~PeerAllocationCache() {
  if (leaked_) return;
  while (!entries_.empty()) drop(entries_.size() - 1);
}

size_t PeerAllocationCache::mapped() const {
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.local; }));
}

void PeerAllocationCache::drop(size_t i) {
  if (entries_[i].local && !leaked_)
    if (device::PeerMemoryMap* map = device::ProcessPeerMemory())
      (void)map->release(entries_[i].handle);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
}

bool PeerAllocationCache::note(const std::vector<std::vector<PeerBufferRecord>>& records,
                               const std::vector<int32_t>& pids) {
  ++clock_;
  bool any_new = false;
  for (size_t owner = 0; owner < records.size(); ++owner) {
    for (const PeerBufferRecord& rec : records[owner]) {
      if (!rec.present) continue;
      const int o = static_cast<int>(owner);
      auto same = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
        return e.owner == o && e.handle == rec.handle;
      });
      if (same != entries_.end()) {
        same->last_use = clock_;
        continue;
      }
      // An allocation of the same owner at an overlapping range was freed (a handle names one
      // allocation): its mapping goes, before the new one is made.
      for (size_t i = entries_.size(); i-- > 0;)
        if (entries_[i].owner == o &&
            Overlaps(entries_[i].base, entries_[i].size, rec.base, rec.size))
          drop(i);
      Entry e;
      e.owner = o;
      e.handle = rec.handle;
      e.base = rec.base;
      e.size = rec.size;
      e.pid = pids[owner];
      e.last_use = clock_;
      e.fresh = true;
      entries_.push_back(e);
      any_new = true;
      // The owner's least recently used entries beyond the cap (never one of this call's).
      for (;;) {
        size_t n = 0, oldest = entries_.size();
        for (size_t i = 0; i < entries_.size(); ++i) {
          if (entries_[i].owner != o) continue;
          ++n;
          if (entries_[i].last_use != clock_ &&
              (oldest == entries_.size() || entries_[i].last_use < entries_[oldest].last_use))
            oldest = i;
        }
        if (n <= kMaxPerOwner || oldest == entries_.size()) break;
        drop(oldest);
      }
    }
  }
  return any_new;
}

Status PeerAllocationCache::mapNew() {
  device::PeerMemoryMap* map = device::ProcessPeerMemory();
  for (Entry& e : entries_) {
    if (!e.fresh || e.owner == rank_ || e.pid == pid_) continue;
    if (!map) return SystemError("no device runtime to map peer memory with");
    auto base = map->acquire(e.handle);
    ++opens_;
    if (!base.ok())
      return Status(base.status())
          .prepend("cannot map rank " + std::to_string(e.owner) + "'s device buffer (process " +
                   std::to_string(e.pid) + "): ");
    e.local = *base;
  }
  return Status::Ok();
}

void PeerAllocationCache::settle(bool everyone_mapped) {
  for (size_t i = entries_.size(); i-- > 0;) {
    if (!entries_[i].fresh) continue;
    if (everyone_mapped)
      entries_[i].fresh = false;
    else
      drop(i);
  }
}

void* PeerAllocationCache::where(int owner, const PeerBufferRecord& rec, int32_t owner_pid,
                                 void* mine) const {
  if (owner == rank_) return mine;
  if (owner_pid == pid_) return reinterpret_cast<void*>(rec.base + rec.offset);
  for (const Entry& e : entries_)
    if (e.owner == owner && e.handle == rec.handle)
      return e.local ? static_cast<char*>(e.local) + rec.offset : nullptr;
  return nullptr;
}

std::shared_ptr<PeerAllocationCache> PeerCacheFor(ncclComm_t comm, device::DeviceRuntime* rt,
                                                  int rank) {
  Caches& c = AllCaches();
  std::lock_guard<std::mutex> lock(c.mu);
  auto& slot = c.by_comm[comm];
  if (!slot) slot = std::make_shared<PeerAllocationCache>(rt, rank, static_cast<int32_t>(getpid()));
  return slot;
}

void DropPeerCache(ncclComm_t comm, bool keep_mappings) {
  std::shared_ptr<PeerAllocationCache> cache;
  {
    Caches& c = AllCaches();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.by_comm.find(comm);
    if (it == c.by_comm.end()) return;
    cache = std::move(it->second);
    c.by_comm.erase(it);
  }
  // The agent has stopped (destroy and abort shut it down first): nothing else uses the cache.
  if (keep_mappings) cache->leak();
}

PeerPointerPool& PeerPointerPool::For(device::DeviceRuntime* runtime) {
  static std::mutex mu;
  static auto* pools = new std::map<device::DeviceRuntime*, PeerPointerPool*>;
  std::lock_guard<std::mutex> lock(mu);
  PeerPointerPool*& p = (*pools)[runtime];
  if (!p) p = new PeerPointerPool(runtime);
  return *p;
}

Result<device::PeerPointers*> PeerPointerPool::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    BRAID_ASSIGN_OR_RETURN(void* block,
                           runtime_->allocHostMapped(kPerBlock * sizeof(device::PeerPointers)));
    auto* t = static_cast<device::PeerPointers*>(block);
    for (size_t i = kPerBlock; i-- > 0;) free_.push_back(t + i);
    allocated_ += kPerBlock;
  }
  device::PeerPointers* t = free_.back();
  free_.pop_back();
  return t;
}

void PeerPointerPool::release(device::PeerPointers* t) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(t);
}

size_t PeerPointerPool::allocated() {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t PeerPointerPool::inUse() {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_ - free_.size();
}

uint64_t PeerBufferCalls() {
  return g_calls.load(std::memory_order_relaxed);
}
void CountPeerBufferCall() {
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace braid::nccl
