// The narrow floating formats (fp16, bf16, fp8 e4m3, fp8 e5m2) and their exact conversions to and
// from fp32, as branch-free bit manipulation: every case (normal, subnormal, overflow, NaN) is
// computed and the right one selected, so that a loop of them vectorises. Rounding is to nearest
// even everywhere (the subnormal cases let the FPU round, assuming its default rounding mode).
//
// NaN: fp16 -> fp32 quietens signalling NaNs and keeps the payload, and fp32 -> fp16 keeps the top
// payload bits and sets the quiet bit, exactly as F16C's vcvtph2ps/vcvtps2ph do, so the portable
// and the F16C paths agree bit for bit. fp32 -> fp8 gives the canonical NaN 0x7f (sign dropped),
// and finite or infinite values beyond the largest finite one saturate to it (CUDA's
// __NV_SATFINITE conversion, which NCCL's fp8 reductions use).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "device/cpu/kernel_isa.h"

#if BRAID_KERNELS_X86
#include <immintrin.h>
#endif

namespace braid::cpu {

BRAID_KERNEL_INLINE uint32_t FloatBits(float f) {
  return std::bit_cast<uint32_t>(f);
}
BRAID_KERNEL_INLINE float BitsToFloat(uint32_t u) {
  return std::bit_cast<float>(u);
}

// ---------------------------------------------------------------- fp16 (1-5-10, bias 15)

BRAID_KERNEL_INLINE float HalfToFloatInline(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  // Inf and NaN: all-ones exponent; a NaN also gets the quiet bit.
  const uint32_t special = (em << 13) | 0x7f800000u | SelectBits(em > 0x7c00u, 0x00400000u, 0u);
  // Subnormal (and zero): mantissa * 2^-24, exact in fp32; integer->float conversion vectorises.
  const uint32_t subnormal = FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  uint32_t r = SelectBits(em < 0x0400u, subnormal, normal);
  r = SelectBits(em >= 0x7c00u, special, r);
  return BitsToFloat(r | sign);
}

BRAID_KERNEL_INLINE uint16_t FloatToHalfInline(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal result: rebias the exponent (127 -> 15, i.e. subtract 112 << 23 modulo 2^32) and drop 13
  // mantissa bits, adding half an ulp minus one plus the kept lsb (ties to even).
  const uint32_t normal = (ax - ((127u - 15u) << 23) + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
  // Subnormal result (|f| < 2^-14): adding 0.5 puts the fp16 subnormal ulp (2^-24) at the last
  // place of fp32's mantissa, so the FPU's round-to-nearest-even rounds for us.
  const uint32_t subnormal = FloatBits(BitsToFloat(ax) + 0.5f) - FloatBits(0.5f);
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x03ffu);
  // 65520 = 0x477ff000 is halfway between the largest finite 65504 (odd mantissa) and 2^16: ties
  // and everything above round to infinity.
  uint32_t r = SelectBits(ax < 0x38800000u, subnormal, normal);
  r = SelectBits(ax >= 0x477ff000u, 0x7c00u, r);
  r = SelectBits(ax > 0x7f800000u, nan, r);
  return static_cast<uint16_t>(r | sign);
}

// ---------------------------------------------------------------- bf16 (1-8-7, bias 127)

BRAID_KERNEL_INLINE float Bf16ToFloatInline(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

BRAID_KERNEL_INLINE uint16_t FloatToBf16Inline(float f) {
  const uint32_t x = FloatBits(f);
  // Carry out of the mantissa rounds up the exponent, and out of the largest finite into inf.
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  const uint32_t quiet_nan = x | 0x00400000u;
  const bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
  // Selecting before the one shift and narrowing, rather than after, saves a third of the
  // vector instructions.
  return static_cast<uint16_t>(SelectBits(is_nan, quiet_nan, rounded) >> 16);
}

// ---------------------------------------------------------------- fp8 e4m3 (OCP "FN": 1-4-3,
// bias 7, no infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9)

BRAID_KERNEL_INLINE float Fp8E4M3ToFloatInline(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t em = v & 0x7fu;
  const uint32_t normal = (em << 20) + ((127u - 7u) << 23);
  const uint32_t subnormal = FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-9f);
  uint32_t r = SelectBits(em < 0x08u, subnormal, normal);
  r = SelectBits(em == 0x7fu, 0x7fc00000u, r);
  return BitsToFloat(r | sign);
}

BRAID_KERNEL_INLINE uint8_t FloatToFp8E4M3Inline(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t normal = (ax - ((127u - 7u) << 23) + 0x7ffffu + ((ax >> 20) & 1u)) >> 20;
  // |f| < 2^-6: 2^14 has an ulp of 2^-9, the e4m3 subnormal step.
  const uint32_t subnormal = FloatBits(BitsToFloat(ax) + 0x1p14f) - FloatBits(0x1p14f);
  // Everything from 448 (0x43e00000) up, infinity included, saturates to 448 (0x7e).
  uint32_t r = SelectBits(ax < 0x3c800000u, subnormal, normal);
  r = SelectBits(ax >= 0x43e00000u, 0x7eu, r);
  return static_cast<uint8_t>(SelectBits(ax > 0x7f800000u, 0x7fu, r | sign));
}

// ---------------------------------------------------------------- fp8 e5m2 (OCP: 1-5-2, bias 15,
// IEEE inf and NaN, largest finite 57344, smallest subnormal 2^-16). It is the top byte of fp16.

BRAID_KERNEL_INLINE float Fp8E5M2ToFloatInline(uint8_t v) {
  return HalfToFloatInline(static_cast<uint16_t>(static_cast<uint16_t>(v) << 8));
}

BRAID_KERNEL_INLINE uint8_t FloatToFp8E5M2Inline(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t normal = (ax - ((127u - 15u) << 23) + 0xfffffu + ((ax >> 21) & 1u)) >> 21;
  // |f| < 2^-14: 2^7 has an ulp of 2^-16, the e5m2 subnormal step.
  const uint32_t subnormal = FloatBits(BitsToFloat(ax) + 0x1p7f) - FloatBits(0x1p7f);
  // Everything from 57344 (0x47600000) up, infinity included, saturates to 57344 (0x7b).
  uint32_t r = SelectBits(ax < 0x38800000u, subnormal, normal);
  r = SelectBits(ax >= 0x47600000u, 0x7bu, r);
  return static_cast<uint8_t>(SelectBits(ax > 0x7f800000u, 0x7fu, r | sign));
}

// ---------------------------------------------------------------- array conversions
// A format is a struct with the storage type and Widen/Narrow over n elements; kernels convert
// blocks of narrow values to fp32 on the stack with these, combine in fp32, and narrow back once.
// A format whose conversions are only a few integer operations (bf16) instead sets kFused and
// provides scalar ToFloat/FromFloat: one loop converting, combining and converting back then
// vectorises as a whole and skips the round trip through the stack (measured 10-20% faster).

struct HalfFormat {
  using Storage = uint16_t;
  static constexpr bool kFused = false;
  BRAID_KERNEL_INLINE static void Widen(const uint16_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloatInline(src[i]);
  }
  BRAID_KERNEL_INLINE static void Narrow(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalfInline(src[i]);
  }
};

struct Bf16Format {
  using Storage = uint16_t;
  static constexpr bool kFused = true;
  BRAID_KERNEL_INLINE static float ToFloat(uint16_t b) { return Bf16ToFloatInline(b); }
  BRAID_KERNEL_INLINE static uint16_t FromFloat(float f) { return FloatToBf16Inline(f); }
  BRAID_KERNEL_INLINE static void Widen(const uint16_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloatInline(src[i]);
  }
  BRAID_KERNEL_INLINE static void Narrow(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToBf16Inline(src[i]);
  }
};

struct Fp8E4M3Format {
  using Storage = uint8_t;
  static constexpr bool kFused = false;
  BRAID_KERNEL_INLINE static void Widen(const uint8_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToFloatInline(src[i]);
  }
  BRAID_KERNEL_INLINE static void Narrow(const float* src, uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToFp8E4M3Inline(src[i]);
  }
};

struct Fp8E5M2Format {
  using Storage = uint8_t;
  static constexpr bool kFused = false;
  BRAID_KERNEL_INLINE static void Widen(const uint8_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = Fp8E5M2ToFloatInline(src[i]);
  }
  BRAID_KERNEL_INLINE static void Narrow(const float* src, uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToFp8E5M2Inline(src[i]);
  }
};

#if BRAID_KERNELS_X86
// fp16 through F16C, 8 values per instruction; the tail goes through the portable code, which
// gives the same bits. Only callable on CPUs with AVX2 and F16C. Not always_inline (GCC refuses
// to force an F16C function into the portable-target block helpers that call it); carrying its
// own target attribute, an out-of-line copy is still F16C code, and a call per block is cheap.
struct HalfF16cFormat {
  using Storage = uint16_t;
  static constexpr bool kFused = false;
  BRAID_TARGET_AVX2_F16C static void Widen(const uint16_t* src, float* dst, size_t n) {
    const size_t full = n & ~size_t{7};
    for (size_t i = 0; i < full; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (size_t i = full; i < n; ++i) dst[i] = HalfToFloatInline(src[i]);
  }
  BRAID_TARGET_AVX2_F16C static void Narrow(const float* src, uint16_t* dst, size_t n) {
    const size_t full = n & ~size_t{7};
    for (size_t i = 0; i < full; i += 8) {
      const __m128i h =
          _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
    for (size_t i = full; i < n; ++i) dst[i] = FloatToHalfInline(src[i]);
  }
};

// fp8 e5m2 widened through F16C (an e5m2 byte is the top byte of an fp16); narrowing stays
// portable, since rounding to fp16 first and then to e5m2 would round twice.
struct Fp8E5M2F16cFormat {
  using Storage = uint8_t;
  static constexpr bool kFused = false;
  BRAID_TARGET_AVX2_F16C static void Widen(const uint8_t* src, float* dst, size_t n) {
    const size_t full = n & ~size_t{15};
    for (size_t i = 0; i < full; i += 16) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m256i halves = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8);
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(halves)));
      _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1)));
    }
    for (size_t i = full; i < n; ++i) dst[i] = Fp8E5M2ToFloatInline(src[i]);
  }
  BRAID_KERNEL_INLINE static void Narrow(const float* src, uint8_t* dst, size_t n) {
    Fp8E5M2Format::Narrow(src, dst, n);
  }
};
#endif

}  // namespace braid::cpu
