// Codecs of quantized transfers, as the IR sees them: a name, which types they encode, the size of
// encoded data. The kernels that encode and decode are dispatched in algorithms/codec_kernels.h,
// the block codecs themselves live in src/quant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "algorithms/schedule.h"
#include "core/base/datatype.h"
#include "quant/block_format.h"

namespace braid {

const char* CodecName(CodecId codec);  // "none", "test", "int8", "int4", "int8asym", "int4asym"
// With the block size for the block codecs: "int8/G=32".
std::string CodecName(const Codec& codec);
// Whether `codec` can encode elements of `dtype`. The block codecs: fp32, fp16, bf16, and only
// with a valid block size (1..quant::kMaxBlock).
bool CodecSupports(const Codec& codec, DataType dtype);
// Whether decode(encode(x)) may differ from x (the block codecs).
bool CodecIsLossy(const Codec& codec);
// Bytes of the encoding of `count` elements of `dtype` (0 for CodecId::kNone or count 0). The
// block codecs' size does not depend on dtype: quant::EncodedBytes.
uint64_t EncodedBytes(const Codec& codec, DataType dtype, uint64_t count);
// The src/quant format of a block codec; nullopt for kNone and kTest.
std::optional<quant::BlockFormat> BlockFormatOf(const Codec& codec);

// The test codec's frame: a header that names the type and count (so that a decoder handed the
// wrong bytes, or bytes of another slice, fails loudly) followed by every element's bytes XORed
// with kTestCodecMask (so that a consumer that skips decoding gets garbage, not the data).
inline constexpr uint64_t kTestCodecHeaderBytes = 16;
inline constexpr uint8_t kTestCodecMask = 0x5a;
inline constexpr uint32_t kTestCodecMagic = 0x74736574;  // "test"

}  // namespace braid
