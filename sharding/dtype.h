// Element access in the parameter dtype (fp32, bf16, fp16) for the sharding layer. Conversions
// to the narrow types round to nearest even, as PyTorch's .to(bfloat16/float16) does, so that a
// trainer's reference and braid's redistributed parameters agree bit for bit. Written out by hand:
// the layer sees only braid's public API, which has no conversion helpers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "braid/braid.h"

namespace braid::shard {

inline bool SupportedParamType(braidDataType_t t) {
  return t == braidFloat32 || t == braidBfloat16 || t == braidFloat16;
}
inline size_t ElemSize(braidDataType_t t) {
  return t == braidFloat32 ? 4 : 2;
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf (65504 is odd)
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half, round(|f| * 2^24) in the current (nearest-even) mode; the
    // scaling by a power of two is exact. 1024 is the smallest normal's encoding, as it should.
    return sign | static_cast<uint16_t>(std::nearbyint(BitsFloat(a) * 16777216.0f));
  }
  uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffffu) >> 13));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return sign | static_cast<uint16_t>(h);
}
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return std::copysign(std::ldexp(static_cast<float>(m), -24), sign ? -1.0f : 1.0f);
  if (e == 31) return BitsFloat(sign | 0x7f800000u | (m << 13));
  return BitsFloat(sign | ((e - 15 + 127) << 23) | (m << 13));
}

// Element i of a buffer of dtype t.
inline float Load(braidDataType_t t, const void* p, size_t i) {
  if (t == braidFloat32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == braidBfloat16 ? Bf16ToFloat(h) : HalfToFloat(h);
}
inline void Store(braidDataType_t t, void* p, size_t i, float v) {
  if (t == braidFloat32) {
    static_cast<float*>(p)[i] = v;
    return;
  }
  static_cast<uint16_t*>(p)[i] = t == braidBfloat16 ? FloatToBf16(v) : FloatToHalf(v);
}

}  // namespace braid::shard
