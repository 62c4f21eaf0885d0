// The element operations of the reduce, scale and divide kernels, defined once for the CPU
// kernels (device/cpu, which loop over them and vectorise) and the GPU kernels (device/cuda, one
// element per thread): the narrow-float conversions, the four reductions, the integer division
// and, for the GPU, the per-element pipeline (widen, operate in fp32, round back once).
//
// Bit-identity between the two rests on: IEEE addition, multiplication and division rounded to
// nearest even, each on its own (the CPU kernels build with -ffp-contract=off, the GPU ones with
// nvcc --fmad=false -prec-div=true), subnormals kept (-ftz=false), and the same NaN bits. The last
// is not the hardware's: x86 returns the first NaN operand quietened, or the "default NaN"
// 0xffc00000 (sign set) when an operation makes one (inf - inf, 0 * inf); CUDA returns its
// canonical 0x7fffffff. The GPU kernels instantiate the operations with X86Nan below, which sets a
// NaN result's bits the x86 way from the operands, so a NaN's payload survives an all-reduce on
// either. Where both operands are NaN with different bits, the CPU kernels themselves are not
// consistent (which one the vectoriser puts first differs by tier, loop and op); X86Nan takes a's.
//
// Every conversion is branch free bit manipulation (every case computed, one selected), so that a
// CPU loop of them vectorises; see narrow_float.h for the formats' rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if __cplusplus >= 202002L
#include <bit>
#endif

#include "core/base/datatype.h"
#include "device/gpu_portability.h"

namespace braid::element {

// ---------------------------------------------------------------- bits

template <class To, class From>
BRAID_ELEMENT_INLINE To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast between types of different sizes");
#if BRAID_DEVICE_PASS || __cplusplus < 202002L
  // nvcc and hipcc compile .cu files as C++17; a 4- or 8-byte memcpy is a register move.
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
#else
  return std::bit_cast<To>(from);
#endif
}

BRAID_ELEMENT_INLINE uint32_t FloatBits(float f) {
  return BitCast<uint32_t>(f);
}
BRAID_ELEMENT_INLINE float BitsToFloat(uint32_t u) {
  return BitCast<float>(u);
}

template <class F>
using FloatBitsType = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

// Kernels choose between values with this instead of ?: or if. GCC turns ?: into branches and
// then, under the default -ftrapping-math, refuses to vectorise a loop whose floating-point
// operation (a possible trap) sits in one of them; a mask select keeps every operation
// unconditional, so such loops vectorise at -O2 and -O3 alike.
template <class Bits>
BRAID_ELEMENT_INLINE Bits SelectBits(bool condition, Bits if_true, Bits if_false) {
  const Bits mask = Bits{0} - static_cast<Bits>(condition);
  return static_cast<Bits>((if_true & mask) | (if_false & ~mask));
}

// ---------------------------------------------------------------- fp16 (1-5-10, bias 15)

BRAID_ELEMENT_INLINE float HalfToFloatInline(uint16_t h) {
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

BRAID_ELEMENT_INLINE uint16_t FloatToHalfInline(float f) {
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

BRAID_ELEMENT_INLINE float Bf16ToFloatInline(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

BRAID_ELEMENT_INLINE uint16_t FloatToBf16Inline(float f) {
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

BRAID_ELEMENT_INLINE float Fp8E4M3ToFloatInline(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t em = v & 0x7fu;
  const uint32_t normal = (em << 20) + ((127u - 7u) << 23);
  const uint32_t subnormal = FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-9f);
  uint32_t r = SelectBits(em < 0x08u, subnormal, normal);
  r = SelectBits(em == 0x7fu, 0x7fc00000u, r);
  return BitsToFloat(r | sign);
}

BRAID_ELEMENT_INLINE uint8_t FloatToFp8E4M3Inline(float f) {
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

BRAID_ELEMENT_INLINE float Fp8E5M2ToFloatInline(uint8_t v) {
  return HalfToFloatInline(static_cast<uint16_t>(static_cast<uint16_t>(v) << 8));
}

BRAID_ELEMENT_INLINE uint8_t FloatToFp8E5M2Inline(float f) {
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

// ---------------------------------------------------------------- NaN results

// The CPU kernels: whatever the FPU gives (on x86, X86Nan's rule).
struct NativeNan {
  template <class F>
  BRAID_ELEMENT_INLINE static F Fix(F /*a*/, F /*b*/, F result) {
    return result;
  }
};

// x86's rule, given the result `result` of a op b computed by any IEEE hardware: a non-NaN
// result as it is; else a if it is a NaN, else b if it is, quietened (payload and sign kept);
// else (the operation made the NaN) the default NaN, sign set.
struct X86Nan {
  template <class F>
  BRAID_ELEMENT_INLINE static F Fix(F a, F b, F result) {
    using Bits = FloatBitsType<F>;
    constexpr int kMantissa = sizeof(F) == 4 ? 23 : 52;
    constexpr Bits kQuiet = Bits{1} << (kMantissa - 1);
    constexpr Bits kDefault = static_cast<Bits>(Bits{0} - (Bits{1} << (kMantissa - 1)));
    if (!(result != result)) return result;
    if (a != a) return BitCast<F>(static_cast<Bits>(BitCast<Bits>(a) | kQuiet));
    if (b != b) return BitCast<F>(static_cast<Bits>(BitCast<Bits>(b) | kQuiet));
    return BitCast<F>(kDefault);
  }
};

// ---------------------------------------------------------------- the four reductions
//
// Integers: sum and product wrap modulo 2^bits (computed unsigned, so signed overflow is not
// undefined); max and min compare with the type's own signedness.
//
// Floating point: sum and product are one IEEE operation. Max and min are IEEE 754-2019
// maximum/minimum: a NaN operand makes the result NaN (like torch.max, unlike C's fmax which drops
// it: a NaN gradient must not vanish in an all-reduce), and -0 < +0. That makes them commutative
// and associative bit for bit (NaN payloads aside), so every algorithm's combining order gives
// the same result.

template <class F, class Nan = NativeNan>
BRAID_ELEMENT_INLINE F IeeeMaximum(F a, F b) {
  using Bits = FloatBitsType<F>;
  const Bits ab = BitCast<Bits>(a);
  const Bits bb = BitCast<Bits>(b);
  // The unordered case: a NaN, quietened (Nan's rule picks which).
  Bits r = BitCast<Bits>(Nan::Fix(a, b, a + b));
  r = SelectBits(a < b, bb, r);
  r = SelectBits(a > b, ab, r);
  r = SelectBits(a == b, ab & bb, r);  // equal operands differ only as +0/-0: the AND is +0
  return BitCast<F>(r);
}

template <class F, class Nan = NativeNan>
BRAID_ELEMENT_INLINE F IeeeMinimum(F a, F b) {
  using Bits = FloatBitsType<F>;
  const Bits ab = BitCast<Bits>(a);
  const Bits bb = BitCast<Bits>(b);
  Bits r = BitCast<Bits>(Nan::Fix(a, b, a + b));
  r = SelectBits(a > b, bb, r);
  r = SelectBits(a < b, ab, r);
  r = SelectBits(a == b, ab | bb, r);  // the OR is -0
  return BitCast<F>(r);
}

template <ReduceOp kOp, class T, class Nan = NativeNan>
BRAID_ELEMENT_INLINE T Combine(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (kOp == ReduceOp::kSum)
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == ReduceOp::kProd)
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if constexpr (kOp == ReduceOp::kMax) return a > b ? a : b;
    if constexpr (kOp == ReduceOp::kMin) return a < b ? a : b;
  } else {
    if constexpr (kOp == ReduceOp::kSum) return Nan::Fix(a, b, a + b);
    if constexpr (kOp == ReduceOp::kProd) return Nan::Fix(a, b, a * b);
    if constexpr (kOp == ReduceOp::kMax) return IeeeMaximum<T, Nan>(a, b);
    if constexpr (kOp == ReduceOp::kMin) return IeeeMinimum<T, Nan>(a, b);
  }
}

// Integer product for ScaleKernel: wraps like the reduction.
template <class T>
BRAID_ELEMENT_INLINE T Multiply(T a, T b) {
  return Combine<ReduceOp::kProd>(a, b);
}

// Signed division truncating toward zero for any unsigned divisor (even one above INT64_MAX),
// through the magnitude so that no signed operation can overflow.
BRAID_ELEMENT_INLINE int64_t DivideTowardZero(int64_t x, uint64_t d) {
  const bool negative = x < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const uint64_t q = magnitude / d;
  return static_cast<int64_t>(negative ? 0 - q : q);
}

// ---------------------------------------------------------------- one element at a time
// What a GPU thread does per element (and what tests evaluate on the host to check the GPU
// kernels' arithmetic without a GPU): the same conversions and operations as the CPU kernels'
// loops, in the same order: widen to the compute type, one operation, round back once.

template <class T>
struct DirectOf {
  using Storage = T;
  using Compute = T;
  BRAID_ELEMENT_INLINE static T ToCompute(T x) { return x; }
  BRAID_ELEMENT_INLINE static T FromCompute(T x) { return x; }
};
struct HalfOf {
  using Storage = uint16_t;
  using Compute = float;
  BRAID_ELEMENT_INLINE static float ToCompute(uint16_t x) { return HalfToFloatInline(x); }
  BRAID_ELEMENT_INLINE static uint16_t FromCompute(float x) { return FloatToHalfInline(x); }
};
struct Bf16Of {
  using Storage = uint16_t;
  using Compute = float;
  BRAID_ELEMENT_INLINE static float ToCompute(uint16_t x) { return Bf16ToFloatInline(x); }
  BRAID_ELEMENT_INLINE static uint16_t FromCompute(float x) { return FloatToBf16Inline(x); }
};
struct E4M3Of {
  using Storage = uint8_t;
  using Compute = float;
  BRAID_ELEMENT_INLINE static float ToCompute(uint8_t x) { return Fp8E4M3ToFloatInline(x); }
  BRAID_ELEMENT_INLINE static uint8_t FromCompute(float x) { return FloatToFp8E4M3Inline(x); }
};
struct E5M2Of {
  using Storage = uint8_t;
  using Compute = float;
  BRAID_ELEMENT_INLINE static float ToCompute(uint8_t x) { return Fp8E5M2ToFloatInline(x); }
  BRAID_ELEMENT_INLINE static uint8_t FromCompute(float x) { return FloatToFp8E5M2Inline(x); }
};

template <DataType kType>
struct ElementOf;
template <>
struct ElementOf<DataType::kInt8> : DirectOf<int8_t> {};
template <>
struct ElementOf<DataType::kUint8> : DirectOf<uint8_t> {};
template <>
struct ElementOf<DataType::kInt32> : DirectOf<int32_t> {};
template <>
struct ElementOf<DataType::kUint32> : DirectOf<uint32_t> {};
template <>
struct ElementOf<DataType::kInt64> : DirectOf<int64_t> {};
template <>
struct ElementOf<DataType::kUint64> : DirectOf<uint64_t> {};
template <>
struct ElementOf<DataType::kFloat32> : DirectOf<float> {};
template <>
struct ElementOf<DataType::kFloat64> : DirectOf<double> {};
template <>
struct ElementOf<DataType::kFloat16> : HalfOf {};
template <>
struct ElementOf<DataType::kBfloat16> : Bf16Of {};
template <>
struct ElementOf<DataType::kFloat8e4m3> : E4M3Of {};
template <>
struct ElementOf<DataType::kFloat8e5m2> : E5M2Of {};

template <DataType kType>
using StorageOf = typename ElementOf<kType>::Storage;
template <DataType kType>
using ComputeOf = typename ElementOf<kType>::Compute;

// a (op) b.
template <DataType kType, ReduceOp kOp, class Nan>
BRAID_ELEMENT_INLINE StorageOf<kType> ReduceElement(StorageOf<kType> a, StorageOf<kType> b) {
  using E = ElementOf<kType>;
  return E::FromCompute(Combine<kOp, ComputeOf<kType>, Nan>(E::ToCompute(a), E::ToCompute(b)));
}

// x * s, s already in the compute type (ElementOf<kType>::ToCompute of the scalar). Integers wrap.
template <DataType kType, class Nan>
BRAID_ELEMENT_INLINE StorageOf<kType> ScaleElement(StorageOf<kType> x, ComputeOf<kType> s) {
  using E = ElementOf<kType>;
  using C = ComputeOf<kType>;
  if constexpr (std::is_integral_v<C>) {
    return Multiply(x, s);
  } else {
    const C v = E::ToCompute(x);
    return E::FromCompute(Nan::Fix(v, s, v * s));
  }
}

// A divisor in the forms the types divide by: integers by the integer, fp32 and fp64 in fp64, the
// narrow floats in fp32 (each converted once, rounded to nearest, by the caller's host code).
struct Divisor {
  uint64_t integer;
  double wide;
  float narrow;
};
inline Divisor MakeDivisor(uint64_t d) {
  return {d, static_cast<double>(d), static_cast<float>(d)};
}

// x / d: integers truncate toward zero (exactly: the CPU's fp64 shortcut for the 8- and 32-bit
// types is exact too); fp32 divides in fp64 and rounds once; the narrow floats divide in fp32.
template <DataType kType, class Nan>
BRAID_ELEMENT_INLINE StorageOf<kType> DivideElement(StorageOf<kType> x, const Divisor& d) {
  using E = ElementOf<kType>;
  using C = ComputeOf<kType>;
  if constexpr (std::is_integral_v<C>) {
    if constexpr (std::is_signed_v<C>)
      return static_cast<C>(DivideTowardZero(x, d.integer));
    else
      return static_cast<C>(x / d.integer);
  } else if constexpr (std::is_same_v<C, double>) {
    return Nan::Fix(x, x, x / d.wide);
  } else if constexpr (kType == DataType::kFloat32) {
    // A NaN stays that NaN, quietened, through fp64 and back on x86.
    return Nan::Fix(x, x, static_cast<float>(static_cast<double>(x) / d.wide));
  } else {
    const float v = E::ToCompute(x);
    return E::FromCompute(Nan::Fix(v, v, v / d.narrow));
  }
}

}  // namespace braid::element
