// The quantized transfers' codec kernels as the engine calls them: the IR's Codec
// (algorithms/codec.h) dispatched to its implementation. Encode a typed slice into its frame,
// decode a frame into a typed slice or reduce it into one. The block codecs are src/quant's
// kernels (vectorised, runtime-dispatched), a decode-reduce of another op reduces with
// src/device's kernels; the test codec is implemented here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/schedule.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid {

// dst (EncodedBytes(codec, type, n) bytes) = encode(src[0..n)).
Status EncodeKernel(const Codec& codec, DataType type, const void* src, size_t n, void* dst);
// dst[0..n) = decode(src). An error when the frame does not hold n elements of `type` (a
// schedule or a peer handed the decoder the wrong bytes).
Status DecodeKernel(const Codec& codec, DataType type, const void* src, size_t n, void* dst);
// dst[0..n) = dst (op) decode(src); `scratch` holds at least n elements of `type`. A block codec's
// sum is fused (decoded and added in fp32, rounded once; scratch unused); other ops decode into
// scratch and reduce.
Status DecodeReduceKernel(const Codec& codec, DataType type, ReduceOp op, const void* src, size_t n,
                          void* dst, void* scratch);

}  // namespace braid
