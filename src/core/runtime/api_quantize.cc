// C API: the block codec as a local call (braidQuantizedSize, braidQuantize, braidDequantize).
// The same kernels and layout as the quantized collectives, so that bytes encoded here travel
// through a plain all-gather and decode anywhere.
#include "braid/braid.h"
#include "core/base/datatype.h"
#include "core/runtime/api_errors.h"
#include "core/runtime/quant_config.h"
#include "quant/block_codec.h"

using namespace braid;

namespace {

Status Check(const char* name, const void* src, size_t count, braidDataType_t datatype,
             const braidQuantConfig_t* quant, const void* dst, quant::BlockFormat* f) {
  if (!quant) return InvalidArgument(std::string(name) + ": quant is NULL");
  BRAID_RETURN_IF_ERROR(ParseQuantConfig(*quant, name, f));
  if (!IsValidDataType(datatype) || !quant::SupportsType(static_cast<DataType>(datatype)))
    return InvalidArgument(std::string(name) +
                           ": the codec takes float32, float16 or bfloat16, not datatype " +
                           std::to_string(datatype));
  if (count > 0 && (!src || !dst))
    return InvalidArgument(std::string(name) + ": NULL buffer for " + std::to_string(count) +
                           " elements");
  return Status::Ok();
}

}  // namespace

extern "C" {

braidResult_t braidQuantizedSize(size_t count, const braidQuantConfig_t* quant, size_t* bytes) {
  quant::BlockFormat f;
  if (!bytes) return Fail(InvalidArgument("braidQuantizedSize: bytes is NULL"));
  if (!quant) return Fail(InvalidArgument("braidQuantizedSize: quant is NULL"));
  Status st = ParseQuantConfig(*quant, "braidQuantizedSize", &f);
  if (!st.ok()) return Fail(st);
  *bytes = static_cast<size_t>(quant::EncodedBytes(f, count));
  return braidSuccess;
}

braidResult_t braidQuantize(const void* src, size_t count, braidDataType_t datatype,
                            const braidQuantConfig_t* quant, void* dst) {
  quant::BlockFormat f;
  Status st = Check("braidQuantize", src, count, datatype, quant, dst, &f);
  if (st.ok() && count > 0)
    st = quant::Quantize(f, static_cast<DataType>(datatype), src, count, dst);
  return st.ok() ? braidSuccess : Fail(st);
}

braidResult_t braidDequantize(const void* src, size_t count, braidDataType_t datatype,
                              const braidQuantConfig_t* quant, void* dst) {
  quant::BlockFormat f;
  Status st = Check("braidDequantize", src, count, datatype, quant, dst, &f);
  if (st.ok() && count > 0)
    st = quant::Dequantize(f, static_cast<DataType>(datatype), src, count, dst);
  return st.ok() ? braidSuccess : Fail(st);
}

}  // extern "C"
