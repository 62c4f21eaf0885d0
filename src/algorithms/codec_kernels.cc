#include "algorithms/codec_kernels.h"

#include <cstring>
#include <string>

#include "algorithms/codec.h"
#include "device/cpu/reduce_kernels.h"
#include "quant/block_codec.h"

namespace braid {
namespace {

struct TestFrameHeader {
  uint32_t magic;
  uint8_t dtype;
  uint8_t pad[3];
  uint64_t count;
};
static_assert(sizeof(TestFrameHeader) == kTestCodecHeaderBytes);

Status Unsupported(const Codec& codec, DataType type) {
  return InvalidArgument(std::string("codec ") + CodecName(codec) + " cannot encode " +
                         DataTypeName(type));
}

}  // namespace

Status EncodeKernel(const Codec& codec, DataType type, const void* src, size_t n, void* dst) {
  if (!CodecSupports(codec, type)) return Unsupported(codec, type);
  if (n == 0) return Status::Ok();
  if (const auto f = BlockFormatOf(codec)) return quant::Quantize(*f, type, src, n, dst);
  TestFrameHeader h{kTestCodecMagic, static_cast<uint8_t>(type), {}, n};
  std::memcpy(dst, &h, sizeof(h));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst) + sizeof(h);
  const size_t bytes = n * DataTypeSize(type);
  for (size_t i = 0; i < bytes; ++i) out[i] = in[i] ^ kTestCodecMask;
  return Status::Ok();
}

Status DecodeKernel(const Codec& codec, DataType type, const void* src, size_t n, void* dst) {
  if (!CodecSupports(codec, type)) return Unsupported(codec, type);
  if (n == 0) return Status::Ok();
  // A block encoding has no header to check: the verifier proves that decoders get whole
  // encodings of their codec and block size.
  if (const auto f = BlockFormatOf(codec)) return quant::Dequantize(*f, type, src, n, dst);
  TestFrameHeader h;
  std::memcpy(&h, src, sizeof(h));
  if (h.magic != kTestCodecMagic || h.dtype != static_cast<uint8_t>(type) || h.count != n)
    return InternalError(
        std::string("test codec: the frame holds ") +
        (h.magic == kTestCodecMagic
             ? std::to_string(h.count) + " elements of type " + std::to_string(h.dtype)
             : "no frame") +
        ", expected " + std::to_string(n) + " " + DataTypeName(type) +
        " elements (wrong bytes handed to the decoder)");
  const auto* in = static_cast<const uint8_t*>(src) + sizeof(h);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t bytes = n * DataTypeSize(type);
  for (size_t i = 0; i < bytes; ++i) out[i] = in[i] ^ kTestCodecMask;
  return Status::Ok();
}

Status DecodeReduceKernel(const Codec& codec, DataType type, ReduceOp op, const void* src, size_t n,
                          void* dst, void* scratch) {
  if (const auto f = BlockFormatOf(codec); f && op == ReduceOp::kSum && CodecSupports(codec, type))
    return quant::DequantizeReduce(*f, type, src, n, dst);
  BRAID_RETURN_IF_ERROR(DecodeKernel(codec, type, src, n, scratch));
  if (n) ReduceKernel(type, op, dst, scratch, dst, n);
  return Status::Ok();
}

}  // namespace braid
