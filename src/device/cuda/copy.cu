// Copy: 16-byte accesses, one per thread, where both pointers are 16-byte aligned (cudaMalloc'd
// buffers and offsets that are multiples of 16); byte by byte otherwise, and for the tail.
#include "device/cuda/kernels.h"
#include "device/cuda/launch.h"

namespace braid::cuda {
namespace {

__global__ void __launch_bounds__(kThreads)
    CopyKernel(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, size_t bytes,
               bool vector) {
  ForEach<uint8_t>(
      bytes, vector, [&](size_t p) { StorePack(dst, p, LoadPack(src, p)); },
      [&](size_t i) { dst[i] = src[i]; });
}

}  // namespace

Status Copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return Status::Ok();
  const bool vector = Aligned16(dst) && Aligned16(src);
  const size_t units = vector ? bytes / 16 + bytes % 16 : bytes;
  CopyKernel<<<GridFor(units), kThreads, 0, static_cast<gpuStream_t>(stream)>>>(
      static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes, vector);
  return Launched("copy");
}

}  // namespace braid::cuda
