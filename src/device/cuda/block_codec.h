// GPU block codecs: the layout and arithmetic of quant/block_format.h and quant/block_math.h on
// device buffers, byte-identical to the CPU reference (tests/unit/quant_cuda_test.cc checks it on a
// GPU). Part of the device layer's GPU kernels (target braid_device_cuda, built when CMake finds
// nvcc; the same source builds for AMD GPUs as braid_device_hip when it finds hipcc).
//
// Pointers are device pointers; `stream` is a cudaStream_t (hipStream_t in the HIP build; nullptr:
// the legacy default stream). Encodings must start 4-byte aligned (the kernels read the fp32
// parameters as words): cudaMalloc'd memory and offsets that are multiples of EncodedBytes
// (16-byte rounded) are. The calls enqueue the kernels and return: an OK status means the launch
// succeeded, not that the kernels have run. Errors are InvalidArgument (format, type) or
// SystemError (a runtime error, named).
#pragma once

#include <cstdint>
#include <string>

#include "core/base/datatype.h"
#include "core/base/status.h"
#include "device/cuda/kernels.h"
#include "quant/block_format.h"

namespace braid::quant::cuda {

// Whether a device can run the kernels; when not, *why says so (for skip messages). The device
// layer's one check (device/cuda/runtime.cu).
using ::braid::cuda::DeviceAvailable;

Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                void* stream);
Status Dequantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                  void* stream);
// dst = dst + decode(src) in fp32, rounded once to `type`.
Status DequantizeReduce(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                        void* stream);

}  // namespace braid::quant::cuda
