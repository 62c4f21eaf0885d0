// The four reductions on one pair of values, written so a loop of them vectorises.
//
// Integers: sum and product wrap modulo 2^bits (computed unsigned, so signed overflow is not
// undefined); max and min compare with the type's own signedness.
//
// Floating point: sum and product are one IEEE operation. Max and min are IEEE 754-2019
// maximum/minimum: a NaN operand makes the result NaN (like torch.max, unlike C's fmax which drops
// it: a NaN gradient must not vanish in an all-reduce), and -0 < +0. That makes them commutative
// and associative bit for bit (NaN payloads aside), so every algorithm's combining order gives
// the same result.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"

namespace braid::cpu {

template <class F>
using FloatBitsType = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

template <class F>
BRAID_KERNEL_INLINE F IeeeMaximum(F a, F b) {
  using Bits = FloatBitsType<F>;
  const Bits ab = std::bit_cast<Bits>(a);
  const Bits bb = std::bit_cast<Bits>(b);
  Bits r = std::bit_cast<Bits>(a + b);  // the unordered case: NaN, quietened, first NaN's payload
  r = SelectBits(a < b, bb, r);
  r = SelectBits(a > b, ab, r);
  r = SelectBits(a == b, ab & bb, r);  // equal operands differ only as +0/-0: the AND is +0
  return std::bit_cast<F>(r);
}

template <class F>
BRAID_KERNEL_INLINE F IeeeMinimum(F a, F b) {
  using Bits = FloatBitsType<F>;
  const Bits ab = std::bit_cast<Bits>(a);
  const Bits bb = std::bit_cast<Bits>(b);
  Bits r = std::bit_cast<Bits>(a + b);
  r = SelectBits(a > b, bb, r);
  r = SelectBits(a < b, ab, r);
  r = SelectBits(a == b, ab | bb, r);  // the OR is -0
  return std::bit_cast<F>(r);
}

template <ReduceOp kOp, class T>
BRAID_KERNEL_INLINE T Combine(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if constexpr (kOp == ReduceOp::kSum)
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == ReduceOp::kProd)
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if constexpr (kOp == ReduceOp::kMax) return a > b ? a : b;
    if constexpr (kOp == ReduceOp::kMin) return a < b ? a : b;
  } else {
    if constexpr (kOp == ReduceOp::kSum) return a + b;
    if constexpr (kOp == ReduceOp::kProd) return a * b;
    if constexpr (kOp == ReduceOp::kMax) return IeeeMaximum(a, b);
    if constexpr (kOp == ReduceOp::kMin) return IeeeMinimum(a, b);
  }
}

// Integer product for ScaleKernel: wraps like the reduction.
template <class T>
BRAID_KERNEL_INLINE T Multiply(T a, T b) {
  return Combine<ReduceOp::kProd>(a, b);
}

}  // namespace braid::cpu
