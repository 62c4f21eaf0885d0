#include "algorithms/codec.h"

#include "quant/block_codec.h"

namespace braid {

const char* CodecName(CodecId codec) {
  switch (codec) {
    case CodecId::kNone:
      return "none";
    case CodecId::kTest:
      return "test";
    case CodecId::kInt8:
      return "int8";
    case CodecId::kInt4:
      return "int4";
    case CodecId::kInt8Asym:
      return "int8asym";
    case CodecId::kInt4Asym:
      return "int4asym";
  }
  return "?";
}

std::string CodecName(const Codec& codec) {
  std::string s = CodecName(codec.id);
  if (BlockFormatOf(codec)) s += "/G=" + std::to_string(codec.block);
  return s;
}

std::optional<quant::BlockFormat> BlockFormatOf(const Codec& codec) {
  switch (codec.id) {
    case CodecId::kInt8:
      return quant::BlockFormat{8, true, codec.block};
    case CodecId::kInt4:
      return quant::BlockFormat{4, true, codec.block};
    case CodecId::kInt8Asym:
      return quant::BlockFormat{8, false, codec.block};
    case CodecId::kInt4Asym:
      return quant::BlockFormat{4, false, codec.block};
    case CodecId::kNone:
    case CodecId::kTest:
      break;
  }
  return std::nullopt;
}

bool CodecSupports(const Codec& codec, DataType dtype) {
  if (codec.id == CodecId::kTest) return true;
  const auto f = BlockFormatOf(codec);
  return f && quant::IsValidFormat(*f) && quant::SupportsType(dtype);
}

bool CodecIsLossy(const Codec& codec) {
  return BlockFormatOf(codec).has_value();
}

uint64_t EncodedBytes(const Codec& codec, DataType dtype, uint64_t count) {
  if (count == 0) return 0;
  if (codec.id == CodecId::kTest) return kTestCodecHeaderBytes + count * DataTypeSize(dtype);
  const auto f = BlockFormatOf(codec);
  if (!f || !quant::IsValidFormat(*f)) return 0;
  return quant::EncodedBytes(*f, count);
}

}  // namespace braid
