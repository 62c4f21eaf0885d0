// AVX-512 tier of the block codecs (AVX-512F + F16C), the same structure as the AVX2 tier
// (block_codec_avx2.cc) with 16-lane vectors: per block, the statistics and the codes 16
// elements at a time, the block's edges through the reference's per-element code. Compiled for
// the baseline target; only the functions marked BRAID_AVX512 use the instructions, and they run
// only where the CPU has them (block_codec.cc dispatches).
#if defined(__x86_64__)

// GCC 12 reports the deliberately undefined vectors inside its own AVX-512 headers
// (_mm512_undefined_*) as maybe-uninitialized (GCC PR 105593): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "quant/block_kernels.h"

#define BRAID_AVX512 __attribute__((target("avx512f,avx2,f16c")))
#define BRAID_AVX512_INLINE __attribute__((target("avx512f,avx2,f16c"), always_inline)) inline

namespace braid::quant::detail {
namespace {

template <DataType T>
BRAID_AVX512_INLINE __m512 Load16(const void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (T == DataType::kFloat16)
      return _mm512_cvtph_ps(h);
    else
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Rounds to nearest even into the type, as StoreElement (values are never NaN here).
template <DataType T>
BRAID_AVX512_INLINE void Store16(void* p, uint64_t i, __m512 v) {
  if constexpr (T == DataType::kFloat32) {
    _mm512_storeu_ps(static_cast<float*>(p) + i, v);
  } else {
    __m256i h;
    if constexpr (T == DataType::kFloat16) {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m512i x = _mm512_castps_si512(v);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
      h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), h);
  }
}

// 16 codes of consecutive elements, in order, as bytes (two's complement or unsigned; the
// clamped values fit, so the saturating narrowing is exact).
template <DataType T>
BRAID_AVX512_INLINE __m128i Codes16(const BlockFormat& f, const void* src, uint64_t i, __m512 vd,
                                    __m512 vm, __m512 lo, __m512 hi) {
  __m512 x = Load16<T>(src, i);
  if (!f.symmetric) x = _mm512_sub_ps(x, vm);
  const __m512 v = _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x, vd), lo), hi),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i q = _mm512_cvtps_epi32(v);
  return f.symmetric ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q);
}

template <DataType T>
BRAID_AVX512 void QuantizeT(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst) {
  ZeroPadding(f, n, dst);
  uint8_t* codes = dst + CodesOffset(f, n);
  const uint64_t nb = NumBlocks(f, n);
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const float qlo = f.symmetric ? -static_cast<float>(1 << (f.bits - 1)) : 0.0f;
  const float qhi = f.symmetric ? static_cast<float>((1 << (f.bits - 1)) - 1)
                                : static_cast<float>((1 << f.bits) - 1);
  const __m512 lo = _mm512_set1_ps(qlo), hi = _mm512_set1_ps(qhi);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    __m512i vamax = _mm512_setzero_si512();
    const __m512 first = _mm512_set1_ps(LoadElement<T>(src, s));
    __m512 vmin = first, vmax = first;
    uint64_t i = s;
    for (; i + 16 <= e; i += 16) {
      const __m512 x = Load16<T>(src, i);
      vamax = _mm512_max_epu32(vamax, _mm512_and_si512(_mm512_castps_si512(x), absmask));
      if (!f.symmetric) {
        vmin = _mm512_min_ps(vmin, x);
        vmax = _mm512_max_ps(vmax, x);
      }
    }
    uint32_t amax = _mm512_reduce_max_epu32(vamax);
    float xmin = _mm512_reduce_min_ps(vmin), xmax = _mm512_reduce_max_ps(vmax);
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
    i = s;
    if (f.bits == 4 && (i & 1)) {
      QuantizeRun<T>(f, src, i, i + 1, d, m, codes);
      ++i;
    }
    const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
    for (; i + 16 <= e; i += 16) {
      const __m128i q = Codes16<T>(f, src, i, vd, vm, lo, hi);
      if (f.bits == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), q);
      } else {
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

// 16 codes from element i (even for INT4) as int32.
BRAID_AVX512_INLINE __m512i Codes16Wide(const BlockFormat& f, const uint8_t* codes, uint64_t i) {
  if (f.bits == 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    return f.symmetric ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
  }
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
  __m128i high, low;
  if (f.symmetric) {
    const __m128i w = _mm_cvtepi8_epi16(b);
    high = _mm_srai_epi16(w, 4);
    low = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
  } else {
    const __m128i w = _mm_cvtepu8_epi16(b);
    high = _mm_srli_epi16(w, 4);
    low = _mm_and_si128(w, _mm_set1_epi16(0x000f));
  }
  const __m256i both =
      _mm256_set_m128i(_mm_unpackhi_epi16(high, low), _mm_unpacklo_epi16(high, low));
  return _mm512_cvtepi16_epi32(both);
}

template <DataType T>
BRAID_AVX512 void DequantizeT(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst,
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
    const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
    for (; i + 16 <= e; i += 16) {
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(Codes16Wide(f, codes, i)), vd);
      if (!f.symmetric) v = _mm512_add_ps(vm, v);
      if (reduce) v = _mm512_add_ps(Load16<T>(dst, i), v);
      Store16<T>(dst, i, v);
    }
    DequantizeRun<T>(f, codes, i, e, d, m, dst, reduce);
  }
}

}  // namespace

void QuantizeAvx512(const BlockFormat& f, DataType type, const void* src, uint64_t n,
                    uint8_t* dst) {
  switch (type) {
    case DataType::kFloat32:
      return QuantizeT<DataType::kFloat32>(f, src, n, dst);
    case DataType::kFloat16:
      return QuantizeT<DataType::kFloat16>(f, src, n, dst);
    default:
      return QuantizeT<DataType::kBfloat16>(f, src, n, dst);
  }
}

void DequantizeAvx512(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n,
                      void* dst, bool reduce) {
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
