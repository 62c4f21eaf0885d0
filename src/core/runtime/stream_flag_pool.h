// The host-mapped flag pairs that order a stream-ordered call (core/runtime/stream_agent.h) on a
// device stream: the stream writes `ready` when the work queued before the call is done, and
// waits for `done`, which the stream agent writes when the call is over.
//
// A slot's values only grow: its k-th use writes and waits for k (compared cyclically, as
// cuStreamWaitValue32's GEQ does). So a slot may be handed out again as soon as the agent wrote
// `done` having seen `ready`: the old call's stream has written its `ready` (the agent saw it), and
// its wait on `done` is satisfied by any later value too. A slot whose `ready` was never seen (a
// call failed before its stream got there) is never reused: its stream may still write the old
// value over a newer one. The pool lives as long as the process (a stream may still write a flag
// after its communicator is gone), one per device runtime; slots are 8 bytes, never freed.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/base/status.h"
#include "device/device_runtime.h"

namespace braid {

struct StreamFlagSlot {
  uint32_t* ready = nullptr;
  uint32_t* done = nullptr;
  uint32_t value = 0;  // this use's value
};

class StreamFlagPool {
 public:
  // The process's pool for `runtime` (made on first use, never destroyed).
  static StreamFlagPool& For(device::DeviceRuntime* runtime);

  explicit StreamFlagPool(device::DeviceRuntime* runtime) : runtime_(runtime) {}
  // A slot with its next value (allocates another block of host-mapped flags when none is free).
  Result<StreamFlagSlot> acquire();
  // Returns a slot whose `ready` the agent saw and whose `done` it wrote (or, for a staging flag,
  // a slot whose `done` the stream wrote and the agent saw): its `done` holds `value`.
  void release(const StreamFlagSlot& slot);
  // Returns a slot nothing was queued with, as it was before acquire(): its `done` still holds
  // the value before this use's (a staging buffer's flag starts from what its word holds).
  void giveBackUnused(const StreamFlagSlot& slot);
  // Slots handed out so far and slots free now (tests).
  size_t allocated();
  size_t available();

 private:
  static constexpr size_t kSlotsPerBlock = 64;
  device::DeviceRuntime* runtime_;
  std::mutex mu_;
  std::vector<StreamFlagSlot> free_;  // value: the slot's last use, which its `done` holds
  size_t allocated_ = 0;
};

}  // namespace braid
