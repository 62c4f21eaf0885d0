// Codecs of quantized transfers, as the IR sees them: a name and the size of encoded data. The
// kernels that encode and decode live with the other kernels (device/cpu/codec_kernels.h).
#pragma once

#include <cstdint>

#include "algorithms/schedule.h"
#include "core/base/datatype.h"

namespace braid {

const char* CodecName(CodecId codec);  // "none", "test"
// Whether `codec` can encode elements of `dtype`.
bool CodecSupports(CodecId codec, DataType dtype);
// Bytes of the encoding of `count` elements of `dtype` (0 for CodecId::kNone or count 0).
uint64_t EncodedBytes(CodecId codec, DataType dtype, uint64_t count);

// The test codec's frame: a header that names the type and count (so that a decoder handed the
// wrong bytes, or bytes of another slice, fails loudly) followed by every element's bytes XORed
// with kTestCodecMask (so that a consumer that skips decoding gets garbage, not the data).
inline constexpr uint64_t kTestCodecHeaderBytes = 16;
inline constexpr uint8_t kTestCodecMask = 0x5a;
inline constexpr uint32_t kTestCodecMagic = 0x74736574;  // "test"

}  // namespace braid
