// Milliseconds per call of `body` on the default stream, timed with CUDA events after one
// warm-up call: the standalone GPU checks' throughput parts (quant_cuda_check.cc,
// device_kernels_check.cc).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace braid::gpu_check {

inline float TimeMs(const std::function<void()>& body, int iters) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  body();  // warm-up
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) body();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

}  // namespace braid::gpu_check
