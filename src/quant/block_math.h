// The arithmetic of the block codecs (block_format.h), one element or one block's parameters at a
// time, written once for the CPU reference, the CPU vector kernels' edges and the GPU kernels
// (device/cuda/block_codec.cu, built by nvcc and hipcc).
// Bit-identity across them rests on: IEEE division, multiplication and addition rounded to
// nearest even, each rounded on its own (the quant targets build with -ffp-contract=off, nvcc with
// --fmad=false, hipcc with -ffp-contract=off, so no multiply-add is fused), no flush of
// subnormals, and canonical NaNs written explicitly rather than produced by arithmetic (x86 and
// CUDA produce different NaN bits).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "device/gpu_portability.h"

// Host and device (nvcc or hipcc: device/gpu_portability.h) in the GPU kernels; plain inline in
// the CPU codecs.
#if BRAID_GPU_COMPILER
#define BRAID_QUANT_HD __host__ __device__ __forceinline__
#else
#define BRAID_QUANT_HD inline
#endif

namespace braid::quant {

inline constexpr uint32_t kNanBitsF32 = 0x7fc00000u;
inline constexpr uint16_t kNanBitsF16 = 0x7e00u;
inline constexpr uint16_t kNanBitsBf16 = 0x7fc0u;

BRAID_QUANT_HD uint32_t Bits(float f) {
#if BRAID_DEVICE_PASS
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
BRAID_QUANT_HD float FromBits(uint32_t u) {
#if BRAID_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Round half to even (the default rounding mode's nearbyint on the host, rintf on the device).
BRAID_QUANT_HD float RoundHalfEven(float v) {
#if BRAID_DEVICE_PASS
  return rintf(v);
#else
  return std::nearbyint(v);
#endif
}

// ---------------------------------------------------------------- fp16 and bf16 <-> fp32
// Widening is exact. Narrowing rounds to nearest even; NaN inputs never reach it from the codecs
// (poisoned blocks write canonical NaNs), so it only needs to be right for finite values and inf.

BRAID_QUANT_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t r;
  if (em >= 0x7c00u)
    r = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);  // inf, NaN (quietened)
  else if (em < 0x0400u)
    r = Bits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);  // subnormal: exact
  else
    r = (em << 13) + ((127u - 15u) << 23);
  return FromBits(r | sign);
}

BRAID_QUANT_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r;
  if (ax > 0x7f800000u)
    r = 0x7e00u | ((ax >> 13) & 0x03ffu);  // NaN: quiet, top payload bits (as F16C)
  else if (ax >= 0x477ff000u)
    r = 0x7c00u;  // from halfway between 65504 and 2^16 up: inf
  else if (ax < 0x38800000u)
    // Subnormal result: adding 0.5 puts fp16's subnormal ulp (2^-24) at fp32's last mantissa
    // place, so the FPU's round-to-nearest-even does the rounding.
    r = Bits(FromBits(ax) + 0.5f) - Bits(0.5f);
  else
    r = (ax - ((127u - 15u) << 23) + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(r | sign);
}

BRAID_QUANT_HD float Bf16ToFloat(uint16_t b) {
  return FromBits(static_cast<uint32_t>(b) << 16);
}

BRAID_QUANT_HD uint16_t FloatToBf16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x | 0x00400000u) >> 16);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---------------------------------------------------------------- block parameters

// Whether |x|'s bits (sign cleared) are an infinity or a NaN.
BRAID_QUANT_HD bool NonFiniteAbsBits(uint32_t abs_bits) {
  return abs_bits >= 0x7f800000u;
}

// Symmetric scale from the block's largest |x| bits (a plain unsigned max of the sign-cleared
// bits orders finite floats like their magnitudes and puts inf and NaN above them all).
BRAID_QUANT_HD float SymmetricScale(uint32_t absmax_bits, int bits) {
  if (NonFiniteAbsBits(absmax_bits)) return FromBits(kNanBitsF32);
  const float d = FromBits(absmax_bits) / static_cast<float>(1 << (bits - 1));
  return d == 0.0f ? 1.0f : d;
}

// Asymmetric parameters from the block's min and max (both finite: the caller checked the bits).
// Adding +0 turns -0 into +0, so the stored min does not depend on which zero a min() picked.
BRAID_QUANT_HD void AsymmetricParams(float lo, float hi, int bits, float* d, float* m) {
  lo = lo + 0.0f;
  const float range = hi - lo;
  if (NonFiniteAbsBits(Bits(range) & 0x7fffffffu)) {
    *d = FromBits(kNanBitsF32);
    *m = FromBits(kNanBitsF32);
    return;
  }
  const float s = range / static_cast<float>((1 << bits) - 1);
  *d = s == 0.0f ? 1.0f : s;
  *m = lo;
}

// Whether a block's stored scale marks it poisoned.
BRAID_QUANT_HD bool Poisoned(float d) {
  return d != d;
}

// ---------------------------------------------------------------- one element

BRAID_QUANT_HD int32_t SymmetricCode(float x, float d, int bits) {
  const float lo = -static_cast<float>(1 << (bits - 1));
  const float hi = static_cast<float>((1 << (bits - 1)) - 1);
  float v = x / d;
  // Clamping before rounding gives the same integer (the bounds are integers) and keeps the
  // rounding inside its exact range.
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return static_cast<int32_t>(RoundHalfEven(v));
}

BRAID_QUANT_HD int32_t AsymmetricCode(float x, float d, float m, int bits) {
  const float hi = static_cast<float>((1 << bits) - 1);
  float v = (x - m) / d;
  v = v < 0.0f ? 0.0f : v;
  v = v > hi ? hi : v;
  return static_cast<int32_t>(RoundHalfEven(v));
}

BRAID_QUANT_HD float SymmetricValue(int32_t q, float d) {
#if BRAID_DEVICE_PASS
  return __fmul_rn(static_cast<float>(q), d);
#else
  return static_cast<float>(q) * d;
#endif
}

BRAID_QUANT_HD float AsymmetricValue(int32_t q, float d, float m) {
#if BRAID_DEVICE_PASS
  return __fadd_rn(m, __fmul_rn(static_cast<float>(q), d));
#else
  return m + static_cast<float>(q) * d;
#endif
}

// Sign-extends a 4-bit two's complement code.
BRAID_QUANT_HD int32_t SignExtend4(uint32_t nibble) {
  return static_cast<int32_t>((nibble & 0xFu) ^ 0x8u) - 8;
}

}  // namespace braid::quant
