// Copies that bypass the cache. An ordinary store first reads the line it writes (read for
// ownership) and then keeps it in cache; a local step that copies megabytes (an out-of-place
// all-gather's own block, a reduce-scatter's result) pays that read for every line and evicts what
// the transfers beside it keep in cache. Non-temporal stores write whole lines straight to memory.
// Measured on the development VM (docs/performance.md, "Streaming local copies"): 32 MiB in 1 MiB
// pieces 2.0 ms against memcpy's 2.8, and 2.3-2.7 against 3.8-5.1 with the other core copying too;
// the 2-rank all-gather out of place 1.05-1.13x faster over TCP and 1.13-1.27x over shm from 4 MiB.
#pragma once

#include <cstddef>

#include "device/cpu/kernel_isa.h"

namespace braid::cpu {

// A local copy of at least this many bytes (the whole copy, not the piece one pass of the progress
// loop runs) streams: its destination would not stay in this core's L2 anyway, so nothing that
// reads it next loses a cached line. Below it, an ordinary copy leaves the result in cache for the
// caller, who reads it right after the call.
inline constexpr size_t kStreamingCopyMinBytes = 1 << 20;

// Copies n bytes; dst and src must not overlap. Ends with a store fence, so the bytes are ordered
// before any later store (a flag another thread reads, a completion), as an ordinary copy's are
// under x86's ordering; non-temporal stores alone are not. Not x86-64: memcpy.
void StreamingCopy(void* dst, const void* src, size_t n);
// The same on an explicit tier (tests run every tier the CPU has; kAvx512 uses AVX2's 256-bit
// stores, as memory, not the vector width, bounds the copy).
void StreamingCopyWithIsa(KernelIsa isa, void* dst, const void* src, size_t n);

}  // namespace braid::cpu
