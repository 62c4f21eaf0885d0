// Device scratch per communicator: device memory a device-path call needs beside the user's
// buffers (an in-place all-to-all's copy of its input, which the peers' pushes would otherwise
// overwrite before this rank has sent it). One buffer per communicator, reused by every call:
// the communicator's calls are ordered on the device (a call's device work starts after the
// previous call's `done`, StreamAgent), so one call's use ends before the next one's begins.
//
// It only grows. A larger call allocates a new buffer and keeps the old one until the
// communicator goes: a call submitted earlier may still be queued to use it, and freeing device
// memory (cuMemFree) waits for the device, whose streams may wait for this communicator's agent.
// Held: the largest call's bytes, rounded up to a power of two, plus the smaller ones it
// replaced (under twice the largest).
#pragma once

#include <cstddef>

#include "core/base/status.h"
#include "device/device_runtime.h"
#include "nccl/shim.h"

namespace braid::nccl {

// At least `bytes` of device memory for a call of `comm` being submitted (on the current
// device, the caller's).
Result<void*> DeviceScratch(ncclComm_t comm, device::DeviceRuntime* rt, size_t bytes);
// At destroy or abort, once the communicator's stream agent stopped: frees `comm`'s scratch, or
// forgets it without freeing (`keep`: device work may still read it, an abort's kernel that did
// not end).
void DropDeviceScratch(ncclComm_t comm, bool keep);
// Device bytes held as scratch by every communicator of this process (tests).
size_t DeviceScratchBytes();

}  // namespace braid::nccl
