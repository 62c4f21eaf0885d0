// Peer device memory mapped into this process (CUDA IPC; issue 39's intra-node GPU path), opened
// once per allocation and counted. CUDA lets a process open another process's allocation only
// once per device context (a second cuIpcOpenMemHandle of the same handle fails), and opening
// costs milliseconds, so every user of a peer allocation (windows of several communicators, a
// window registered twice) goes through one map per runtime: the first acquire opens it, the
// last release closes it.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "device/device_runtime.h"

namespace braid::device {

class PeerMemoryMap {
 public:
  explicit PeerMemoryMap(DeviceRuntime* runtime) : runtime_(runtime) {}
  // Closes what is still open (a runtime's map lives as long as the process; tests' maps not).
  ~PeerMemoryMap();
  PeerMemoryMap(const PeerMemoryMap&) = delete;
  PeerMemoryMap& operator=(const PeerMemoryMap&) = delete;

  // The base, in this process, of the peer allocation `h` names: opened on the first acquire,
  // one more user after that. The runtime's error when it cannot be opened (nothing counted).
  Result<void*> acquire(const IpcHandle& h);
  // One user less of the allocation `h` names; closed when none is left. InvalidArgument for a
  // handle that is not acquired.
  Status release(const IpcHandle& h);

  size_t mapped();   // peer allocations open now
  uint64_t opens();  // openPeerAllocation calls made (tests: an allocation is opened once)

 private:
  struct HandleHash {
    size_t operator()(const IpcHandle& h) const;
  };
  struct Entry {
    void* base = nullptr;
    size_t users = 0;
  };
  DeviceRuntime* const runtime_;
  std::mutex mu_;
  std::unordered_map<IpcHandle, Entry, HandleHash> entries_;
  uint64_t opens_ = 0;
};

// The map of the process's runtime (ActiveDeviceRuntime), made on first use and never freed
// (mappings may be released while the process exits). Null without a runtime.
PeerMemoryMap* ProcessPeerMemory();

}  // namespace braid::device
