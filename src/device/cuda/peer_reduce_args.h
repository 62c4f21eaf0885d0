// The one parameter of the peer-reduce kernels (device/cuda/peer_reduce.cu), shared by the kernel,
// braid's CUDA runtime that launches it through the driver API (cuLaunchKernel copies it as raw
// bytes) and the fake driver of the tests. Plain data, the same layout in nvcc's and the host
// compiler's view; kernels are looked up by name: PeerReduceKernelName(type, op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "device/peer_pointers.h"

namespace braid::cuda {

inline constexpr int kMaxPeerRanks = device::kMaxPeerRanks;

struct PeerReduceArgs {
  const void* src[kMaxPeerRanks];  // reduced in order (pairwise: src[k] copied to dst[k])
  void* dst[kMaxPeerRanks];        // each gets the result
  uint64_t count;                  // elements of the segment
  uint64_t divide_by;              // > 1: AVG's division of the sum
  double divide_wide;              // divide_by as fp64 and fp32 (element_math.h's Divisor)
  float divide_narrow;
  uint32_t skip_value;   // the kernel does nothing when *skip == skip_value
  const uint32_t* skip;  // host-mapped
  // Host-mapped, or null: the sources and destinations are there, not in src and dst (written
  // before the kernel may start; read after `skip`).
  const device::PeerPointers* late;
  int32_t nsrc, ndst;
  int32_t vector;    // every pointer 16-byte aligned: 16-byte packs
  int32_t pairwise;  // dst[k] = src[k] for each k (nsrc == ndst), no reduction
};

// Copied as raw bytes from the host compiler's layout into nvcc's: both must see this one.
static_assert(sizeof(PeerReduceArgs) == 576 && offsetof(PeerReduceArgs, count) == 512 &&
                  offsetof(PeerReduceArgs, skip) == 544 && offsetof(PeerReduceArgs, late) == 552 &&
                  offsetof(PeerReduceArgs, pairwise) == 572,
              "PeerReduceArgs changed layout: check every reader (kernel, runtime, fake driver)");

// "braid_peer_reduce_<type>_<op>", braid's DataType and ReduceOp values.
inline void PeerReduceKernelName(int type, int op, char (&out)[48]) {
  std::snprintf(out, sizeof(out), "braid_peer_reduce_%d_%d", type, op);
}

}  // namespace braid::cuda
