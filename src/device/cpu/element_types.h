// How each DataType is stored and computed on by the CPU kernels: integer and fp32/fp64 types are
// combined directly (Value); the narrow floats (fp16, bf16, fp8) are widened to fp32 through
// their Format (narrow_float.h), combined, and rounded back once.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"
#include "device/cpu/narrow_float.h"

namespace braid::cpu {

template <DataType kType>
struct ElementTraits;

template <class T>
struct DirectElement {
  static constexpr bool kNarrowFloat = false;
  using Value = T;
};
template <class F>
struct NarrowFloatElement {
  static constexpr bool kNarrowFloat = true;
  using Format = F;
  using Storage = typename F::Storage;
};

template <>
struct ElementTraits<DataType::kInt8> : DirectElement<int8_t> {};
template <>
struct ElementTraits<DataType::kUint8> : DirectElement<uint8_t> {};
template <>
struct ElementTraits<DataType::kInt32> : DirectElement<int32_t> {};
template <>
struct ElementTraits<DataType::kUint32> : DirectElement<uint32_t> {};
template <>
struct ElementTraits<DataType::kInt64> : DirectElement<int64_t> {};
template <>
struct ElementTraits<DataType::kUint64> : DirectElement<uint64_t> {};
template <>
struct ElementTraits<DataType::kFloat32> : DirectElement<float> {};
template <>
struct ElementTraits<DataType::kFloat64> : DirectElement<double> {};
template <>
struct ElementTraits<DataType::kFloat16> : NarrowFloatElement<HalfFormat> {};
template <>
struct ElementTraits<DataType::kBfloat16> : NarrowFloatElement<Bf16Format> {};
template <>
struct ElementTraits<DataType::kFloat8e4m3> : NarrowFloatElement<Fp8E4M3Format> {};
template <>
struct ElementTraits<DataType::kFloat8e5m2> : NarrowFloatElement<Fp8E5M2Format> {};

// The format a tier converts with: the AVX2 and AVX-512 tiers convert fp16 (and widen e5m2) with
// F16C.
template <class Format, KernelIsa kIsa>
struct TierFormat {
  using Type = Format;
};
#if BRAID_KERNELS_X86
// Every tier above the portable one has F16C.
template <KernelIsa kIsa>
requires(kIsa != KernelIsa::kPortable) struct TierFormat<HalfFormat, kIsa> {
  using Type = HalfF16cFormat;
};
template <KernelIsa kIsa>
requires(kIsa != KernelIsa::kPortable) struct TierFormat<Fp8E5M2Format, kIsa> {
  using Type = Fp8E5M2F16cFormat;
};
#endif

template <DataType kType, KernelIsa kIsa>
using FormatFor = typename TierFormat<typename ElementTraits<kType>::Format, kIsa>::Type;

// ElementTraits<t>::kNarrowFloat for a type known only at run time (indexed by DataType).
template <size_t... kType>
constexpr std::array<bool, sizeof...(kType)> NarrowFloatTable(std::index_sequence<kType...>) {
  return {ElementTraits<static_cast<DataType>(kType)>::kNarrowFloat...};
}
inline constexpr std::array<bool, kNumDataTypes> kIsNarrowFloat =
    NarrowFloatTable(std::make_index_sequence<kNumDataTypes>());

// Elements per stack block for the narrow floats: 2 KiB of fp32 per operand fits L1 with room.
inline constexpr size_t kNarrowBlock = 256;
// Inner trip count of the direct loops. A compile-time trip count that is a multiple of every
// vector width is what GCC's -O2 ("very cheap") vectoriser requires; -O3 would not need it.
inline constexpr size_t kDirectChunk = 64;

}  // namespace braid::cpu
