// The few CUDA driver calls the NCCL shim needs to keep NCCL's stream semantics for device
// buffers, taken from a libcuda.so.1 the application has already loaded (dlopen RTLD_NOLOAD).
// A program that never loads CUDA pays nothing and the shim never loads CUDA itself, so the
// library runs on machines without a GPU driver.
#pragma once

#include <cstddef>

#include "nccl.h"

namespace braid::nccl {

// Looks for a libcuda.so.1 loaded by the application. Cheap; called at communicator creation
// (NCCL programs initialise CUDA before that) and whenever the answer is still "no".
void ProbeCudaDriver();

// True when `p` is device (or managed) memory according to the CUDA driver; false for host
// memory, unknown pointers and when CUDA is not loaded.
bool IsDeviceMemory(const void* p);

// For device buffers: waits for the work queued on `stream` so the inputs are ready before
// braid reads them. A no-op when neither buffer is device memory: host calls ignore streams.
void OrderOnStream(cudaStream_t stream, const void* sendbuff, const void* recvbuff);

// Copies `bytes` from `src` (host or device memory) to host memory `dst`.
bool CopyToHost(void* dst, const void* src, size_t bytes);

// The calling thread's current CUDA device, or 0 without CUDA.
int CurrentCudaDevice();

}  // namespace braid::nccl
