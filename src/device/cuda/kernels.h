// GPU kernels of the device layer (DESIGN.md 2.5): reduce, scale, divide and copy on device
// buffers, producing the bits of the CPU kernels (device/cpu/reduce_kernels.h) for every type and
// op: the per-element arithmetic is the CPU kernels' own (device/element_math.h, compiled for the
// device), with x86's NaN bits (see there). Built only when CMake finds nvcc (target
// braid_device_cuda); tests/gpu/device_kernels_check.cc compares them with the CPU kernels.
//
// Pointers are device pointers (or any memory the device can address: peer-mapped, host-mapped
// pinned). `stream` is a cudaStream_t (nullptr: the legacy default stream); the header names no
// runtime type so that plain C++ and a HIP build include it alike. The calls enqueue a kernel and
// return: an OK status means the launch succeeded, not that the kernel has run. Errors are
// InvalidArgument (type, op) or SystemError (a CUDA error, named).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid::cuda {

// Whether a CUDA device can run the kernels; when not, *why says so (for skip messages).
bool DeviceAvailable(std::string* why);

// dst[i] = a[i] (op) b[i] for i < n; dst may alias a or b (exactly, not partially). fp16, bf16 and
// fp8 are combined in fp32 and rounded once (fp8 saturating), as on the CPU.
Status Reduce(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t n,
              void* stream);

// buf[i] = buf[i] / divisor (Avg's final step), as DivideKernel: integers truncate toward zero,
// fp32 and fp64 divide in fp64, the narrow floats in fp32. divisor 0 or 1: nothing is launched.
Status Divide(DataType type, void* buf, size_t n, uint64_t divisor, void* stream);

// Where Scale's scalar is: read on the host at the call (NCCL's ncclScalarHostImmediate), or in
// device memory, read by the kernel when it runs (ncclScalarDevice).
enum class ScalarAt : uint8_t { kHost, kDevice };

// dst[i] = src[i] * scalar (pre-multiplied sum's first step), as ScaleKernel; `scalar` points to
// one value of `type`; dst may alias src. Integers wrap.
Status Scale(DataType type, const void* src, void* dst, size_t n, const void* scalar,
             ScalarAt scalar_at, void* stream);

// Copies `bytes` bytes with a kernel (16-byte accesses where both pointers are 16-byte aligned);
// dst and src must not overlap. A kernel rather than cudaMemcpyAsync: it runs on the SMs beside
// the reductions and reaches peer-mapped and host-mapped memory alike.
Status Copy(void* dst, const void* src, size_t bytes, void* stream);

}  // namespace braid::cuda
