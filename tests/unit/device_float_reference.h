// Reference definitions of the narrow floating formats for the device kernel tests, written from
// the format definitions (ldexp of mantissa and exponent; rounding with nearbyint in fp64) and
// sharing no code with src/device/cpu, so that the kernels are checked against something
// independent.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace braid::test {

struct RefFormat {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;   // IEEE-style: all-ones exponent is inf (mantissa 0) or NaN
  bool saturate;  // out-of-range values (and inf) become the largest finite value
  // fp8 e4m3 ("FN"): only all-ones exponent *and* mantissa is NaN; the rest of that binade is
  // finite.
  bool nan_is_all_ones() const { return !has_inf; }
  int bits() const { return 1 + exp_bits + man_bits; }
  uint32_t count() const { return 1u << bits(); }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t exp_max() const { return (1u << exp_bits) - 1; }
  uint32_t man_max() const { return (1u << man_bits) - 1; }
};

inline constexpr RefFormat kRefHalf{"fp16", 5, 10, 15, true, false};
inline constexpr RefFormat kRefBf16{"bf16", 8, 7, 127, true, false};
inline constexpr RefFormat kRefE4M3{"e4m3", 4, 3, 7, false, true};
inline constexpr RefFormat kRefE5M2{"e5m2", 5, 2, 15, true, true};

inline bool RefIsNan(const RefFormat& f, uint32_t bits) {
  const uint32_t e = (bits >> f.man_bits) & f.exp_max();
  const uint32_t m = bits & f.man_max();
  if (f.nan_is_all_ones()) return e == f.exp_max() && m == f.man_max();
  return e == f.exp_max() && m != 0;
}

// Exact value of an encoding (NaN for NaNs).
inline double RefDecode(const RefFormat& f, uint32_t bits) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const int e = static_cast<int>((bits >> f.man_bits) & f.exp_max());
  const int m = static_cast<int>(bits & f.man_max());
  double v;
  if (RefIsNan(f, bits)) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (f.has_inf && e == static_cast<int>(f.exp_max())) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(m + (1 << f.man_bits), e - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

inline double RefMaxFinite(const RefFormat& f) {
  const int top_exp = static_cast<int>(f.has_inf ? f.exp_max() - 1 : f.exp_max());
  const int top_man = static_cast<int>(f.has_inf ? f.man_max() : f.man_max() - 1);
  return std::ldexp(top_man + (1 << f.man_bits), top_exp - f.bias - f.man_bits);
}

// Encoding of a non-NaN value, rounded to nearest even. Overflow: inf for IEEE formats, the largest
// finite value for saturating ones. The NaN encoding is the caller's business.
inline uint32_t RefEncode(const RefFormat& f, double x) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0u;
  double a = std::fabs(x);
  const double max_finite = RefMaxFinite(f);
  const uint32_t inf_bits = f.exp_max() << f.man_bits;
  if (std::isinf(a)) return sign | (f.saturate ? RefEncode(f, max_finite) : inf_bits);
  if (a == 0) return sign;
  int exp2;
  std::frexp(a, &exp2);  // a = fr * 2^exp2, fr in [0.5, 1)
  const int min_exp = 1 - f.bias;
  const int e = std::max(exp2 - 1, min_exp);
  const double quantum = std::ldexp(1.0, e - f.man_bits);
  // Default rounding mode is to nearest, ties to even.
  double r = std::nearbyint(a / quantum);
  const double rounded = r * quantum;
  if (rounded > max_finite) return sign | (f.saturate ? RefEncode(f, max_finite) : inf_bits);
  int biased = e + f.bias;
  if (r >= std::ldexp(1.0, f.man_bits + 1)) {  // rounded up into the next binade
    r /= 2;
    ++biased;
  }
  if (r < std::ldexp(1.0, f.man_bits)) biased = 0;  // subnormal (only possible at min_exp)
  const uint32_t man = static_cast<uint32_t>(r) & f.man_max();
  return sign | (static_cast<uint32_t>(biased) << f.man_bits) | man;
}

}  // namespace braid::test
