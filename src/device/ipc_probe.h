// Whether the ranks of a node can map each other's device memory (CUDA IPC), learnt once at
// communicator creation: each rank exports a small device allocation, every other process of its
// node opens and closes it, and the answers travel in the init messages (core/runtime/comm.cc).
// The NCCL shim's per-call IPC path (nccl/peer_buffers.h) decides at submit time, on each rank
// alone, whether a call runs on the device or stages through the host: the ranks must decide
// alike, so what could differ between them (a driver or a container that refuses IPC, peers
// without P2P access) is settled here, collectively, before any call depends on it.
#pragma once

#include <string>

#include "core/base/status.h"
#include "device/device_runtime.h"

namespace braid::device {

class IpcProbe {
 public:
  IpcProbe() = default;
  // A probe for `runtime` (null: none), made with `context` current (the creating thread's,
  // which may not be this one). Empty (text "") where the runtime cannot run the peer reduce or
  // export device memory: then this rank maps no peer and no peer maps it.
  static IpcProbe Make(DeviceRuntime* runtime, void* context);
  ~IpcProbe();
  IpcProbe(IpcProbe&& o) noexcept;
  IpcProbe& operator=(IpcProbe&& o) noexcept;
  IpcProbe(const IpcProbe&) = delete;
  IpcProbe& operator=(const IpcProbe&) = delete;

  // The handle as hex and the allocation's device ("<hex>@<device>") for the init message; ""
  // without a probe.
  const std::string& text() const { return text_; }
  bool empty() const { return text_.empty(); }
  // Opens and closes another process's probe (its text). Ok when it maps here.
  Status tryOpen(const std::string& peer_text) const;
  // The device of a probe's text (-1 when it names none). Ranks of one process reach each
  // other's buffers by address, which a kernel may use only on the same device (another device
  // would need peer access enabled between the contexts, which braid does not do).
  static int DeviceOf(const std::string& text);
  // Frees the allocation (every peer has closed it: after the exchange of the answers).
  void reset();

 private:
  DeviceRuntime* runtime_ = nullptr;
  void* context_ = nullptr;
  void* allocation_ = nullptr;
  std::string text_;
};

}  // namespace braid::device
