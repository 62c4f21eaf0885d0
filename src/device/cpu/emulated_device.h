// A CPU implementation of the device runtime (device/device_runtime.h): what CI runs in place of
// a GPU, so that the device path's logic (classification, the stream agent's flag protocol,
// staging, error paths) fails a test here, not only on a GPU.
//
// - Device memory is host memory this object allocated and tracks by address range, so classify()
//   knows it and any other pointer classifies as host. In Mode::kSeparate (BRAID_DEVICE=emulated)
//   a device allocation is an address range reserved PROT_NONE, its bytes live elsewhere (the
//   "backing"), and only this runtime's copies (and hostView(), for the host functions that play
//   kernels) reach them: a device pointer that reaches memmove on the host faults, as it would on
//   a GPU. In Mode::kHostMemory (BRAID_DEVICE=emulated-host) device memory is the backing itself.
// - A stream is a FIFO run in order by a worker thread of its own: copies, flag writes, flag waits
//   (which block the stream until the flag reaches the value) and host functions (a test's
//   kernels). Every wait sleeps on a futex or a condition variable, never spins.
// - With one hardware queue (`single_queue`, or CUDA_DEVICE_MAX_CONNECTIONS=1 as a GPU reads it,
//   which Megatron-LM sets), every stream's work goes through one FIFO in the order it was queued,
//   as a GPU with one connection serialises its streams: a flag wait on one stream holds up the
//   work queued after it on every other stream (the false dependency that deadlocks a design in
//   which the host waits for work it queued on a second stream while the first waits for it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "device/device_runtime.h"

namespace braid::device {

class EmulatedDevice final : public DeviceRuntime {
 public:
  enum class Mode { kSeparate, kHostMemory };

  // `flag_poll`: how long a flag wait sleeps before it looks again without being woken. Writes
  // through this object wake their waiters at once; a writer that does not (a plain store, as
  // braid's CUDA runtime makes for a GPU that polls, in the fake driver of the tests) is seen
  // within flag_poll.
  static constexpr std::chrono::milliseconds kDefaultFlagPoll{100};
  explicit EmulatedDevice(Mode mode, std::chrono::microseconds flag_poll = kDefaultFlagPoll,
                          bool single_queue = false);
  // Stops every stream (waits still pending fail) and frees every allocation.
  ~EmulatedDevice() override;
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;

  const char* name() const override;
  Result<PointerInfo> classify(const void* p) override;
  bool deviceMemoryHostAccessible() const override { return mode_ == Mode::kHostMemory; }

  Result<void*> allocDevice(size_t bytes) override;
  Status freeDevice(void* p) override;
  Result<void*> allocHostMapped(size_t bytes) override;
  Status freeHostMapped(void* p) override;

  Result<StreamHandle> createStream() override;
  Status destroyStream(StreamHandle s) override;
  Status checkStream(StreamHandle s) override;
  Status copyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) override;
  Status writeValue32(StreamHandle s, uint32_t* flag, uint32_t value) override;
  Status waitValue32(StreamHandle s, const uint32_t* flag, uint32_t value) override;
  Status synchronize(StreamHandle s) override;

  void hostWriteFlag(uint32_t* flag, uint32_t value) override;
  bool hostWaitFlag(const uint32_t* flag, uint32_t value,
                    std::chrono::steady_clock::time_point deadline) override;

  // Device allocations are memfd-backed (MAP_SHARED), so a handle (the exporter's pid, the memfd's
  // descriptor and a serial in the memfd's name) lets another process of the machine map the
  // same bytes through /proc/<pid>/fd, as CUDA IPC maps another process's device memory.
  Result<IpcHandle> exportAllocation(const void* base) override;
  Result<void*> openPeerAllocation(const IpcHandle& h) override;
  Status closePeerAllocation(void* base) override;
  // A host function on the stream: the CPU kernels (device/cpu/reduce_kernels.h) on the
  // allocations' bytes, as a GPU kernel would run on its memory.
  bool peerReduceAvailable() const override { return true; }
  Status launchPeerReduce(const PeerReduce& r, StreamHandle s) override;

  void* currentContext() override { return nullptr; }
  Status useContext(void*) override { return Status::Ok(); }

  // Emulated only: queues `fn` on `s`, run by the stream's worker in order with the rest (the
  // role a kernel plays on a GPU).
  Status launchHostFunction(StreamHandle s, std::function<void()> fn);
  // Emulated only: where the bytes of `bytes` bytes at `p` live for host code (a host function
  // playing a kernel): the backing of device memory, `p` itself for any other memory. Error when
  // the range runs past a device allocation.
  Result<void*> hostView(const void* p, size_t bytes);

  // Emulated only (tests): called on a stream's worker before each copy runs, with the copy's
  // device-side addresses (what copyAsync was given). Set before the copies are queued. A test
  // holds a chosen copy back with it (the staging pipeline's: a piece runs before the last
  // piece is copied in).
  using CopyHook = std::function<void(const void* dst, const void* src, size_t bytes)>;
  void setCopyHook(CopyHook hook) { copy_hook_ = std::move(hook); }

  // Emulated only: marks `s` as capturing a graph (checkStream then refuses it), as
  // cudaStreamBeginCapture would, so the refusal is tested without a GPU.
  Status setCapturing(StreamHandle s, bool capturing);

  // Live device allocations (tests check that nothing leaks).
  size_t deviceAllocations();
  // Streams blocked right now in a waitValue32 whose flag is not reached. On a GPU, freeing
  // pinned memory (cuMemFreeHost) synchronises the device, so a free while a stream waits for
  // the freeing thread deadlocks: the fake libcuda refuses it (tests/common/fake_libcuda.cc).
  int blockedWaits() const { return blocked_waits_.load(); }
  // Emulated only (tests): a paused stream starts no operation and, inside a flag wait, stops
  // looking at the flag until resumed, as a GPU stream that is slow to get there. Resuming a
  // stream that is not paused does nothing; a stopped stream is never held.
  Status pauseStream(StreamHandle s);
  Status resumeStream(StreamHandle s);
  // Frees of host-mapped memory that queued stream operations (copies, flag writes and waits)
  // still used: refused, and counted (on a GPU the stream would touch freed memory). The memory
  // stays until the device ends. Tests expect none. An op counts until it has finished running,
  // a little after its effect shows: a host that frees memory the moment it sees a flag that a
  // writeValue32 on it stored could be refused (braid frees a staging buffer only behind a later
  // op of the same stream, and never frees a flag).
  size_t unsafeFrees() const { return unsafe_frees_.load(); }
  // Emulated only (tests): while on, exportAllocation refuses every allocation, as CUDA refuses
  // managed memory and cuMem (VMM) allocations, so the paths that must then stage are tested.
  void refuseExports(bool on) { refuse_exports_.store(on); }
  // Emulated only (tests): the runtime calls a test makes fail, as a CUDA call can (a launch
  // failure, device memory exhausted), so the paths that unwind a call ordered part way are
  // tested. After failAfter(op, pass, fail), the next `pass` calls of `op` succeed and the
  // `fail` after them fail at once, queueing nothing, with a SystemError naming the injection.
  enum class FaultOp : uint8_t {
    kCopy,             // copyAsync
    kWriteValue,       // writeValue32
    kWaitValue,        // waitValue32
    kLaunch,           // launchPeerReduce
    kAllocDevice,      // allocDevice
    kAllocHostMapped,  // allocHostMapped
  };
  void failAfter(FaultOp op, int pass, int fail = 1);
  // Injected failures that fired, all ops together (a test checks its failure was the one seen).
  int injectedFailures() const { return injected_.load(); }

 private:
  CopyHook copy_hook_;
  struct Allocation {
    size_t size;
    char* backing;  // == the address in kHostMemory mode and for host-mapped memory
    MemoryKind kind;
    size_t stream_refs = 0;  // host-mapped: queued stream operations that use it
    int fd = -1;             // device memory: the memfd holding the bytes (kept for exports)
    uint64_t serial = 0;     // device memory made here: named in the memfd, checked on open
    bool peer = false;       // opened with openPeerAllocation (closed with closePeerAllocation)
  };
  // Maps `size` bytes of memfd `fd` as a new device allocation (its own device addresses in
  // Mode::kSeparate) and records it; takes `fd` (closed on failure).
  Result<void*> mapDevice(int fd, size_t size, uint64_t serial, bool peer);
  void unmap(uintptr_t addr, const Allocation& a);
  struct Stream;

  Result<void*> allocate(size_t bytes, MemoryKind kind);
  Status release(void* p, MemoryKind kind);
  using Allocations = std::map<uintptr_t, Allocation>;
  // The allocation holding `addr`, or end() (mu_ held).
  Allocations::iterator allocationAt(uintptr_t addr);
  // Resolves a stream handle (0 = the default stream, made on first use); null when unknown.
  Stream* findStream(StreamHandle s);
  // findStream, with the error that names an unknown handle.
  Result<Stream*> liveStream(StreamHandle s);
  // Queues `op` on `s`; `uses` are the addresses it touches: those in host-mapped memory are
  // counted in use (a free refuses them) until the op has run.
  Status enqueue(StreamHandle s, std::function<Status()> op,
                 std::initializer_list<const void*> uses = {});
  // Blocks a stream's op while the stream is paused (pauseStream).
  static void holdWhilePaused(Stream* st);
  static void runStream(Stream* st);

  const Mode mode_;
  const std::chrono::microseconds flag_poll_;
  // single_queue: the one FIFO every stream's work runs through (made with the device); each
  // stream still counts its own work (synchronize, destroyStream).
  std::unique_ptr<Stream> hardware_queue_;
  std::mutex mu_;
  Allocations allocations_;  // by start address
  std::unordered_map<StreamHandle, std::unique_ptr<Stream>> streams_;
  Stream* default_stream_ = nullptr;
  std::atomic<int> blocked_waits_{0};
  std::atomic<size_t> unsafe_frees_{0};
  std::atomic<bool> refuse_exports_{false};
  // failAfter's plan, per FaultOp: calls to let pass, then calls to fail.
  Status injectedFault(FaultOp op);
  std::mutex fault_mu_;
  struct FaultPlan {
    int pass = 0;
    int fail = 0;
  };
  FaultPlan faults_[6];
  std::atomic<int> injected_{0};
};

}  // namespace braid::device
