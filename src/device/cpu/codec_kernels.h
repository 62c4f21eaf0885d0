// CPU kernels of the quantized transfers' codecs (algorithms/codec.h): encode a typed slice into
// its frame, decode a frame into a typed slice or reduce it into one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/schedule.h"
#include "core/base/datatype.h"
#include "core/base/status.h"

namespace braid {

// dst (EncodedBytes(codec, type, n) bytes) = encode(src[0..n)).
Status EncodeKernel(CodecId codec, DataType type, const void* src, size_t n, void* dst);
// dst[0..n) = decode(src). An error when the frame does not hold n elements of `type` (a
// schedule or a peer handed the decoder the wrong bytes).
Status DecodeKernel(CodecId codec, DataType type, const void* src, size_t n, void* dst);
// dst[0..n) = dst (op) decode(src); `scratch` holds at least n elements of `type`.
Status DecodeReduceKernel(CodecId codec, DataType type, ReduceOp op, const void* src, size_t n,
                          void* dst, void* scratch);

}  // namespace braid
