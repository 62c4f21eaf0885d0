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

#include <cstddef>
#include <cstdint>

#include "device/cpu/kernel_isa.h"
#include "device/element_math.h"

#if BRAID_KERNELS_X86
#include <immintrin.h>
#endif

namespace braid::cpu {

// The scalar conversions, one definition shared with the GPU kernels (device/element_math.h).
using element::Bf16ToFloatInline;
using element::BitsToFloat;
using element::FloatBits;
using element::FloatToBf16Inline;
using element::FloatToFp8E4M3Inline;
using element::FloatToFp8E5M2Inline;
using element::FloatToHalfInline;
using element::Fp8E4M3ToFloatInline;
using element::Fp8E5M2ToFloatInline;
using element::HalfToFloatInline;

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
