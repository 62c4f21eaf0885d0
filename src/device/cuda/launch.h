// What the kernel sources of device/cuda share: launch geometry, the launch's status, and 16-byte
// packs of elements. Included by .cu files only (nvcc, or hipcc through gpu_portability.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/base/status.h"
#include "device/gpu_portability.h"

namespace braid::cuda {

inline constexpr unsigned kThreads = 256;

// Blocks for `units` independent work items of one thread each: enough for every unit, at most
// one full wave of the device (the kernels loop grid-stride over the rest).
unsigned GridFor(uint64_t units);

// OK if the last launch succeeded, else a SystemError naming the kernel and the runtime's error.
Status Launched(const char* what);

inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// 16 bytes of elements, loaded and stored as one vector access (ld/st.global.v4).
template <class S>
struct Pack {
  static constexpr size_t kCount = 16 / sizeof(S);
  S v[kCount];
};

template <class S>
__device__ __forceinline__ Pack<S> LoadPack(const S* base, size_t pack) {
  const uint4 raw = reinterpret_cast<const uint4*>(base)[pack];
  Pack<S> p;
  memcpy(&p, &raw, 16);
  return p;
}

template <class S>
__device__ __forceinline__ void StorePack(S* base, size_t pack, const Pack<S>& p) {
  uint4 raw;
  memcpy(&raw, &p, 16);
  reinterpret_cast<uint4*>(base)[pack] = raw;
}

__device__ __forceinline__ size_t ThreadIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t ThreadCount() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// Calls f(i) for every i < n, grid-stride: in 16-byte packs when `vector` (f_pack(pack index)),
// the rest (all of it when not `vector`) element by element.
template <class S, class PackFn, class ElemFn>
__device__ __forceinline__ void ForEach(size_t n, bool vector, PackFn f_pack, ElemFn f) {
  const size_t first = ThreadIndex(), stride = ThreadCount();
  size_t done = 0;
  if (vector) {
    const size_t packs = n / Pack<S>::kCount;
    for (size_t p = first; p < packs; p += stride) f_pack(p);
    done = packs * Pack<S>::kCount;
  }
  for (size_t i = done + first; i < n; i += stride) f(i);
}

}  // namespace braid::cuda
