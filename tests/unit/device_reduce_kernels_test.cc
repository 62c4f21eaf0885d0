// ReduceKernel, DivideKernel and ScaleKernel against a reference computed element by element in
// this file (narrow floats through the independent decode/encode of device_float_reference.h),
// for every type x op, on every kernel tier this CPU runs, over sizes that hit the vector body,
// the tails and the block edges, with dst aliasing a or b and with misaligned starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"
#include "device/cpu/reduce_kernels.h"
#include "device_float_reference.h"

namespace braid {
namespace {

using cpu::KernelIsa;

constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,      DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,   DataType::kFloat16,    DataType::kFloat32,
    DataType::kFloat64, DataType::kBfloat16, DataType::kFloat8e4m3, DataType::kFloat8e5m2,
};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
constexpr size_t kSizes[] = {0, 1, 7, 63, 64, 65, 255, 256, 257, 100003};

std::vector<KernelIsa> TestedIsas() {
  std::vector<KernelIsa> isas{KernelIsa::kPortable};
  if (cpu::CpuSupports(KernelIsa::kAvx2F16c)) isas.push_back(KernelIsa::kAvx2F16c);
  if (cpu::CpuSupports(KernelIsa::kAvx512)) isas.push_back(KernelIsa::kAvx512);
  return isas;
}

const test::RefFormat* NarrowFormat(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return &test::kRefHalf;
    case DataType::kBfloat16:
      return &test::kRefBf16;
    case DataType::kFloat8e4m3:
      return &test::kRefE4M3;
    case DataType::kFloat8e5m2:
      return &test::kRefE5M2;
    default:
      return nullptr;
  }
}

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// ---------------------------------------------------------------- reference arithmetic

// IEEE 754-2019 maximum/minimum, written from the definition.
template <class F>
F RefMax(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;  // +0 beats -0
  return a > b ? a : b;
}
template <class F>
F RefMin(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <class F>
F RefCombineFloat(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return RefMax(a, b);
    case ReduceOp::kMin:
      return RefMin(a, b);
  }
  return a;
}

// Integers through 64-bit unsigned arithmetic and truncation: sums and products modulo 2^bits.
template <class T>
T RefCombineInt(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kMin:
      return b < a ? b : a;
  }
  return a;
}

float RefNarrowToFloat(const test::RefFormat& f, const uint8_t* p) {
  const uint32_t bits = f.bits() == 8 ? p[0] : Load<uint16_t>(p);
  return static_cast<float>(test::RefDecode(f, bits));
}
void RefStoreNarrow(const test::RefFormat& f, float v, uint8_t* p) {
  // Any NaN encoding: comparisons treat all NaNs alike.
  const uint32_t bits = std::isnan(v) ? (f.exp_max() << f.man_bits) | f.man_max()
                                      : test::RefEncode(f, static_cast<double>(v));
  if (f.bits() == 8) {
    p[0] = static_cast<uint8_t>(bits);
  } else {
    Store(p, static_cast<uint16_t>(bits));
  }
}

// One element of dst = a (op) b. Narrow floats: decoded, combined in fp32, rounded once.
void RefReduceElement(DataType t, ReduceOp op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  switch (t) {
    case DataType::kInt8:
      return Store(out, RefCombineInt(op, Load<int8_t>(a), Load<int8_t>(b)));
    case DataType::kUint8:
      return Store(out, RefCombineInt(op, Load<uint8_t>(a), Load<uint8_t>(b)));
    case DataType::kInt32:
      return Store(out, RefCombineInt(op, Load<int32_t>(a), Load<int32_t>(b)));
    case DataType::kUint32:
      return Store(out, RefCombineInt(op, Load<uint32_t>(a), Load<uint32_t>(b)));
    case DataType::kInt64:
      return Store(out, RefCombineInt(op, Load<int64_t>(a), Load<int64_t>(b)));
    case DataType::kUint64:
      return Store(out, RefCombineInt(op, Load<uint64_t>(a), Load<uint64_t>(b)));
    case DataType::kFloat32:
      return Store(out, RefCombineFloat(op, Load<float>(a), Load<float>(b)));
    case DataType::kFloat64:
      return Store(out, RefCombineFloat(op, Load<double>(a), Load<double>(b)));
    default: {
      const test::RefFormat& f = *NarrowFormat(t);
      RefStoreNarrow(f, RefCombineFloat(op, RefNarrowToFloat(f, a), RefNarrowToFloat(f, b)), out);
    }
  }
}

// Bitwise equality, except that any NaN equals any NaN.
bool SameElement(DataType t, const uint8_t* x, const uint8_t* y) {
  const size_t size = DataTypeSize(t);
  if (std::memcmp(x, y, size) == 0) return true;
  if (t == DataType::kFloat32) return std::isnan(Load<float>(x)) && std::isnan(Load<float>(y));
  if (t == DataType::kFloat64) return std::isnan(Load<double>(x)) && std::isnan(Load<double>(y));
  if (const test::RefFormat* f = NarrowFormat(t)) {
    const uint32_t bx = size == 1 ? x[0] : Load<uint16_t>(x);
    const uint32_t by = size == 1 ? y[0] : Load<uint16_t>(y);
    return test::RefIsNan(*f, bx) && test::RefIsNan(*f, by);
  }
  return false;
}

std::string Hex(const uint8_t* p, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = size; i-- > 0;) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

// Index of the first element where got and want differ, or n.
size_t FirstMismatch(DataType t, const uint8_t* got, const uint8_t* want, size_t n) {
  const size_t size = DataTypeSize(t);
  for (size_t i = 0; i < n; ++i) {
    if (!SameElement(t, got + i * size, want + i * size)) return i;
  }
  return n;
}

// ---------------------------------------------------------------- inputs

// n random elements of type t: integers over their full range; fp32/fp64 mostly moderate values
// of both signs (where sums round) with specials (NaN, inf, zeros, subnormals, extremes) mixed in;
// narrow floats as random encodings, which already cover all of those.
std::vector<uint8_t> RandomElements(DataType t, size_t n, std::mt19937_64& rng) {
  const size_t size = DataTypeSize(t);
  std::vector<uint8_t> v(n * size);
  for (auto& byte : v) byte = static_cast<uint8_t>(rng());
  if (t != DataType::kFloat32 && t != DataType::kFloat64) return v;
  std::uniform_real_distribution<double> exponent(-30, 30);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t pick = rng() % 100;
    if (pick < 5) continue;  // random bits: NaN payloads, huge and tiny values
    double x;
    if (pick < 12) {
      const double specials[] = {0.0,
                                 -0.0,
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN(),
                                 -std::numeric_limits<double>::quiet_NaN(),
                                 1.0,
                                 -1.0};
      x = specials[rng() % 8];
    } else {
      x = std::exp2(exponent(rng)) * ((rng() & 1) ? -1 : 1);
    }
    if (t == DataType::kFloat32) {
      float f = static_cast<float>(x);
      if (pick == 12)
        f = std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 1000);
      if (pick == 13) f = std::numeric_limits<float>::max() * ((rng() & 1) ? -1.0f : 1.0f);
      Store(v.data() + i * size, f);
    } else {
      if (pick == 12)
        x = std::numeric_limits<double>::denorm_min() * static_cast<double>(rng() % 1000);
      if (pick == 13) x = std::numeric_limits<double>::max() * ((rng() & 1) ? -1.0 : 1.0);
      Store(v.data() + i * size, x);
    }
  }
  return v;
}

std::string TypeOpName(DataType t, ReduceOp op) {
  return std::string(DataTypeName(t)) + "_" + ReduceOpName(op);
}

// ---------------------------------------------------------------- ReduceKernel

struct TypeOp {
  DataType type;
  ReduceOp op;
};

std::vector<TypeOp> AllTypeOps() {
  std::vector<TypeOp> v;
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) v.push_back({t, op});
  }
  return v;
}

class ReduceKernelTest : public ::testing::TestWithParam<TypeOp> {};

TEST_P(ReduceKernelTest, MatchesReferenceInAndOutOfPlace) {
  const DataType t = GetParam().type;
  const ReduceOp op = GetParam().op;
  const size_t size = DataTypeSize(t);
  std::mt19937_64 rng(1000 + static_cast<int>(t) * 10 + static_cast<int>(op));
  constexpr size_t kGuard = 64;  // elements past the end that must stay untouched
  for (const size_t n : kSizes) {
    // Starting one element in (for odd n) leaves the vector loads unaligned.
    const size_t offset = (n % 2) * size;
    std::vector<uint8_t> a = RandomElements(t, n, rng);
    std::vector<uint8_t> b = RandomElements(t, n, rng);
    std::vector<uint8_t> want(n * size), want_aa(n * size);
    for (size_t i = 0; i < n; ++i) {
      RefReduceElement(t, op, &a[i * size], &b[i * size], &want[i * size]);
      RefReduceElement(t, op, &a[i * size], &a[i * size], &want_aa[i * size]);
    }
    for (const KernelIsa isa : TestedIsas()) {
      SCOPED_TRACE(std::string(cpu::KernelIsaName(isa)) + " n=" + std::to_string(n));
      std::vector<uint8_t> sa(offset + n * size + kGuard * size, 0xa5);
      std::vector<uint8_t> sb(sa.size(), 0xa5), sd(sa.size(), 0xa5);
      std::copy(a.begin(), a.end(), sa.begin() + offset);
      std::copy(b.begin(), b.end(), sb.begin() + offset);
      uint8_t* pa = sa.data() + offset;
      uint8_t* pb = sb.data() + offset;
      uint8_t* pd = sd.data() + offset;
      auto check = [&](const uint8_t* got, const std::vector<uint8_t>& expected, const char* mode) {
        const size_t i = FirstMismatch(t, got, expected.data(), n);
        ASSERT_EQ(i, n) << mode << ": first mismatch at " << i << " a=" << Hex(&a[i * size], size)
                        << " b=" << Hex(&b[i * size], size) << " got=" << Hex(got + i * size, size)
                        << " want=" << Hex(&expected[i * size], size);
      };

      cpu::ReduceKernelWithIsa(isa, t, op, pa, pb, pd, n);
      check(pd, want, "out of place");
      EXPECT_TRUE(std::equal(a.begin(), a.end(), pa)) << "a modified";
      EXPECT_TRUE(std::equal(b.begin(), b.end(), pb)) << "b modified";
      for (size_t i = n * size; i < (n + kGuard) * size; ++i) {
        ASSERT_EQ(pd[i], 0xa5) << "wrote past the end at byte " << i;
      }

      cpu::ReduceKernelWithIsa(isa, t, op, pa, pb, pa, n);  // dst == a
      check(pa, want, "dst == a");
      std::copy(a.begin(), a.end(), pa);
      cpu::ReduceKernelWithIsa(isa, t, op, pa, pb, pb, n);  // dst == b
      check(pb, want, "dst == b");
      cpu::ReduceKernelWithIsa(isa, t, op, pa, pa, pa, n);  // dst == a == b
      check(pa, want_aa, "dst == a == b");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceKernelTest, ::testing::ValuesIn(AllTypeOps()),
                         [](const auto& info) {
                           return TypeOpName(info.param.type, info.param.op);
                         });

// The public entry point is the tier KernelIsaFor picks: AVX-512 (where the CPU has it) for the
// narrow floats only, else the widest tier.
TEST(ReduceKernelDispatch, PublicEntryPointMatchesBestTier) {
  for (const DataType t : kAllTypes) {
    const bool narrow = NarrowFormat(t) != nullptr;  // the test's own list of the narrow floats
    const KernelIsa want = narrow || !cpu::CpuSupports(KernelIsa::kAvx2F16c) ? cpu::BestKernelIsa()
                                                                             : KernelIsa::kAvx2F16c;
    EXPECT_EQ(cpu::KernelIsaFor(t), want) << DataTypeName(t);
  }
  if (cpu::CpuSupports(KernelIsa::kAvx512)) {
    EXPECT_EQ(cpu::BestKernelIsa(), KernelIsa::kAvx512);
  }
  std::mt19937_64 rng(7);
  const size_t n = 1000;
  for (const DataType t : kAllTypes) {
    const std::vector<uint8_t> a = RandomElements(t, n, rng);
    const std::vector<uint8_t> b = RandomElements(t, n, rng);
    std::vector<uint8_t> x(a.size()), y(a.size());
    ReduceKernel(t, ReduceOp::kSum, a.data(), b.data(), x.data(), n);
    cpu::ReduceKernelWithIsa(cpu::KernelIsaFor(t), t, ReduceOp::kSum, a.data(), b.data(), y.data(),
                             n);
    EXPECT_EQ(FirstMismatch(t, x.data(), y.data(), n), n) << DataTypeName(t);
  }
}

// The resolved kernel (what a compiled schedule keeps per call) is the one ReduceKernel runs:
// the same bits for every type and op, and none for an unknown type or op.
TEST(ReduceKernelDispatch, ResolvedKernelMatchesThePublicEntryPoint) {
  std::mt19937_64 rng(11);
  const size_t n = 257;
  for (const DataType t : kAllTypes) {
    for (const ReduceOp op : kAllOps) {
      const std::vector<uint8_t> a = RandomElements(t, n, rng);
      const std::vector<uint8_t> b = RandomElements(t, n, rng);
      std::vector<uint8_t> x(a.size()), y(a.size());
      ReduceKernel(t, op, a.data(), b.data(), x.data(), n);
      const ReduceKernelFn fn = ResolveReduceKernel(t, op);
      ASSERT_NE(fn, nullptr) << TypeOpName(t, op);
      fn(a.data(), b.data(), y.data(), n);
      EXPECT_EQ(FirstMismatch(t, x.data(), y.data(), n), n) << TypeOpName(t, op);
    }
  }
  EXPECT_EQ(ResolveReduceKernel(static_cast<DataType>(kNumDataTypes), ReduceOp::kSum), nullptr);
  EXPECT_EQ(ResolveReduceKernel(DataType::kInt8, static_cast<ReduceOp>(kNumReduceOps)), nullptr);
}

TEST(ReduceKernelDispatch, UnknownTypeOrOpOrZeroCountDoesNothing) {
  uint8_t a[16] = {1}, b[16] = {2}, d[16] = {};
  ReduceKernel(static_cast<DataType>(kNumDataTypes), ReduceOp::kSum, a, b, d, 4);
  ReduceKernel(DataType::kInt8, static_cast<ReduceOp>(kNumReduceOps), a, b, d, 4);
  ReduceKernel(DataType::kInt8, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);
  for (uint8_t v : d) EXPECT_EQ(v, 0);
}

// The semantics the reference encodes, spelled out on chosen values.
TEST(ReduceKernelSemantics, FloatMaxMinPropagateNanAndOrderSignedZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const KernelIsa isa : TestedIsas()) {
    const float a[] = {nan, 1.0f, 0.0f, -0.0f, inf, -inf, 2.0f, nan};
    const float b[] = {1.0f, nan, -0.0f, 0.0f, nan, 3.0f, -2.0f, nan};
    float mx[8], mn[8];
    cpu::ReduceKernelWithIsa(isa, DataType::kFloat32, ReduceOp::kMax, a, b, mx, 8);
    cpu::ReduceKernelWithIsa(isa, DataType::kFloat32, ReduceOp::kMin, a, b, mn, 8);
    for (int i : {0, 1, 4, 7}) {
      EXPECT_TRUE(std::isnan(mx[i])) << i;
      EXPECT_TRUE(std::isnan(mn[i])) << i;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(mx[2]), 0u);  // max(+0, -0) = +0, both orders
    EXPECT_EQ(std::bit_cast<uint32_t>(mx[3]), 0u);
    EXPECT_EQ(std::bit_cast<uint32_t>(mn[2]), 0x80000000u);  // min(+0, -0) = -0, both orders
    EXPECT_EQ(std::bit_cast<uint32_t>(mn[3]), 0x80000000u);
    EXPECT_EQ(mx[5], 3.0f);
    EXPECT_EQ(mn[5], -inf);
    EXPECT_EQ(mx[6], 2.0f);
    EXPECT_EQ(mn[6], -2.0f);

    const uint16_t ha[] = {0x7e00, 0x3c00, 0x0000, 0x8000};  // NaN, 1, +0, -0 in fp16
    const uint16_t hb[] = {0x3c00, 0x7e00, 0x8000, 0x0000};
    uint16_t hm[4];
    cpu::ReduceKernelWithIsa(isa, DataType::kFloat16, ReduceOp::kMax, ha, hb, hm, 4);
    EXPECT_EQ(hm[0] & 0x7c00, 0x7c00);
    EXPECT_NE(hm[0] & 0x03ff, 0);
    EXPECT_NE(hm[1] & 0x03ff, 0);
    EXPECT_EQ(hm[2], 0x0000);
    EXPECT_EQ(hm[3], 0x0000);
  }
}

TEST(ReduceKernelSemantics, IntegersWrapAndFp8Saturates) {
  for (const KernelIsa isa : TestedIsas()) {
    const int32_t a32[] = {std::numeric_limits<int32_t>::max(), -7};
    const int32_t b32[] = {1, 3};
    int32_t s32[2], p32[2];
    cpu::ReduceKernelWithIsa(isa, DataType::kInt32, ReduceOp::kSum, a32, b32, s32, 2);
    cpu::ReduceKernelWithIsa(isa, DataType::kInt32, ReduceOp::kProd, a32, a32, p32, 2);
    EXPECT_EQ(s32[0], std::numeric_limits<int32_t>::min());
    EXPECT_EQ(s32[1], -4);
    EXPECT_EQ(p32[0], 1);  // (2^31 - 1)^2 mod 2^32
    EXPECT_EQ(p32[1], 49);

    const int8_t a8[] = {-128, 100};
    const int8_t b8[] = {-1, 100};
    int8_t mx8[2], p8[2];
    cpu::ReduceKernelWithIsa(isa, DataType::kInt8, ReduceOp::kMax, a8, b8, mx8, 2);
    cpu::ReduceKernelWithIsa(isa, DataType::kInt8, ReduceOp::kProd, a8, b8, p8, 2);
    EXPECT_EQ(mx8[0], -1);   // signed comparison
    EXPECT_EQ(p8[0], -128);  // 128 mod 256, as int8
    EXPECT_EQ(p8[1], 16);    // 10000 mod 256

    const uint8_t e4[] = {0x7e, 0x7e, 0x7f};  // 448, 448, NaN
    uint8_t e4_sum[3];
    cpu::ReduceKernelWithIsa(isa, DataType::kFloat8e4m3, ReduceOp::kSum, e4, e4, e4_sum, 3);
    EXPECT_EQ(e4_sum[0], 0x7e);  // 896 saturates to 448
    EXPECT_EQ(e4_sum[2], 0x7f);
    const uint8_t e5a[] = {0x7b, 0x7c, 0xfc};  // 57344, inf, -inf
    const uint8_t e5b[] = {0x7b, 0x3c, 0x3c};  // 57344, 1, 1
    uint8_t e5_sum[3];
    cpu::ReduceKernelWithIsa(isa, DataType::kFloat8e5m2, ReduceOp::kSum, e5a, e5b, e5_sum, 3);
    EXPECT_EQ(e5_sum[0], 0x7b);
    EXPECT_EQ(e5_sum[1], 0x7b);  // SATFINITE, like CUDA: inf becomes the largest finite value
    EXPECT_EQ(e5_sum[2], 0xfb);
  }
}

// ---------------------------------------------------------------- DivideKernel

template <class T>
T RefDivideInt(T x, uint64_t d) {
  // C division truncates toward zero; __int128 holds every operand exactly.
  return static_cast<T>(static_cast<__int128>(x) / static_cast<__int128>(d));
}

void RefDivideElement(DataType t, uint8_t* p, uint64_t d) {
  switch (t) {
    case DataType::kInt8:
      return Store(p, RefDivideInt(Load<int8_t>(p), d));
    case DataType::kUint8:
      return Store(p, RefDivideInt(Load<uint8_t>(p), d));
    case DataType::kInt32:
      return Store(p, RefDivideInt(Load<int32_t>(p), d));
    case DataType::kUint32:
      return Store(p, RefDivideInt(Load<uint32_t>(p), d));
    case DataType::kInt64:
      return Store(p, RefDivideInt(Load<int64_t>(p), d));
    case DataType::kUint64:
      return Store(p, RefDivideInt(Load<uint64_t>(p), d));
    case DataType::kFloat32:
      return Store(
          p, static_cast<float>(static_cast<double>(Load<float>(p)) / static_cast<double>(d)));
    case DataType::kFloat64:
      return Store(p, Load<double>(p) / static_cast<double>(d));
    default: {
      const test::RefFormat& f = *NarrowFormat(t);
      RefStoreNarrow(f, RefNarrowToFloat(f, p) / static_cast<float>(d), p);
    }
  }
}

class DivideKernelTest : public ::testing::TestWithParam<DataType> {};

TEST_P(DivideKernelTest, MatchesReference) {
  const DataType t = GetParam();
  const size_t size = DataTypeSize(t);
  std::mt19937_64 rng(2000 + static_cast<int>(t));
  const uint64_t divisors[] = {0,
                               1,
                               2,
                               3,
                               7,
                               8,
                               1000003,
                               (uint64_t{1} << 32) + 1,
                               uint64_t{1} << 63,
                               std::numeric_limits<uint64_t>::max()};
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{257}, size_t{100003}}) {
    std::vector<uint8_t> x = RandomElements(t, n, rng);
    // Small values too, where truncation toward zero shows (-7 / 2 = -3).
    for (size_t i = 0; i < n; i += 3) {
      if (!IsFloatingPoint(t))
        std::memset(&x[i * size + 1], (x[i * size] & 0x80) ? 0xff : 0, size - 1);
    }
    for (const uint64_t d : divisors) {
      std::vector<uint8_t> want = x;
      // Dividing by 1 leaves every bit alone (NaN payloads, e5m2 infinities) and by 0 is a
      // documented no-op.
      if (d > 1) {
        for (size_t i = 0; i < n; ++i) RefDivideElement(t, &want[i * size], d);
      }
      for (const KernelIsa isa : TestedIsas()) {
        std::vector<uint8_t> got = x;
        cpu::DivideKernelWithIsa(isa, t, got.data(), n, d);
        const size_t i = FirstMismatch(t, got.data(), want.data(), n);
        ASSERT_EQ(i, n) << cpu::KernelIsaName(isa) << " n=" << n << " divisor=" << d
                        << " x=" << Hex(&x[i * size], size) << " got=" << Hex(&got[i * size], size)
                        << " want=" << Hex(&want[i * size], size);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DivideKernelTest, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(DivideKernelSemantics, TruncatesTowardZero) {
  for (const KernelIsa isa : TestedIsas()) {
    int32_t i32[] = {-7, 7, -1, std::numeric_limits<int32_t>::min()};
    cpu::DivideKernelWithIsa(isa, DataType::kInt32, i32, 4, 2);
    EXPECT_EQ(i32[0], -3);
    EXPECT_EQ(i32[1], 3);
    EXPECT_EQ(i32[2], 0);
    EXPECT_EQ(i32[3], std::numeric_limits<int32_t>::min() / 2);
    int64_t i64[] = {-7, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min()};
    cpu::DivideKernelWithIsa(isa, DataType::kInt64, i64, 2, 3);
    cpu::DivideKernelWithIsa(isa, DataType::kInt64, i64 + 2, 1, uint64_t{1} << 63);
    EXPECT_EQ(i64[0], -2);
    EXPECT_EQ(i64[1], std::numeric_limits<int64_t>::min() / 3);
    EXPECT_EQ(i64[2], -1);  // -2^63 / 2^63, a divisor beyond INT64_MAX
    uint64_t u64[] = {std::numeric_limits<uint64_t>::max(), (uint64_t{1} << 63) + 5};
    cpu::DivideKernelWithIsa(isa, DataType::kUint64, u64, 2, 3);
    EXPECT_EQ(u64[0], std::numeric_limits<uint64_t>::max() / 3);
    EXPECT_EQ(u64[1], ((uint64_t{1} << 63) + 5) / 3);
    uint32_t u32[] = {0xffffffffu};
    cpu::DivideKernelWithIsa(isa, DataType::kUint32, u32, 1, 2);
    EXPECT_EQ(u32[0], 0x7fffffffu);
    int8_t i8[] = {-128, -3};
    cpu::DivideKernelWithIsa(isa, DataType::kInt8, i8, 2, 2);
    EXPECT_EQ(i8[0], -64);
    EXPECT_EQ(i8[1], -1);
  }
}

// ---------------------------------------------------------------- ScaleKernel

template <class T>
T RefScaleInt(T x, T s) {
  return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(s));
}

void RefScaleElement(DataType t, const uint8_t* x, const uint8_t* s, uint8_t* out) {
  switch (t) {
    case DataType::kInt8:
      return Store(out, RefScaleInt(Load<int8_t>(x), Load<int8_t>(s)));
    case DataType::kUint8:
      return Store(out, RefScaleInt(Load<uint8_t>(x), Load<uint8_t>(s)));
    case DataType::kInt32:
      return Store(out, RefScaleInt(Load<int32_t>(x), Load<int32_t>(s)));
    case DataType::kUint32:
      return Store(out, RefScaleInt(Load<uint32_t>(x), Load<uint32_t>(s)));
    case DataType::kInt64:
      return Store(out, RefScaleInt(Load<int64_t>(x), Load<int64_t>(s)));
    case DataType::kUint64:
      return Store(out, RefScaleInt(Load<uint64_t>(x), Load<uint64_t>(s)));
    case DataType::kFloat32:
      return Store(out, Load<float>(x) * Load<float>(s));
    case DataType::kFloat64:
      return Store(out, Load<double>(x) * Load<double>(s));
    default: {
      const test::RefFormat& f = *NarrowFormat(t);
      RefStoreNarrow(f, RefNarrowToFloat(f, x) * RefNarrowToFloat(f, s), out);
    }
  }
}

class ScaleKernelTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ScaleKernelTest, MatchesReferenceInAndOutOfPlace) {
  const DataType t = GetParam();
  const size_t size = DataTypeSize(t);
  std::mt19937_64 rng(3000 + static_cast<int>(t));
  // Scalars: random ones plus, for floats, 1/3 and 0.5 (the usual pre-multipliers), -2, 0, NaN.
  std::vector<std::vector<uint8_t>> scalars;
  for (int i = 0; i < 4; ++i) scalars.push_back(RandomElements(t, 1, rng));
  if (IsFloatingPoint(t)) {
    for (const float v : {1.0f / 3, 0.5f, -2.0f, 0.0f, std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<uint8_t> s(size);
      if (t == DataType::kFloat32) Store(s.data(), v);
      if (t == DataType::kFloat64) Store(s.data(), static_cast<double>(v));
      if (const test::RefFormat* f = NarrowFormat(t)) RefStoreNarrow(*f, v, s.data());
      scalars.push_back(s);
    }
  }
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{257}, size_t{100003}}) {
    const std::vector<uint8_t> x = RandomElements(t, n, rng);
    for (const auto& s : scalars) {
      std::vector<uint8_t> want(n * size);
      for (size_t i = 0; i < n; ++i) RefScaleElement(t, &x[i * size], s.data(), &want[i * size]);
      for (const KernelIsa isa : TestedIsas()) {
        std::vector<uint8_t> got(n * size);
        cpu::ScaleKernelWithIsa(isa, t, x.data(), got.data(), n, s.data());
        size_t i = FirstMismatch(t, got.data(), want.data(), n);
        ASSERT_EQ(i, n) << cpu::KernelIsaName(isa) << " n=" << n << " s=" << Hex(s.data(), size)
                        << " x=" << Hex(&x[i * size], size) << " got=" << Hex(&got[i * size], size)
                        << " want=" << Hex(&want[i * size], size);
        got = x;
        cpu::ScaleKernelWithIsa(isa, t, got.data(), got.data(), n, s.data());  // in place
        i = FirstMismatch(t, got.data(), want.data(), n);
        ASSERT_EQ(i, n) << "in place, " << cpu::KernelIsaName(isa) << " n=" << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ScaleKernelTest, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST(ScaleKernelSemantics, ScalarMayBeUnaligned) {
  alignas(8) uint8_t storage[16] = {};
  const double s = 0.25;
  std::memcpy(storage + 3, &s, sizeof(s));
  const double x[] = {4.0, -8.0};
  double y[2];
  ScaleKernel(DataType::kFloat64, x, y, 2, storage + 3);
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], -2.0);
}

}  // namespace
}  // namespace braid
