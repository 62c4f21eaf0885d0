// The cases on which the GPU kernels (src/device/cuda) are compared with the CPU kernels, byte
// for byte: every type x op (reduce), every type (scale, divide), copies; sizes that leave tails
// after 16-byte packs and grid strides, misaligned starts (the element-wise path), dst equal to a;
// inputs with NaNs (quiet and signalling payloads), infinities, zeros of both signs, subnormals,
// values that round to ties, overflow and fp8 saturation, and raw bit patterns (every encoding of
// the narrow types). Plain C++ (no CUDA): device_element_math_test.cc runs them through
// element_math.h's per-element forms on the host; device_cuda_compare.h runs them on a GPU.
//
// Where both operands of an element are NaN, the second is made a copy of the first: the CPU
// kernels' result then has one possible payload (with two different NaNs, which one survives
// depends on the CPU tier, the loop and the op; see device/element_math.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"
#include "device/cpu/reduce_kernels.h"

namespace braid::test {

inline constexpr DataType kKernelTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,      DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,   DataType::kFloat16,    DataType::kFloat32,
    DataType::kFloat64, DataType::kBfloat16, DataType::kFloat8e4m3, DataType::kFloat8e5m2,
};
inline constexpr ReduceOp kKernelOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax,
                                          ReduceOp::kMin};
// 16-byte packs hold 1..16 elements; 100003 spans several grid strides on small grids only, but
// every pack/tail boundary is hit by the small sizes.
inline constexpr size_t kKernelSizes[] = {1, 2, 3, 7, 15, 16, 17, 33, 255, 256, 257, 4097, 100003};

enum class KernelKind { kReduce, kScale, kDivide, kCopy };

struct KernelCase {
  KernelKind kind = KernelKind::kReduce;
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  size_t n = 0;           // elements (bytes for kCopy)
  size_t offset = 0;      // elements from a 256-byte aligned start (misaligns when != 0)
  bool in_place = false;  // reduce: dst == a; scale: dst == src; divide always is
  uint64_t divisor = 0;   // kDivide
  bool scalar_on_device = false;
  std::vector<uint8_t> scalar;  // kScale: one element
  std::vector<uint8_t> a, b;    // operands (b: reduce only)
  std::string name;
};

inline size_t ElementSize(DataType t) {
  return DataTypeSize(t);
}

inline bool IsFloatType(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kBfloat16 || t == DataType::kFloat8e4m3 || t == DataType::kFloat8e5m2;
}

// The value of a floating element as a double (NaN for every NaN encoding).
inline double ElementAsDouble(DataType t, const uint8_t* p) {
  uint16_t h;
  switch (t) {
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    case DataType::kBfloat16:
      std::memcpy(&h, p, 2);
      return Bf16ToFloat(h);
    case DataType::kFloat8e4m3:
      return Fp8E4M3ToFloat(*p);
    case DataType::kFloat8e5m2:
      return Fp8E5M2ToFloat(*p);
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default:
      return 0;
  }
}

inline bool IsNanElement(DataType t, const uint8_t* p) {
  return IsFloatType(t) && std::isnan(ElementAsDouble(t, p));
}

// Stores v (given as fp64) as one element of a floating type, through the CPU conversions.
inline void StoreFloat(DataType t, double v, uint8_t* p) {
  const float f = static_cast<float>(v);
  uint16_t h;
  switch (t) {
    case DataType::kFloat16:
      h = FloatToHalf(f);
      std::memcpy(p, &h, 2);
      break;
    case DataType::kBfloat16:
      h = FloatToBf16(f);
      std::memcpy(p, &h, 2);
      break;
    case DataType::kFloat8e4m3:
      *p = FloatToFp8E4M3(f);
      break;
    case DataType::kFloat8e5m2:
      *p = FloatToFp8E5M2(f);
      break;
    case DataType::kFloat32:
      std::memcpy(p, &f, 4);
      break;
    case DataType::kFloat64:
      std::memcpy(p, &v, 8);
      break;
    default:
      break;
  }
}

// n elements of type t: raw random bits for the integers (with 0, +-1, min and max mixed in);
// for the floats a mix of normal values over a wide range of scales, ties, zeros, subnormals of the
// type and of fp32, infinities, NaNs with payloads (signalling ones too), values near the largest
// finite, and raw bit patterns.
inline std::vector<uint8_t> KernelInput(DataType t, size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(t));
  const size_t es = ElementSize(t);
  std::vector<uint8_t> out(n * es);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = &out[i * es];
    const uint64_t raw = rng();
    const unsigned pick = static_cast<unsigned>(rng() % 100);
    if (!IsFloatType(t)) {
      uint64_t v = raw;
      if (pick < 5)
        v = 0;
      else if (pick < 10)
        v = 1;
      else if (pick < 15)
        v = ~uint64_t{0};  // -1 / max
      else if (pick < 20)
        v = uint64_t{1} << (es * 8 - 1);  // signed min
      else if (pick < 25)
        v = (uint64_t{1} << (es * 8 - 1)) - 1;  // signed max
      else if (pick < 50)
        v = raw % 16;  // small: products that do not wrap at once
      std::memcpy(p, &v, es);
      continue;
    }
    if (pick < 12) {  // raw bits: every encoding, NaN payloads and signalling NaNs included
      std::memcpy(p, &raw, es);
      continue;
    }
    double v;
    const double sign = (raw & 1) ? -1.0 : 1.0;
    if (pick < 50) {
      const int e = static_cast<int>(rng() % 40) - 20;
      v = sign * std::ldexp(1.0 + static_cast<double>(rng() % (1u << 20)) / (1u << 20), e);
    } else if (pick < 58) {
      v = sign * (static_cast<double>(rng() % 64) + 0.5);  // ties at small scales
    } else if (pick < 63) {
      v = (raw & 2) ? 0.0 : -0.0;
    } else if (pick < 70) {  // subnormals of fp32, of the narrow types, of fp64
      const int which = static_cast<int>(rng() % 4);
      const double unit = which == 0   ? 0x1p-149
                          : which == 1 ? 0x1p-24
                          : which == 2 ? 0x1p-9
                                       : 0x1p-1074;
      v = sign * unit * static_cast<double>(rng() % 9);
    } else if (pick < 74) {
      v = sign * std::numeric_limits<double>::infinity();
    } else if (pick < 78) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (pick < 86) {  // near the largest finite values and the fp8 saturation points
      static constexpr double kEdges[] = {
          448, 464, 480, 57344, 61440, 65504, 65520, 3.3895e38, 3.4028234663852886e38};
      v = sign * kEdges[rng() % (sizeof(kEdges) / sizeof(kEdges[0]))];
    } else {
      v = sign * static_cast<double>(rng() % 1000) / 8.0;
    }
    StoreFloat(t, v, p);
    if (pick >= 74 && pick < 78 && t != DataType::kFloat64) {
      // A NaN with a payload in the bits the type keeps (fp64 gets one through raw bits).
      if (t == DataType::kFloat32) {
        const uint32_t bits =
            0x7f800000u | static_cast<uint32_t>(raw >> 41) | 1u | (raw & 4 ? 0x80000000u : 0u);
        std::memcpy(p, &bits, 4);
      } else if (t == DataType::kFloat16) {
        const uint16_t bits =
            static_cast<uint16_t>(0x7c01u | ((raw >> 54) & 0x3ffu) | (raw & 4 ? 0x8000u : 0u));
        std::memcpy(p, &bits, 2);
      } else if (t == DataType::kBfloat16) {
        const uint16_t bits =
            static_cast<uint16_t>(0x7f81u | ((raw >> 57) & 0x7fu) | (raw & 4 ? 0x8000u : 0u));
        std::memcpy(p, &bits, 2);
      }
    }
  }
  return out;
}

// Where both a[i] and b[i] are NaN, b[i] = a[i] (see the top of this file).
inline void MatchNans(DataType t, const std::vector<uint8_t>& a, std::vector<uint8_t>* b) {
  const size_t es = ElementSize(t);
  for (size_t i = 0; i * es < a.size(); ++i)
    if (IsNanElement(t, &a[i * es]) && IsNanElement(t, &(*b)[i * es]))
      std::memcpy(&(*b)[i * es], &a[i * es], es);
}

// The scalars Scale is checked with (one element each): ordinary values, zero, a subnormal,
// infinity, NaN (then the NaN inputs are made equal to it), for integers wrapping ones.
inline std::vector<std::vector<uint8_t>> KernelScalars(DataType t) {
  const size_t es = ElementSize(t);
  std::vector<std::vector<uint8_t>> out;
  if (!IsFloatType(t)) {
    for (uint64_t v : {uint64_t{3}, ~uint64_t{0}, uint64_t{0}, uint64_t{0x81}, uint64_t{1} << 62}) {
      std::vector<uint8_t> s(es);
      std::memcpy(s.data(), &v, es);
      out.push_back(s);
    }
    return out;
  }
  for (double v :
       {0.5, -3.25, 1.0 / 3.0, 0.0, 0x1p-140, 1000.0, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<uint8_t> s(es);
    StoreFloat(t, v, s.data());
    out.push_back(s);
  }
  return out;
}

inline constexpr uint64_t kKernelDivisors[] = {
    2, 3, 7, 8, 1000, (uint64_t{1} << 32) + 1, (uint64_t{1} << 63) + 5};

inline const char* KindName(KernelKind k) {
  switch (k) {
    case KernelKind::kReduce:
      return "reduce";
    case KernelKind::kScale:
      return "scale";
    case KernelKind::kDivide:
      return "divide";
    case KernelKind::kCopy:
      return "copy";
  }
  return "?";
}

inline std::string Hex(const uint8_t* p, size_t bytes) {
  std::string s = "0x";
  char buf[3];
  for (size_t i = bytes; i-- > 0;) {  // little endian: most significant byte first
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    s += buf;
  }
  return s;
}

// Calls f for every case. `large` adds the 100003-element sizes (they dominate the run time).
inline void ForEachKernelCase(const std::function<void(const KernelCase&)>& f, bool large = true) {
  uint32_t seed = 1;
  auto name = [](const KernelCase& c) {
    std::string s = std::string(KindName(c.kind)) + " " + DataTypeName(c.type);
    if (c.kind == KernelKind::kReduce) s += std::string(" ") + ReduceOpName(c.op);
    s += " n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset);
    if (c.in_place) s += " in-place";
    if (c.kind == KernelKind::kDivide) s += " divisor=" + std::to_string(c.divisor);
    if (c.kind == KernelKind::kScale)
      s += " scalar=" + Hex(c.scalar.data(), c.scalar.size()) +
           (c.scalar_on_device ? " (device)" : " (host)");
    return s;
  };
  for (DataType t : kKernelTypes) {
    const size_t es = ElementSize(t);
    for (size_t n : kKernelSizes) {
      if (!large && n > 5000) continue;
      // Reduce: every op; out of place aligned, misaligned, in place.
      for (ReduceOp op : kKernelOps)
        for (int variant = 0; variant < 3; ++variant) {
          KernelCase c;
          c.kind = KernelKind::kReduce;
          c.type = t;
          c.op = op;
          c.n = n;
          c.offset = variant == 1 ? 1 : 0;
          c.in_place = variant == 2;
          c.a = KernelInput(t, n, seed++);
          c.b = KernelInput(t, n, seed++);
          MatchNans(t, c.a, &c.b);
          c.name = name(c);
          f(c);
        }
      // Scale: every scalar, host and device, in and out of place, aligned and not.
      int variant = 0;
      for (const std::vector<uint8_t>& s : KernelScalars(t)) {
        KernelCase c;
        c.kind = KernelKind::kScale;
        c.type = t;
        c.n = n;
        c.offset = variant % 3 == 1 ? 1 : 0;
        c.in_place = variant % 2 == 1;
        c.scalar_on_device = variant % 4 >= 2;
        ++variant;
        c.scalar = s;
        c.a = KernelInput(t, n, seed++);
        if (IsNanElement(t, s.data()))
          for (size_t i = 0; i < n; ++i)
            if (IsNanElement(t, &c.a[i * es])) std::memcpy(&c.a[i * es], s.data(), es);
        c.name = name(c);
        f(c);
      }
      // Divide (in place by definition): every divisor, aligned and not; 1 must change nothing.
      variant = 0;
      for (uint64_t d : kKernelDivisors) {
        KernelCase c;
        c.kind = KernelKind::kDivide;
        c.type = t;
        c.n = n;
        c.offset = variant++ % 2;
        c.in_place = true;
        c.divisor = d;
        c.a = KernelInput(t, n, seed++);
        c.name = name(c);
        f(c);
      }
      (void)es;
    }
  }
  // Exhaustive pairs of the 8-bit types: every a with every b, for every op.
  for (DataType t :
       {DataType::kFloat8e4m3, DataType::kFloat8e5m2, DataType::kInt8, DataType::kUint8})
    for (ReduceOp op : kKernelOps) {
      KernelCase c;
      c.kind = KernelKind::kReduce;
      c.type = t;
      c.op = op;
      c.n = 65536;
      c.a.resize(c.n);
      c.b.resize(c.n);
      for (size_t i = 0; i < c.n; ++i) {
        c.a[i] = static_cast<uint8_t>(i >> 8);
        c.b[i] = static_cast<uint8_t>(i);
      }
      MatchNans(t, c.a, &c.b);
      c.name = name(c) + " (all pairs)";
      f(c);
    }
  // Every fp16 and bf16 value divided and scaled.
  for (DataType t : {DataType::kFloat16, DataType::kBfloat16}) {
    std::vector<uint8_t> all(65536 * 2);
    for (uint32_t i = 0; i < 65536; ++i) {
      const uint16_t v = static_cast<uint16_t>(i);
      std::memcpy(&all[i * 2], &v, 2);
    }
    for (uint64_t d : {uint64_t{3}, uint64_t{7}, uint64_t{1000}}) {
      KernelCase c;
      c.kind = KernelKind::kDivide;
      c.type = t;
      c.n = 65536;
      c.in_place = true;
      c.divisor = d;
      c.a = all;
      c.name = name(c) + " (all values)";
      f(c);
    }
    for (double s : {0.1, -3.0, 1e-3}) {
      KernelCase c;
      c.kind = KernelKind::kScale;
      c.type = t;
      c.n = 65536;
      c.scalar.resize(2);
      StoreFloat(t, s, c.scalar.data());
      c.a = all;
      c.name = name(c) + " (all values)";
      f(c);
    }
  }
  // Copies: sizes around the 16-byte packs, both alignments.
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4095}, size_t{1} << 20,
                   (size_t{1} << 20) + 3})
    for (size_t offset : {size_t{0}, size_t{3}}) {
      if (!large && n > 5000) continue;
      KernelCase c;
      c.kind = KernelKind::kCopy;
      c.n = n;
      c.offset = offset;
      c.a = KernelInput(DataType::kUint8, n, seed++);
      c.name = name(c);
      f(c);
    }
}

// The CPU kernels' result for a case, on tier `isa`: the bytes of dst (n elements).
inline std::vector<uint8_t> CpuKernelResult(const KernelCase& c, cpu::KernelIsa isa) {
  std::vector<uint8_t> out = c.a;
  switch (c.kind) {
    case KernelKind::kReduce:
      // In place or not gives the same bits on the CPU (checked by device_reduce_kernels_test).
      cpu::ReduceKernelWithIsa(isa, c.type, c.op, out.data(), c.b.data(), out.data(), c.n);
      break;
    case KernelKind::kScale:
      cpu::ScaleKernelWithIsa(isa, c.type, c.a.data(), out.data(), c.n, c.scalar.data());
      break;
    case KernelKind::kDivide:
      cpu::DivideKernelWithIsa(isa, c.type, out.data(), c.n, c.divisor);
      break;
    case KernelKind::kCopy:
      break;
  }
  return out;
}

// "" when equal, else the first differing element with its inputs.
inline std::string FirstDifference(const KernelCase& c, const std::vector<uint8_t>& want,
                                   const std::vector<uint8_t>& got) {
  if (want.size() != got.size())
    return c.name + ": " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(want.size());
  const size_t es = c.kind == KernelKind::kCopy ? 1 : ElementSize(c.type);
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < c.n; ++i)
    if (std::memcmp(&want[i * es], &got[i * es], es) != 0 && diffs++ == 0) first = i;
  if (diffs == 0) return "";
  std::string s = c.name + ": " + std::to_string(diffs) + " of " + std::to_string(c.n) +
                  " elements differ; first at " + std::to_string(first) +
                  ": a=" + Hex(&c.a[first * es], es);
  if (c.kind == KernelKind::kReduce) s += " b=" + Hex(&c.b[first * es], es);
  s += " expected " + Hex(&want[first * es], es) + " got " + Hex(&got[first * es], es);
  return s;
}

}  // namespace braid::test
