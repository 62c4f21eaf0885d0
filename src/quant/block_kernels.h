// The per-tier kernels behind block_codec.h (internal to src/quant). Arguments are validated by
// the caller: a valid format, n > 0, `dst`/`src` encodings of EncodedBytes(f, n) bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/base/datatype.h"
#include "quant/block_format.h"
#include "quant/block_math.h"

namespace braid::quant::detail {

void QuantizeScalar(const BlockFormat& f, DataType type, const void* src, uint64_t n, uint8_t* dst);
void DequantizeScalar(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n,
                      void* dst, bool reduce);
#if defined(__x86_64__)
void QuantizeAvx2(const BlockFormat& f, DataType type, const void* src, uint64_t n, uint8_t* dst);
void DequantizeAvx2(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n, void* dst,
                    bool reduce);
void QuantizeAvx512(const BlockFormat& f, DataType type, const void* src, uint64_t n, uint8_t* dst);
void DequantizeAvx512(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n,
                      void* dst, bool reduce);
#endif

// ---------------------------------------------------------------- helpers shared by the tiers

// Element i of a typed buffer, widened to fp32 (exact).
template <DataType T>
inline float LoadElement(const void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32) {
    float v;
    std::memcpy(&v, static_cast<const uint8_t*>(p) + i * 4, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(p) + i * 2, 2);
    return T == DataType::kFloat16 ? HalfToFloat(h) : Bf16ToFloat(h);
  }
}

// Stores v rounded to nearest even into element i.
template <DataType T>
inline void StoreElement(void* p, uint64_t i, float v) {
  if constexpr (T == DataType::kFloat32) {
    std::memcpy(static_cast<uint8_t*>(p) + i * 4, &v, 4);
  } else {
    const uint16_t h = T == DataType::kFloat16 ? FloatToHalf(v) : FloatToBf16(v);
    std::memcpy(static_cast<uint8_t*>(p) + i * 2, &h, 2);
  }
}

template <DataType T>
inline void StoreCanonicalNan(void* p, uint64_t i) {
  if constexpr (T == DataType::kFloat32) {
    std::memcpy(static_cast<uint8_t*>(p) + i * 4, &kNanBitsF32, 4);
  } else {
    const uint16_t h = T == DataType::kFloat16 ? kNanBitsF16 : kNanBitsBf16;
    std::memcpy(static_cast<uint8_t*>(p) + i * 2, &h, 2);
  }
}

// Writes code q of element i. INT4 codes are written in element order: an even element sets its
// byte (low nibble 0), the odd one after it fills the low nibble.
inline void PutCode(uint8_t* codes, uint64_t i, int32_t q, int bits) {
  if (bits == 8) {
    codes[i] = static_cast<uint8_t>(q);
  } else if ((i & 1) == 0) {
    codes[i / 2] = static_cast<uint8_t>((q & 0xF) << 4);
  } else {
    codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (q & 0xF));
  }
}

inline int32_t GetCode(const uint8_t* codes, uint64_t i, int bits, bool symmetric) {
  if (bits == 8) return symmetric ? static_cast<int8_t>(codes[i]) : codes[i];
  const uint32_t nib = (i & 1) == 0 ? codes[i / 2] >> 4 : codes[i / 2] & 0xFu;
  return symmetric ? SignExtend4(nib) : static_cast<int32_t>(nib);
}

inline void StoreParam(uint8_t* dst, uint64_t index, float v) {
  std::memcpy(dst + index * 4, &v, 4);
}
inline float LoadParam(const uint8_t* src, uint64_t index) {
  float v;
  std::memcpy(&v, src + index * 4, 4);
  return v;
}

// Zeroes the padding after the parameters and after the codes.
inline void ZeroPadding(const BlockFormat& f, uint64_t n, uint8_t* dst) {
  const uint64_t params = ParamsBytes(f, n), codes_at = CodesOffset(f, n);
  const uint64_t codes_end = codes_at + CodesBytes(f, n);
  std::memset(dst + params, 0, codes_at - params);
  std::memset(dst + codes_end, 0, EncodedBytes(f, n) - codes_end);
}

// Quantizes elements [s, e) of one block with known parameters, element by element (the
// reference, and the vector tiers' edges).
template <DataType T>
inline void QuantizeRun(const BlockFormat& f, const void* src, uint64_t s, uint64_t e, float d,
                        float m, uint8_t* codes) {
  const bool poisoned = Poisoned(d);
  for (uint64_t i = s; i < e; ++i) {
    int32_t q = 0;
    if (!poisoned) {
      const float x = LoadElement<T>(src, i);
      q = f.symmetric ? SymmetricCode(x, d, f.bits) : AsymmetricCode(x, d, m, f.bits);
    }
    PutCode(codes, i, q, f.bits);
  }
}

template <DataType T>
inline void DequantizeRun(const BlockFormat& f, const uint8_t* codes, uint64_t s, uint64_t e,
                          float d, float m, void* dst, bool reduce) {
  if (Poisoned(d)) {
    for (uint64_t i = s; i < e; ++i) StoreCanonicalNan<T>(dst, i);
    return;
  }
  for (uint64_t i = s; i < e; ++i) {
    const int32_t q = GetCode(codes, i, f.bits, f.symmetric);
    float v = f.symmetric ? SymmetricValue(q, d) : AsymmetricValue(q, d, m);
    if (reduce) v = LoadElement<T>(dst, i) + v;
    StoreElement<T>(dst, i, v);
  }
}

}  // namespace braid::quant::detail
