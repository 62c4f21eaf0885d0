#include "nccl/known_buffers.h"

#include <atomic>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace braid::nccl {

namespace {

struct Entry {
  uintptr_t end;
  device::PointerInfo info;
  int refs;
};

struct Known {
  std::shared_mutex mu;
  std::map<uintptr_t, Entry> by_base;  // allocations never overlap
  // Nonzero while anything is remembered: a process that never registers pays one load.
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> hits{0};
};

Known& Table() {
  static Known* k = new Known;  // leaked: frees may come during exit
  return *k;
}

}  // namespace

void RememberAllocation(const device::PointerInfo& info) {
  if (info.kind == device::MemoryKind::kHost || !info.base || info.size == 0) return;
  Known& k = Table();
  std::unique_lock<std::shared_mutex> lock(k.mu);
  const auto base = reinterpret_cast<uintptr_t>(info.base);
  auto [it, added] = k.by_base.try_emplace(base, Entry{base + info.size, info, 0});
  // The runtime's answer of now wins over an entry left at this address (a use of it that ended
  // without its free being seen): its range and its kind.
  if (!added && it->second.end != base + info.size) it->second.refs = 0;
  it->second.end = base + info.size;
  it->second.info = info;
  ++it->second.refs;
  k.count.store(k.by_base.size(), std::memory_order_release);
}

void ForgetAllocation(const void* base, bool all) {
  Known& k = Table();
  std::unique_lock<std::shared_mutex> lock(k.mu);
  auto it = k.by_base.find(reinterpret_cast<uintptr_t>(base));
  if (it == k.by_base.end()) return;
  if (all || --it->second.refs <= 0) k.by_base.erase(it);
  k.count.store(k.by_base.size(), std::memory_order_release);
}

std::optional<device::PointerInfo> KnownAllocation(const void* p) {
  Known& k = Table();
  if (k.count.load(std::memory_order_acquire) == 0) return std::nullopt;
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::shared_lock<std::shared_mutex> lock(k.mu);
  auto it = k.by_base.upper_bound(a);
  if (it == k.by_base.begin()) return std::nullopt;
  --it;
  if (a >= it->second.end) return std::nullopt;
  k.hits.fetch_add(1, std::memory_order_relaxed);
  return it->second.info;
}

Result<device::PointerInfo> ClassifyBuffer(device::DeviceRuntime* rt, const void* p) {
  if (auto known = KnownAllocation(p)) return *known;
  return rt->classify(p);
}

KnownAllocationStats KnownAllocationCounts() {
  Known& k = Table();
  return {k.count.load(), k.hits.load()};
}

}  // namespace braid::nccl
