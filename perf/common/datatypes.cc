#include "common/datatypes.h"

#include <cmath>
#include <cstring>

namespace braid_perf {

namespace {

// A binary floating-point format narrower than double.
struct FloatFormat {
  int ebits;
  int mbits;
  bool has_inf;  // IEEE-like; false: f8e4m3 (finite only, saturating)
};

FloatFormat FormatOf(braidDataType_t t) {
  switch (t) {
    case braidFloat16:
      return {5, 10, true};
    case braidBfloat16:
      return {8, 7, true};
    case braidFloat8e4m3:
      return {4, 3, false};
    case braidFloat8e5m2:
      return {5, 2, true};
    default:
      return {8, 23, true};
  }
}

uint64_t EncodeNarrow(const FloatFormat& f, double x) {
  const uint64_t sign = std::signbit(x) ? 1ull << (f.ebits + f.mbits) : 0;
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint64_t max_finite =
      f.has_inf ? ((((1ull << f.ebits) - 2) << f.mbits) | ((1ull << f.mbits) - 1))
                : ((((1ull << f.ebits) - 1) << f.mbits) | ((1ull << f.mbits) - 2));
  const uint64_t inf = ((1ull << f.ebits) - 1) << f.mbits;
  double a = std::fabs(x);
  if (std::isnan(x)) return sign | inf | 1;
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a = 1.m * 2^e
  const int emin = 1 - bias;
  uint64_t bits;
  if (e < emin) {
    // Subnormal: a multiple of 2^(emin - mbits); a carry into the exponent field is correct.
    bits = static_cast<uint64_t>(std::nearbyint(std::ldexp(a, f.mbits - emin)));
  } else {
    double q = std::nearbyint(std::ldexp(a, f.mbits - e));  // in [2^m, 2^(m+1)]
    if (q >= std::ldexp(1.0, f.mbits + 1)) {
      q /= 2;
      ++e;
    }
    uint64_t expfield = static_cast<uint64_t>(e + bias);
    if (expfield >= (1ull << f.ebits)) return sign | (f.has_inf ? inf : max_finite);
    bits = (expfield << f.mbits) | (static_cast<uint64_t>(q) - (1ull << f.mbits));
  }
  if (bits > max_finite) bits = f.has_inf ? inf : max_finite;
  return sign | bits;
}

uint64_t Mask(size_t size) {
  return size >= 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

}  // namespace

const std::vector<TypeInfo>& AllTypes() {
  static const std::vector<TypeInfo> types = {
      {braidInt8, "int8", 1, false, true, 127, 6},
      {braidUint8, "uint8", 1, false, false, 255, 7},
      {braidInt32, "int32", 4, false, true, INT32_MAX, 30},
      {braidUint32, "uint32", 4, false, false, UINT32_MAX, 30},
      {braidInt64, "int64", 8, false, true, int64_t{1} << 62, 30},
      {braidUint64, "uint64", 8, false, false, int64_t{1} << 62, 30},
      {braidFloat16, "half", 2, true, true, 2048, 15},
      {braidFloat32, "float", 4, true, true, 1 << 24, 30},
      {braidFloat64, "double", 8, true, true, int64_t{1} << 53, 30},
      {braidBfloat16, "bfloat16", 2, true, true, 256, 30},
      {braidFloat8e4m3, "f8e4m3", 1, true, true, 16, 8},
      {braidFloat8e5m2, "f8e5m2", 1, true, true, 8, 15},
  };
  return types;
}

const TypeInfo* FindType(const std::string& name) {
  for (const TypeInfo& t : AllTypes())
    if (name == t.name) return &t;
  return nullptr;
}

uint64_t EncodeInt(const TypeInfo& t, int64_t v) {
  if (!t.is_float) return static_cast<uint64_t>(v) & Mask(t.size);
  return EncodeReal(t, static_cast<double>(v));
}

uint64_t EncodeReal(const TypeInfo& t, double v) {
  if (t.type == braidFloat64) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  }
  if (t.type == braidFloat32) {
    float f = static_cast<float>(v);  // round to nearest even
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  if (!t.is_float) return EncodeInt(t, static_cast<int64_t>(v));
  return EncodeNarrow(FormatOf(t.type), v);
}

double DecodeReal(const TypeInfo& t, uint64_t bits) {
  if (t.type == braidFloat32 || t.type == braidBfloat16) {
    uint32_t b = static_cast<uint32_t>(t.type == braidBfloat16 ? bits << 16 : bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (t.type == braidFloat16) {
    const int e = static_cast<int>((bits >> 10) & 0x1f);
    const double m = static_cast<double>(bits & 0x3ff);
    double v = e == 0    ? std::ldexp(m, -24)
               : e == 31 ? (m == 0 ? HUGE_VAL : NAN)
                         : std::ldexp(1024 + m, e - 25);
    return (bits & 0x8000) ? -v : v;
  }
  return 0;
}

uint64_t UlpDistance(const TypeInfo& t, uint64_t a, uint64_t b) {
  const uint64_t sign = 1ull << (8 * t.size - 1);
  auto ordered = [&](uint64_t x) -> int64_t {
    int64_t mag = static_cast<int64_t>(x & (sign - 1) & Mask(t.size));
    return (x & sign) ? -mag : mag;
  };
  int64_t d = ordered(a) - ordered(b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

uint64_t MakeFinite(const TypeInfo& t, uint64_t bits) {
  if (!t.is_float) return bits;
  int mbits = t.type == braidFloat64 ? 52 : FormatOf(t.type).mbits;
  int ebits = t.type == braidFloat64 ? 11 : FormatOf(t.type).ebits;
  uint64_t exp_mask = ((1ull << ebits) - 1) << mbits;
  if (t.type == braidFloat8e4m3) {
    if ((bits & 0x7f) == 0x7f) bits &= ~1ull;  // 0x7f/0xff are its only NaNs
    return bits;
  }
  if ((bits & exp_mask) == exp_mask) bits &= ~(1ull << (mbits + ebits - 1));  // top exponent bit
  return bits;
}

}  // namespace braid_perf
