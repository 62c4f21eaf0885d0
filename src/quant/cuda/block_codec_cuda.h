// CUDA block codecs: the layout and arithmetic of block_format.h / block_math.h on device
// buffers, byte-identical to the CPU reference (tests/unit/quant_cuda_test.cc checks it on a GPU).
// Built only when CMake finds nvcc (target braid_quant_cuda).
//
// Pointers are device pointers; `stream` is a cudaStream_t (nullptr: the legacy default stream).
// Encodings must start 4-byte aligned (the kernels read the fp32 parameters as words):
// cudaMalloc'd memory and offsets that are multiples of EncodedBytes (16-byte rounded) are.
// The calls enqueue the kernels and return: an OK status means the launch succeeded, not that
// the kernels have run. Errors are InvalidArgument (format, type) or SystemError (a CUDA error,
// named).
#pragma once

#include <cstdint>
#include <string>

#include "core/base/datatype.h"
#include "core/base/status.h"
#include "quant/block_format.h"

namespace braid::quant::cuda {

// Whether a CUDA device can run the kernels; when not, *why says so (for skip messages).
bool DeviceAvailable(std::string* why);

Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                void* stream);
Status Dequantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                  void* stream);
// dst = dst + decode(src) in fp32, rounded once to `type`.
Status DequantizeReduce(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst,
                        void* stream);

}  // namespace braid::quant::cuda
