#include "algorithms/codec.h"

namespace braid {

const char* CodecName(CodecId codec) {
  switch (codec) {
    case CodecId::kNone:
      return "none";
    case CodecId::kTest:
      return "test";
  }
  return "?";
}

bool CodecSupports(CodecId codec, DataType dtype) {
  (void)dtype;
  return codec == CodecId::kTest;
}

uint64_t EncodedBytes(CodecId codec, DataType dtype, uint64_t count) {
  if (count == 0) return 0;
  switch (codec) {
    case CodecId::kNone:
      return 0;
    case CodecId::kTest:
      return kTestCodecHeaderBytes + count * DataTypeSize(dtype);
  }
  return 0;
}

}  // namespace braid
