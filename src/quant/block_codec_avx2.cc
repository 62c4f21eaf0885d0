// AVX2 + F16C tier of the block codecs. The file is compiled for the baseline target; only the
// functions marked BRAID_AVX2 use the wider instructions, and they run only where the CPU has
// them (block_codec.cc dispatches). Per block: the statistics and the codes of 16 elements at a
// time, then the block's edges (an odd INT4 start, a tail shorter than a vector) element by
// element with the reference's own code, so every output byte equals the reference's.
#if defined(__x86_64__)

#include <immintrin.h>

#include "quant/block_kernels.h"

#define BRAID_AVX2 __attribute__((target("avx2,f16c")))
#define BRAID_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

namespace braid::quant::detail {
namespace {

template <DataType T>
BRAID_AVX2_INLINE __m256 Load8(const void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (T == DataType::kFloat16)
      return _mm256_cvtph_ps(h);
    else
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Rounds to nearest even into the type, as StoreElement; values are never NaN here (poisoned
// blocks go through the reference path).
template <DataType T>
BRAID_AVX2_INLINE void Store8(void* p, uint64_t i, __m256 v) {
  if constexpr (T == DataType::kFloat32) {
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
  } else {
    __m128i h;
    if constexpr (T == DataType::kFloat16) {
      h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m256i x = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
      // packus works per 128-bit lane: gather the two lanes' low halves.
      h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), h);
  }
}

BRAID_AVX2_INLINE uint32_t HMaxU32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}
BRAID_AVX2_INLINE float HMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0x4e));
  m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0xb1));
  return _mm_cvtss_f32(m);
}
BRAID_AVX2_INLINE float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0x4e));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0xb1));
  return _mm_cvtss_f32(m);
}

// 16 codes of consecutive elements, in order, as bytes (two's complement or unsigned).
template <DataType T>
BRAID_AVX2_INLINE __m128i Codes16(const BlockFormat& f, const void* src, uint64_t i, __m256 vd,
                                  __m256 vm, __m256 lo, __m256 hi) {
  __m256 x0 = Load8<T>(src, i), x1 = Load8<T>(src, i + 8);
  if (!f.symmetric) {
    x0 = _mm256_sub_ps(x0, vm);
    x1 = _mm256_sub_ps(x1, vm);
  }
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i q0 = _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(_mm256_div_ps(x0, vd), lo), hi), kRound));
  const __m256i q1 = _mm256_cvtps_epi32(
      _mm256_round_ps(_mm256_min_ps(_mm256_max_ps(_mm256_div_ps(x1, vd), lo), hi), kRound));
  // packs works per 128-bit lane: reorder the 64-bit quarters to restore element order.
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
  const __m128i a = _mm256_castsi256_si128(w), b = _mm256_extracti128_si256(w, 1);
  return f.symmetric ? _mm_packs_epi16(a, b) : _mm_packus_epi16(a, b);
}

template <DataType T>
BRAID_AVX2 void QuantizeT(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst) {
  ZeroPadding(f, n, dst);
  uint8_t* codes = dst + CodesOffset(f, n);
  const uint64_t nb = NumBlocks(f, n);
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const float qlo = f.symmetric ? -static_cast<float>(1 << (f.bits - 1)) : 0.0f;
  const float qhi = f.symmetric ? static_cast<float>((1 << (f.bits - 1)) - 1)
                                : static_cast<float>((1 << f.bits) - 1);
  const __m256 lo = _mm256_set1_ps(qlo), hi = _mm256_set1_ps(qhi);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    // Statistics: max of |x| bits (finiteness, symmetric scale) and, asymmetric, min and max.
    __m256i vamax = _mm256_setzero_si256();
    const __m256 first = _mm256_set1_ps(LoadElement<T>(src, s));
    __m256 vmin = first, vmax = first;
    uint64_t i = s;
    for (; i + 8 <= e; i += 8) {
      const __m256 x = Load8<T>(src, i);
      vamax = _mm256_max_epu32(vamax, _mm256_and_si256(_mm256_castps_si256(x), absmask));
      if (!f.symmetric) {
        vmin = _mm256_min_ps(vmin, x);
        vmax = _mm256_max_ps(vmax, x);
      }
    }
    uint32_t amax = HMaxU32(vamax);
    float xmin = HMin(vmin), xmax = HMax(vmax);
    for (; i < e; ++i) {
      const float x = LoadElement<T>(src, i);
      const uint32_t a = Bits(x) & 0x7fffffffu;
      amax = a > amax ? a : amax;
      xmin = x < xmin ? x : xmin;
      xmax = x > xmax ? x : xmax;
    }
    float d = 0, m = 0;
    if (f.symmetric) {
      d = SymmetricScale(amax, f.bits);
      StoreParam(dst, b, d);
    } else {
      // A NaN makes the vector min/max meaningless, but such a block is poisoned anyway.
      if (NonFiniteAbsBits(amax))
        d = m = FromBits(kNanBitsF32);
      else
        AsymmetricParams(xmin, xmax, f.bits, &d, &m);
      StoreParam(dst, 2 * b, d);
      StoreParam(dst, 2 * b + 1, m);
    }
    if (Poisoned(d)) {
      QuantizeRun<T>(f, src, s, e, d, m, codes);
      continue;
    }
    // Codes. An INT4 block starting at an odd element shares its first byte with the previous
    // block: that element goes through the reference path, then whole bytes follow.
    i = s;
    if (f.bits == 4 && (i & 1)) {
      QuantizeRun<T>(f, src, i, i + 1, d, m, codes);
      ++i;
    }
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (; i + 16 <= e; i += 16) {
      const __m128i q = Codes16<T>(f, src, i, vd, vm, lo, hi);
      if (f.bits == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), q);
      } else {
        // 16-bit lane k holds code 2k (low byte) and 2k+1 (high byte): byte = lo << 4 | hi.
        const __m128i nib = _mm_set1_epi16(0x000f);
        const __m128i packed = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(q, nib), 4),
                                            _mm_and_si128(_mm_srli_epi16(q, 8), nib));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i / 2),
                         _mm_packus_epi16(packed, packed));
      }
    }
    QuantizeRun<T>(f, src, i, e, d, m, codes);
  }
}

// 8 codes from element i (even for INT4) as int32.
BRAID_AVX2_INLINE __m256i Codes8(const BlockFormat& f, const uint8_t* codes, uint64_t i) {
  if (f.bits == 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i));
    return f.symmetric ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  }
  uint32_t four;
  std::memcpy(&four, codes + i / 2, 4);
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(four));
  __m128i high, low;
  if (f.symmetric) {
    const __m128i w = _mm_cvtepi8_epi16(b);  // sign-extended bytes
    high = _mm_srai_epi16(w, 4);
    low = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
  } else {
    const __m128i w = _mm_cvtepu8_epi16(b);
    high = _mm_srli_epi16(w, 4);
    low = _mm_and_si128(w, _mm_set1_epi16(0x000f));
  }
  return _mm256_cvtepi16_epi32(_mm_unpacklo_epi16(high, low));
}

template <DataType T>
BRAID_AVX2 void DequantizeT(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst,
                            bool reduce) {
  const uint8_t* codes = src + CodesOffset(f, n);
  const uint64_t nb = NumBlocks(f, n);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    const float d = LoadParam(src, f.symmetric ? b : 2 * b);
    const float m = f.symmetric ? 0.0f : LoadParam(src, 2 * b + 1);
    if (Poisoned(d)) {
      DequantizeRun<T>(f, codes, s, e, d, m, dst, reduce);
      continue;
    }
    uint64_t i = s;
    if (f.bits == 4 && (i & 1)) {
      DequantizeRun<T>(f, codes, i, i + 1, d, m, dst, reduce);
      ++i;
    }
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    for (; i + 8 <= e; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(Codes8(f, codes, i)), vd);
      if (!f.symmetric) v = _mm256_add_ps(vm, v);
      if (reduce) v = _mm256_add_ps(Load8<T>(dst, i), v);
      Store8<T>(dst, i, v);
    }
    DequantizeRun<T>(f, codes, i, e, d, m, dst, reduce);
  }
}

}  // namespace

void QuantizeAvx2(const BlockFormat& f, DataType type, const void* src, uint64_t n, uint8_t* dst) {
  switch (type) {
    case DataType::kFloat32:
      return QuantizeT<DataType::kFloat32>(f, src, n, dst);
    case DataType::kFloat16:
      return QuantizeT<DataType::kFloat16>(f, src, n, dst);
    default:
      return QuantizeT<DataType::kBfloat16>(f, src, n, dst);
  }
}

void DequantizeAvx2(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n, void* dst,
                    bool reduce) {
  switch (type) {
    case DataType::kFloat32:
      return DequantizeT<DataType::kFloat32>(f, src, n, dst, reduce);
    case DataType::kFloat16:
      return DequantizeT<DataType::kFloat16>(f, src, n, dst, reduce);
    default:
      return DequantizeT<DataType::kBfloat16>(f, src, n, dst, reduce);
  }
}

}  // namespace braid::quant::detail

#endif  // __x86_64__
