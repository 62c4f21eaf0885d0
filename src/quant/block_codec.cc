#include "quant/block_codec.h"

#include <string>

#include "core/base/cpu_features.h"
#include "quant/block_kernels.h"

namespace braid::quant {
namespace detail {
namespace {

template <DataType T>
void QuantizeScalarT(const BlockFormat& f, const void* src, uint64_t n, uint8_t* dst) {
  ZeroPadding(f, n, dst);
  uint8_t* codes = dst + CodesOffset(f, n);
  const uint64_t nb = NumBlocks(f, n);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    uint32_t amax = 0;
    float lo = LoadElement<T>(src, s), hi = lo;
    for (uint64_t i = s; i < e; ++i) {
      const float x = LoadElement<T>(src, i);
      const uint32_t a = Bits(x) & 0x7fffffffu;
      amax = a > amax ? a : amax;
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    float d = 0, m = 0;
    if (f.symmetric) {
      d = SymmetricScale(amax, f.bits);
      StoreParam(dst, b, d);
    } else {
      if (NonFiniteAbsBits(amax))
        d = m = FromBits(kNanBitsF32);
      else
        AsymmetricParams(lo, hi, f.bits, &d, &m);
      StoreParam(dst, 2 * b, d);
      StoreParam(dst, 2 * b + 1, m);
    }
    QuantizeRun<T>(f, src, s, e, d, m, codes);
  }
}

template <DataType T>
void DequantizeScalarT(const BlockFormat& f, const uint8_t* src, uint64_t n, void* dst,
                       bool reduce) {
  const uint8_t* codes = src + CodesOffset(f, n);
  const uint64_t nb = NumBlocks(f, n);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t s = b * f.block, e = s + f.block < n ? s + f.block : n;
    const float d = LoadParam(src, f.symmetric ? b : 2 * b);
    const float m = f.symmetric ? 0.0f : LoadParam(src, 2 * b + 1);
    DequantizeRun<T>(f, codes, s, e, d, m, dst, reduce);
  }
}

}  // namespace

void QuantizeScalar(const BlockFormat& f, DataType type, const void* src, uint64_t n,
                    uint8_t* dst) {
  switch (type) {
    case DataType::kFloat32:
      return QuantizeScalarT<DataType::kFloat32>(f, src, n, dst);
    case DataType::kFloat16:
      return QuantizeScalarT<DataType::kFloat16>(f, src, n, dst);
    default:
      return QuantizeScalarT<DataType::kBfloat16>(f, src, n, dst);
  }
}

void DequantizeScalar(const BlockFormat& f, DataType type, const uint8_t* src, uint64_t n,
                      void* dst, bool reduce) {
  switch (type) {
    case DataType::kFloat32:
      return DequantizeScalarT<DataType::kFloat32>(f, src, n, dst, reduce);
    case DataType::kFloat16:
      return DequantizeScalarT<DataType::kFloat16>(f, src, n, dst, reduce);
    default:
      return DequantizeScalarT<DataType::kBfloat16>(f, src, n, dst, reduce);
  }
}

}  // namespace detail

namespace {

// The vector tiers are compiled on x86-64 only (block_codec_avx2.cc, block_codec_avx512.cc).
#if defined(__x86_64__)
constexpr bool kVectorTiersBuilt = true;
#else
constexpr bool kVectorTiersBuilt = false;
#endif

Status Check(const BlockFormat& f, DataType type, const char* what) {
  if (!IsValidFormat(f))
    return InvalidArgument(std::string("block codec ") + what + ": invalid format (bits " +
                           std::to_string(f.bits) + ", block " + std::to_string(f.block) +
                           "); bits must be 8 or 4 and the block 1.." + std::to_string(kMaxBlock) +
                           " elements");
  if (!SupportsType(type))
    return InvalidArgument(std::string("block codec ") + what + ": cannot handle " +
                           DataTypeName(type) + " (float, half and bfloat16 only)");
  return Status::Ok();
}

Isa Effective(Isa isa) {
  return CpuSupports(isa) ? isa : Isa::kScalar;
}

}  // namespace

bool CpuSupports(Isa isa) {
  static const bool avx2 = kVectorTiersBuilt && HostCpuFeatures().avx2_f16c;
  // The codecs' AVX-512 tier needs AVX-512F only (with AVX2 and F16C).
  static const bool avx512 = avx2 && HostCpuFeatures().avx512f;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx512;
  }
  return false;
}

Isa BestIsa() {
  static const Isa best = CpuSupports(Isa::kAvx512) ? Isa::kAvx512
                          : CpuSupports(Isa::kAvx2) ? Isa::kAvx2
                                                    : Isa::kScalar;
  return best;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2+f16c";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Status QuantizeWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src, uint64_t n,
                       void* dst) {
  BRAID_RETURN_IF_ERROR(Check(f, type, "quantize"));
  if (n == 0) return Status::Ok();
  auto* out = static_cast<uint8_t*>(dst);
#if defined(__x86_64__)
  if (Effective(isa) == Isa::kAvx512) {
    detail::QuantizeAvx512(f, type, src, n, out);
    return Status::Ok();
  }
  if (Effective(isa) == Isa::kAvx2) {
    detail::QuantizeAvx2(f, type, src, n, out);
    return Status::Ok();
  }
#endif
  detail::QuantizeScalar(f, type, src, n, out);
  return Status::Ok();
}

namespace {
Status DequantizeImpl(Isa isa, const BlockFormat& f, DataType type, const void* src, uint64_t n,
                      void* dst, bool reduce) {
  BRAID_RETURN_IF_ERROR(Check(f, type, reduce ? "dequantize-reduce" : "dequantize"));
  if (n == 0) return Status::Ok();
  const auto* in = static_cast<const uint8_t*>(src);
#if defined(__x86_64__)
  if (Effective(isa) == Isa::kAvx512) {
    detail::DequantizeAvx512(f, type, in, n, dst, reduce);
    return Status::Ok();
  }
  if (Effective(isa) == Isa::kAvx2) {
    detail::DequantizeAvx2(f, type, in, n, dst, reduce);
    return Status::Ok();
  }
#endif
  detail::DequantizeScalar(f, type, in, n, dst, reduce);
  return Status::Ok();
}
}  // namespace

Status DequantizeWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src, uint64_t n,
                         void* dst) {
  return DequantizeImpl(isa, f, type, src, n, dst, false);
}

Status DequantizeReduceWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src,
                               uint64_t n, void* dst) {
  return DequantizeImpl(isa, f, type, src, n, dst, true);
}

Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst) {
  return QuantizeWithIsa(BestIsa(), f, type, src, n, dst);
}
Status Dequantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst) {
  return DequantizeWithIsa(BestIsa(), f, type, src, n, dst);
}
Status DequantizeReduce(const BlockFormat& f, DataType type, const void* src, uint64_t n,
                        void* dst) {
  return DequantizeReduceWithIsa(BestIsa(), f, type, src, n, dst);
}

}  // namespace braid::quant
