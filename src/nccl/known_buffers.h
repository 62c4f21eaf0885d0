// Device allocations whose lifetime the NCCL shim sees (issue 39's classification cache):
// ncclMemAlloc'd memory (until ncclMemFree) and buffers given to ncclCommRegister or
// ncclCommWindowRegister (until deregistered). A call on them is classified here, without asking
// the driver (cuPointerGetAttributes, once per buffer and call otherwise). Only these are cached:
// memory the shim does not see freed could be freed and its addresses reused behind its back.
// As in NCCL, a registered buffer must stay allocated until it is deregistered.
//
// Entries are whole allocations (the runtime's base and size), counted: two registrations inside
// one allocation need two deregistrations; ncclMemFree drops the allocation whatever its count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "device/device_runtime.h"

namespace braid::nccl {

// Adds one reference to the allocation `info` describes (a classification of device, managed or
// pinned host memory with its allocation's range); ignored for anything else.
void RememberAllocation(const device::PointerInfo& info);
// Drops one reference to the allocation starting at `base` (all of them with `all`).
void ForgetAllocation(const void* base, bool all = false);
// The classification of `p` if it lies in a remembered allocation.
std::optional<device::PointerInfo> KnownAllocation(const void* p);
// What `p` is: a remembered allocation's classification, else the runtime's.
Result<device::PointerInfo> ClassifyBuffer(device::DeviceRuntime* rt, const void* p);

struct KnownAllocationStats {
  size_t allocations = 0;  // remembered now
  uint64_t hits = 0;       // classifications answered from them
};
KnownAllocationStats KnownAllocationCounts();  // tests

}  // namespace braid::nccl
