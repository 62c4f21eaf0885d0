// The device runtime: what braid needs from a GPU runtime to keep NCCL's stream semantics for
// device buffers (DESIGN.md 2.5): classify a pointer, allocate device and host-mapped memory, copy
// on a stream, write and wait for 32-bit host-mapped flags on a stream, synchronise a stream.
//
// Two implementations: device/cuda/cuda_runtime_driver.h (the CUDA driver API, taken from a
// libcuda.so.1 the application loaded) and device/cpu/emulated_device.h (host memory and host
// threads), which is what CI runs, so the device path's logic (flag protocol, staging, error
// paths) is tested without a GPU. Kernels are not part of this interface: they are
// device/cuda/kernels.h and device/cpu/*_kernels.h.
//
// Streams are opaque handles: a CUstream (== cudaStream_t) for CUDA, where 0 is the legacy default
// stream; an emulated stream for the emulated device, where 0 is its default stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "core/base/status.h"
#include "device/peer_pointers.h"

namespace braid::device {

enum class MemoryKind : uint8_t {
  kHost,        // ordinary (pageable) host memory, or memory no runtime knows
  kPinnedHost,  // page-locked host memory known to the runtime (also device-visible when mapped)
  kDevice,      // device memory: never dereferenced on the host
  kManaged,     // managed (unified) memory: treated as device memory (staged), which is always safe
};
const char* MemoryKindName(MemoryKind k);  // "host", "pinned host", "device", "managed"
// "0x7f12..." for error messages naming a buffer, a stream or a flag.
std::string PointerText(const void* p);

// What a pointer is. For runtime allocations, the allocation's range, so that a buffer running
// past its allocation is refused before any copy touches it.
struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;             // the device's ordinal for device/managed memory, else -1
  const void* base = nullptr;  // start of the allocation (null when unknown, e.g. pageable host)
  size_t size = 0;             // bytes of the allocation (0 when unknown)

  bool onDevice() const { return kind == MemoryKind::kDevice || kind == MemoryKind::kManaged; }
  // [p, p + bytes) lies inside the allocation (always true when the range is unknown).
  bool covers(const void* p, size_t bytes) const;
};

using StreamHandle = void*;  // CUstream / cudaStream_t, or an emulated stream

// A device allocation made shareable with other processes of the node (CUDA IPC): the bytes of a
// CUipcMemHandle (64) for CUDA, the emulated device's own description otherwise. Plain bytes,
// so it travels in any message and compares with memcmp.
struct IpcHandle {
  static constexpr size_t kBytes = 64;
  unsigned char bytes[kBytes] = {};
  bool operator==(const IpcHandle&) const = default;
};

// Flag values are compared cyclically, as cuStreamWaitValue32's CU_STREAM_WAIT_VALUE_GEQ does
// ((int32_t)(flag - value) >= 0): a flag whose value only ever increases by small steps stays
// correct across the 32-bit wrap.
inline bool FlagReached(uint32_t flag, uint32_t value) {
  return static_cast<int32_t>(flag - value) >= 0;
}

// One rank's part of a collective over buffers of every rank of the node that this rank can
// address (peer windows, nccl/peer_windows.h): for i < count, acc = src[0][i] (op) src[1][i]
// (op) ... in order, divided by `divide_by` when it is > 1 (AVG, as DivideKernel), then written
// to every dst[j][i]. An all-reduce gives rank r segment r of every rank's input as sources and
// of every rank's output as destinations; an all-gather one source (its block) and every rank's
// output; a reduce-scatter every rank's block r and one destination. Queued on a stream; it does
// nothing when the host-mapped word `skip` holds `skip_value` when it runs (the ranks disagreed
// on the call).
//
// Pairwise (all-to-all): sources and destinations pair up, dst[k][i] = src[k][i] for each k, no
// reduction (one kernel for a rank's block to every peer, where a reduce would need one each).
struct PeerReduce {
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t divide_by = 0;
  std::vector<const void*> src;  // at least one
  std::vector<void*> dst;        // at least one
  size_t count = 0;              // elements of the segment (pairwise: of each pair)
  bool pairwise = false;         // as many sources as destinations; op and divide_by unused
  const uint32_t* skip = nullptr;
  uint32_t skip_value = 0;
  // Late binding (device/peer_pointers.h): when set, src and dst are empty and the kernel takes
  // `late_src` sources and `late_dst` destinations from this host-mapped table as it runs.
  const PeerPointers* late = nullptr;
  int late_src = 0, late_dst = 0;
  size_t sources() const { return late ? static_cast<size_t>(late_src) : src.size(); }
  size_t destinations() const { return late ? static_cast<size_t>(late_dst) : dst.size(); }
  // The shape every runtime checks before it queues the work: 1 to kMaxPeerRanks sources and
  // destinations (as many of each when pairwise, with no division), a `skip` word, and either
  // pointers or a late table.
  bool wellFormed() const {
    const size_t ns = sources(), nd = destinations();
    return ns >= 1 && nd >= 1 && ns <= static_cast<size_t>(kMaxPeerRanks) &&
           nd <= static_cast<size_t>(kMaxPeerRanks) && skip != nullptr &&
           (!late || (src.empty() && dst.empty())) && (!pairwise || (ns == nd && divide_by == 0));
  }
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual const char* name() const = 0;  // "cuda", "emulated", "emulated-host"

  // What `p` is. Unknown pointers are host memory; an error only when the runtime itself fails.
  virtual Result<PointerInfo> classify(const void* p) = 0;
  // True when the host may read and write device memory directly (the emulated device's
  // host-memory mode): then no staging copy is needed. False for a real GPU.
  virtual bool deviceMemoryHostAccessible() const = 0;

  virtual Result<void*> allocDevice(size_t bytes) = 0;
  virtual Status freeDevice(void* p) = 0;
  // Pinned host memory, mapped for the device (flags, staging buffers): the host address is also
  // the device's (unified addressing).
  virtual Result<void*> allocHostMapped(size_t bytes) = 0;
  virtual Status freeHostMapped(void* p) = 0;

  virtual Result<StreamHandle> createStream() = 0;
  virtual Status destroyStream(StreamHandle s) = 0;
  // Ok when `s` is a stream this runtime can queue work on; InvalidArgument naming it otherwise,
  // InvalidUsage when it is capturing a graph (a stream-ordered call is one host-side event: a
  // graph replayed many times would wait for a `done` written once).
  virtual Status checkStream(StreamHandle s) = 0;
  // Queues a copy of `bytes` from `src` to `dst` (any of host, pinned host, device) on `s`.
  virtual Status copyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) = 0;
  // Queues, on `s`, a write of `value` to the host-mapped word `flag`.
  virtual Status writeValue32(StreamHandle s, uint32_t* flag, uint32_t value) = 0;
  // Queues, on `s`, a wait until FlagReached(*flag, value): later work on `s` waits for it.
  virtual Status waitValue32(StreamHandle s, const uint32_t* flag, uint32_t value) = 0;
  // Blocks (sleeping) until everything queued on `s` has run; reports the stream's error.
  virtual Status synchronize(StreamHandle s) = 0;

  // The host's side of the flags (host-mapped words a stream waits on or writes). hostWriteFlag
  // publishes `value` (release) and wakes whoever waits for it; hostWaitFlag sleeps until
  // FlagReached(*flag, value) or `deadline` (then false). Never a busy spin: ranks outnumber cores.
  virtual void hostWriteFlag(uint32_t* flag, uint32_t value) = 0;
  virtual bool hostWaitFlag(const uint32_t* flag, uint32_t value,
                            std::chrono::steady_clock::time_point deadline) = 0;

  // Peer memory (CUDA IPC; issue 39's intra-node path). exportAllocation: a handle for the device
  // allocation that starts at `base` (InvalidArgument for anything else: an interior pointer,
  // host memory, a peer allocation opened here). openPeerAllocation: maps the allocation of
  // another process of this node that `h` names and returns its base in this process, which
  // this runtime's copies (and kernels) may use as device memory until closePeerAllocation.
  // A handle of this process's own is refused (InvalidUsage: use the pointer itself), as
  // cuIpcOpenMemHandle refuses it; one of a process that exited, or garbage, is an error. Each
  // handle is opened once per process (PeerMemoryMap counts the users).
  virtual Result<IpcHandle> exportAllocation(const void* base) = 0;
  virtual Result<void*> openPeerAllocation(const IpcHandle& h) = 0;
  virtual Status closePeerAllocation(void* base) = 0;
  // Whether launchPeerReduce can run here (a CUDA build without device kernels cannot).
  virtual bool peerReduceAvailable() const = 0;
  // Queues `r` on `s` (its pointers device memory of this process or peer allocations opened
  // here). InvalidArgument for a bad type or op, no source or destination, or too many; the
  // runtime's error otherwise.
  virtual Status launchPeerReduce(const PeerReduce& r, StreamHandle s) = 0;

  // The calling thread's device context, to be made current on another thread (the stream
  // agent's) with useContext before it calls this runtime. Null where there is none (emulated).
  virtual void* currentContext() = 0;
  virtual Status useContext(void* context) = 0;
};

// The runtime for this process, chosen once by ChooseDeviceRuntime(): BRAID_DEVICE=emulated (device
// memory is separate host memory the host must not touch: staged like a GPU's),
// BRAID_DEVICE=emulated-host (device memory is host memory), BRAID_DEVICE=none (no runtime), unset
// or cuda: the CUDA driver when the application has loaded libcuda.so.1 (braid never loads it).
// While none is chosen (unset and no libcuda yet) the choice is made again at the next
// ChooseDeviceRuntime(), so a program that loads CUDA after its first braid call still gets it.
// Call it where a dlopen probe is cheap enough (communicator creation); ActiveDeviceRuntime() is
// one atomic load for every call: null means buffers are host memory, as before.
DeviceRuntime* ChooseDeviceRuntime();
DeviceRuntime* ActiveDeviceRuntime();

}  // namespace braid::device
