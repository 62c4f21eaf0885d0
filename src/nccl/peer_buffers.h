// Peer buffers: the intra-node GPU path for device buffers that no window maps (issue 39). A
// program that never registers its buffers (PyTorch's NCCL backend, DeepSpeed, most trainers)
// would otherwise stage every byte through pinned host memory. Instead, each call carries, in the
// ranks' agreement before the device work may start, every rank's buffer as (the CUDA IPC handle
// of its allocation, its offset there); each rank maps the peer allocations it has not mapped
// yet, keeps them for later calls, and the kernel, queued when the call was made, reads where its
// peers' buffers are from a host-mapped table (device/peer_pointers.h) that the agent fills in
// before it lets the kernel start.
//
// Deciding alike. Whether a call runs here or stages is decided by each rank alone when the call
// is made, from what every rank knows the same way: the communicator's probe at init (every rank
// could map its node's device memory: braidComm::deviceIpc), one node, the call's arguments, and
// this rank's buffers being device allocations it can export. A rank whose buffers cannot be
// exported (host memory, managed memory, cuMem/VMM allocations, which legacy CUDA IPC does not
// share) stages; a peer that did not fails both with a call mismatch, never a hang.
//
// The cache of mapped peer allocations is replicated: every rank applies the same records (every
// rank's, from one all-gather) in the same order with the same rules, so every rank knows, without
// asking, whether some rank must map something new. Only then do the ranks exchange whether each
// mapped what it had to (a second all-gather): in the steady state (a training loop reusing its
// allocator's segments) a call costs one all-gather and one barrier, as on windows. Rules:
//   - an entry is (owner rank, handle); a handle names one allocation (CUDA gives a new handle to
//     memory allocated again at a freed address), so a new handle whose range overlaps an
//     entry of the same owner means that entry's allocation was freed: it is unmapped;
//   - at most kMaxPerOwner entries per owner, the least recently used unmapped first;
//   - a mapping is released only between calls (the previous call's kernels have ended on every
//     rank: its barrier), never under a kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "device/device_runtime.h"
#include "nccl/shim.h"

namespace braid::nccl {

// One rank's buffer in a call, as the others see it. Plain data (exchanged as bytes).
struct PeerBufferRecord {
  device::IpcHandle handle;  // its allocation's
  uint64_t base = 0;         // the allocation's address in its owner's process
  uint64_t size = 0;         // the allocation's bytes
  uint64_t offset = 0;       // the buffer's offset in the allocation
  int32_t present = 0;       // 0: the rank shares no such buffer in this call
  int32_t pad = 0;
};

// This rank's buffer `p` (device memory described by `info`) as a record. False when it cannot
// be shared (not a device allocation, or its allocation cannot be exported).
bool MakePeerBufferRecord(device::DeviceRuntime* rt, const void* p, const device::PointerInfo& info,
                          PeerBufferRecord* out);

class PeerAllocationCache {
 public:
  static constexpr size_t kMaxPerOwner = 64;

  PeerAllocationCache(device::DeviceRuntime* runtime, int rank, int32_t pid);
  // Unmaps what this rank mapped, unless leak() was called (a kernel may still use it).
  ~PeerAllocationCache();
  PeerAllocationCache(const PeerAllocationCache&) = delete;
  PeerAllocationCache& operator=(const PeerAllocationCache&) = delete;

  // Notes the allocations a call names: records[r] are rank r's, pids[r] its process. The
  // same on every rank. True when some entry is new (it must be mapped before the call runs).
  bool note(const std::vector<std::vector<PeerBufferRecord>>& records,
            const std::vector<int32_t>& pids);
  // Maps this rank's share of the new entries (those of other processes). The first failure.
  Status mapNew();
  // After the exchange of outcomes: keeps the new entries (every rank mapped its share) or drops
  // them (some rank did not), on every rank alike.
  void settle(bool everyone_mapped);
  // Where rank `owner`'s buffer `rec` is in this process (the owner's own address for a rank of
  // this process; `mine` for this rank). Null when it is not mapped.
  void* where(int owner, const PeerBufferRecord& rec, int32_t owner_pid, void* mine) const;
  // Forget the mappings without closing them.
  void leak() { leaked_ = true; }

  size_t entries() const { return entries_.size(); }
  size_t mapped() const;  // mappings this rank holds
  uint64_t opens() const { return opens_; }

 private:
  struct Entry {
    int owner = 0;
    device::IpcHandle handle;
    uint64_t base = 0, size = 0;
    int32_t pid = 0;
    uint64_t last_use = 0;
    bool fresh = false;     // noted by the call being agreed, not yet settled
    void* local = nullptr;  // this process's mapping (acquired in ProcessPeerMemory)
  };
  void drop(size_t i);  // unmaps (if mapped here) and erases entries_[i]

  device::DeviceRuntime* const runtime_;
  const int rank_;
  const int32_t pid_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  uint64_t opens_ = 0;
  bool leaked_ = false;
};

// The cache of `comm` (made on first use). Used on the communicator's stream agent only.
std::shared_ptr<PeerAllocationCache> PeerCacheFor(ncclComm_t comm, device::DeviceRuntime* rt,
                                                  int rank);
// At destroy or abort: forgets `comm`'s cache; its mappings are closed once the last call
// holding it is gone, or never (`keep_mappings`: device work may still run).
void DropPeerCache(ncclComm_t comm, bool keep_mappings);

// Host-mapped tables of late-bound pointers (device/peer_pointers.h), one per call in flight on
// the device path, reused once the agent saw the call's device work end (the kernel read its
// table). A process-wide pool per runtime; blocks are never freed (a stream may still hold one
// after an abort).
class PeerPointerPool {
 public:
  static PeerPointerPool& For(device::DeviceRuntime* runtime);
  explicit PeerPointerPool(device::DeviceRuntime* runtime) : runtime_(runtime) {}
  Result<device::PeerPointers*> acquire();
  void release(device::PeerPointers* t);
  size_t allocated();
  size_t inUse();  // acquired and not released (tests)

 private:
  static constexpr size_t kPerBlock = 32;
  device::DeviceRuntime* runtime_;
  std::mutex mu_;
  std::vector<device::PeerPointers*> free_;
  size_t allocated_ = 0;
};

// Calls that took the peer-buffer path in this process (tests).
uint64_t PeerBufferCalls();
void CountPeerBufferCall();

}  // namespace braid::nccl
