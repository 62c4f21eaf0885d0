// Scratch per communicator: memory a device-path call needs beside the user's buffers. One buffer
// per communicator and use, reused by every call: the communicator's calls are ordered on the
// device (a call's device work, `prepare` included, starts after the previous call's `done`,
// StreamAgent), and its agent runs one call at a time, so one call's use ends before the next
// one's begins. The uses (ScratchUse) never share a buffer: one call may need two at once.
//
// It only grows. A larger call allocates a new buffer and keeps the old one until the
// communicator goes: a call submitted earlier may still be queued to use it, and freeing device
// memory (cuMemFree) waits for the device, whose streams may wait for this communicator's agent.
// Held: the largest call's bytes, rounded up to a power of two, plus the smaller ones it
// replaced (under twice the largest).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/status.h"
#include "device/device_runtime.h"
#include "nccl/shim.h"

namespace braid::nccl {

enum class ScratchUse : uint8_t {
  // Device memory: an in-place all-to-all's copy of its input, which the peers' pushes would
  // otherwise overwrite before this rank has sent it (taken at submit).
  kInPlaceInput,
  // Host-mapped memory: a send whose buffer cannot be shared with its receiver, copied there on
  // its stream before its `ready` and sent over the host (taken at submit, nccl/p2p_device.h).
  kSendBounce,
  // Host-mapped memory: such a send's bytes at its receiver, which its copy kernel reads (taken
  // on the agent, during the call's agreement).
  kReceiveBounce,
};

// At least `bytes` of scratch for `use` by a call of `comm` (on the current device, the
// caller's).
Result<void*> DeviceScratch(ncclComm_t comm, device::DeviceRuntime* rt, size_t bytes,
                            ScratchUse use = ScratchUse::kInPlaceInput);
// At destroy or abort, once the communicator's stream agent stopped: frees `comm`'s scratch, or
// forgets it without freeing (`keep`: device work may still read it, an abort's kernel that did
// not end).
void DropDeviceScratch(ncclComm_t comm, bool keep);
// Bytes held as scratch (every use) by every communicator of this process (tests).
size_t DeviceScratchBytes();

}  // namespace braid::nccl
