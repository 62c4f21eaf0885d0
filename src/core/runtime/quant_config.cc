#include "core/runtime/quant_config.h"

namespace braid {

Status ParseQuantConfig(const braidQuantConfig_t& q, const char* name, quant::BlockFormat* out) {
  auto bad = [&](const std::string& m) { return InvalidArgument(std::string(name) + ": " + m); };
  if (q.bits != 8 && q.bits != 4)
    return bad("quantization bits must be 8 or 4, not " + std::to_string(q.bits));
  if (q.blockSize < 1 || q.blockSize > kMaxQuantBlock)
    return bad("quantization blockSize must be in [1, " + std::to_string(kMaxQuantBlock) +
               "], not " + std::to_string(q.blockSize));
  if (q.symmetric != 0 && q.symmetric != 1)
    return bad("quantization symmetric must be 0 or 1, not " + std::to_string(q.symmetric));
  out->bits = static_cast<uint8_t>(q.bits);
  out->symmetric = q.symmetric == 1;
  out->block = static_cast<uint32_t>(q.blockSize);
  return Status::Ok();
}

}  // namespace braid
