// The shim's few direct uses of the device runtime outside the stream path: the communicator's
// device (ncclCommCuDevice) and reading a scalar that may be device memory (pre-multiplied sums).
// Stream-ordered collectives are nccl/stream_path.h's.
#pragma once

#include <cstddef>

namespace braid::nccl {

// Chooses the process's device runtime (device/device_runtime.h: CUDA when the application has
// loaded libcuda.so.1, or BRAID_DEVICE's emulated device) and looks for cuCtxGetDevice. Cheap;
// called at communicator creation (NCCL programs initialise CUDA before that) and whenever the
// answer is still "none".
void ProbeCudaDriver();

// Copies `bytes` from `src` (host or device memory) to host memory `dst`.
bool CopyToHost(void* dst, const void* src, size_t bytes);

// The calling thread's current CUDA device, or 0 without CUDA.
int CurrentCudaDevice();

}  // namespace braid::nccl
