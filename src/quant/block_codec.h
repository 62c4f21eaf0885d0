// CPU block codecs: encode fp32 / fp16 / bf16 into the layout of block_format.h, decode it back,
// or decode and add it into an accumulator in fp32 (dst = dst + decode(src), rounded once to the
// destination type).
//
// Each kernel exists as a scalar reference and as AVX2 + F16C and AVX-512 tiers, the best one
// picked at run time from what the CPU supports; every tier produces the same bytes as the
// reference (tests/unit/quant_cpu_test.cc). The *WithIsa variants run a given tier, for tests and
// benchmarks. Buffers need no particular alignment; src and dst must not overlap.
#pragma once

#include <cstdint>

#include "core/base/datatype.h"
#include "core/base/status.h"
#include "quant/block_format.h"

namespace braid::quant {

// Element types the codecs read and write.
inline constexpr bool SupportsType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBfloat16;
}

// kAvx2: AVX2 + F16C; kAvx512: AVX-512F (+ AVX2, F16C).
enum class Isa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumIsas = 3;
bool CpuSupports(Isa isa);
Isa BestIsa();
const char* IsaName(Isa isa);

// dst (EncodedBytes(f, n) bytes) = encode(src[0..n)). InvalidArgument for an invalid format or an
// unsupported type.
Status Quantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst);
// dst[0..n) = decode(src), src being EncodedBytes(f, n) bytes.
Status Dequantize(const BlockFormat& f, DataType type, const void* src, uint64_t n, void* dst);
// dst[0..n) = dst + decode(src), summed in fp32 and rounded once to `type`.
Status DequantizeReduce(const BlockFormat& f, DataType type, const void* src, uint64_t n,
                        void* dst);

// The same on an explicit tier; a tier the CPU lacks falls back to kScalar.
Status QuantizeWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src, uint64_t n,
                       void* dst);
Status DequantizeWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src, uint64_t n,
                         void* dst);
Status DequantizeReduceWithIsa(Isa isa, const BlockFormat& f, DataType type, const void* src,
                               uint64_t n, void* dst);

}  // namespace braid::quant
