// The scalar conversions of reduce_kernels.h: thin wrappers over the inline forms that the
// kernels vectorise, so a value converted one at a time gets the same bits as in a kernel.
#include "device/cpu/narrow_float.h"
#include "device/cpu/reduce_kernels.h"

namespace braid {

float HalfToFloat(uint16_t h) {
  return cpu::HalfToFloatInline(h);
}
uint16_t FloatToHalf(float f) {
  return cpu::FloatToHalfInline(f);
}
float Bf16ToFloat(uint16_t b) {
  return cpu::Bf16ToFloatInline(b);
}
uint16_t FloatToBf16(float f) {
  return cpu::FloatToBf16Inline(f);
}
float Fp8E4M3ToFloat(uint8_t v) {
  return cpu::Fp8E4M3ToFloatInline(v);
}
uint8_t FloatToFp8E4M3(float f) {
  return cpu::FloatToFp8E4M3Inline(f);
}
float Fp8E5M2ToFloat(uint8_t v) {
  return cpu::Fp8E5M2ToFloatInline(v);
}
uint8_t FloatToFp8E5M2(float f) {
  return cpu::FloatToFp8E5M2Inline(f);
}

}  // namespace braid
