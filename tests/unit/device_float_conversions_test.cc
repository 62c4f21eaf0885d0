// The scalar fp16/bf16/fp8 <-> fp32 conversions of src/device/cpu against the independent
// reference in device_float_reference.h: every encoding decoded and round-tripped, every rounding
// tie, random and swept fp32 inputs, saturation and NaN rules, and bit-for-bit agreement of the
// portable fp16 code with the F16C instructions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device/cpu/kernel_isa.h"
#include "device/cpu/reduce_kernels.h"
#include "device_float_reference.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace braid {
namespace {

using test::RefDecode;
using test::RefEncode;
using test::RefFormat;

uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float FromBits(uint32_t u) {
  return std::bit_cast<float>(u);
}

// A format under test: the library's conversions widened to uint32_t bits.
struct Format {
  const RefFormat* ref;
  float (*to_float)(uint32_t);
  uint32_t (*from_float)(float);
  // What a NaN input becomes when converted from fp32 (the fp32 NaN's bits given).
  uint32_t (*nan_from_float)(uint32_t f32_bits);
};

const Format kFormats[] = {
    {&test::kRefHalf, [](uint32_t b) { return HalfToFloat(static_cast<uint16_t>(b)); },
     [](float f) -> uint32_t { return FloatToHalf(f); },
     // F16C's rule: sign kept, top 10 payload bits kept, quiet bit set.
     [](uint32_t x) -> uint32_t { return ((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu); }},
    {&test::kRefBf16, [](uint32_t b) { return Bf16ToFloat(static_cast<uint16_t>(b)); },
     [](float f) -> uint32_t { return FloatToBf16(f); },
     [](uint32_t x) -> uint32_t { return (x >> 16) | 0x40u; }},
    {&test::kRefE4M3, [](uint32_t b) { return Fp8E4M3ToFloat(static_cast<uint8_t>(b)); },
     [](float f) -> uint32_t { return FloatToFp8E4M3(f); },
     [](uint32_t) -> uint32_t { return 0x7fu; }},  // CUDA's canonical fp8 NaN, sign dropped
    {&test::kRefE5M2, [](uint32_t b) { return Fp8E5M2ToFloat(static_cast<uint8_t>(b)); },
     [](float f) -> uint32_t { return FloatToFp8E5M2(f); },
     [](uint32_t) -> uint32_t { return 0x7fu; }},
};

class ConversionTest : public ::testing::TestWithParam<Format> {
 protected:
  const Format& fmt() const { return GetParam(); }
  const RefFormat& ref() const { return *GetParam().ref; }

  // What converting f must give, from the reference.
  uint32_t Expected(float f) const {
    if (std::isnan(f)) return fmt().nan_from_float(Bits(f));
    return RefEncode(ref(), f);
  }
};

TEST_P(ConversionTest, DecodesEveryEncodingExactly) {
  for (uint32_t b = 0; b < ref().count(); ++b) {
    const double want = RefDecode(ref(), b);
    const float got = fmt().to_float(b);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
      EXPECT_EQ(std::signbit(got), (b & ref().sign_bit()) != 0) << std::hex << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << b;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;
    }
  }
}

TEST_P(ConversionTest, RoundTripsEveryEncoding) {
  for (uint32_t b = 0; b < ref().count(); ++b) {
    const float f = fmt().to_float(b);
    const uint32_t back = fmt().from_float(f);
    if (test::RefIsNan(ref(), b)) {
      // NaN payloads are canonicalised (quietened, or fp8's single NaN), never turned into numbers.
      EXPECT_TRUE(test::RefIsNan(ref(), back)) << std::hex << b << " -> " << back;
      EXPECT_EQ(back, fmt().nan_from_float(Bits(f))) << std::hex << b;
    } else if (std::isinf(f) && ref().saturate) {
      // e5m2's infinities: fp32 -> fp8 saturates them like CUDA's __NV_SATFINITE.
      const uint32_t max_finite = RefEncode(ref(), test::RefMaxFinite(ref()));
      EXPECT_EQ(back, (b & ref().sign_bit()) | max_finite) << std::hex << b;
    } else {
      EXPECT_EQ(back, b) << std::hex << b;
    }
  }
}

// For every pair of neighbouring non-negative encodings lo, lo+1 (including the one past the
// largest finite value), the midpoint goes to the even one and the fp32 values either side of it
// go to the nearer one; the same for negatives.
TEST_P(ConversionTest, RoundsToNearestEvenAtEveryMidpoint) {
  const uint32_t max_finite_bits = RefEncode(ref(), test::RefMaxFinite(ref()));
  const double max_finite = test::RefMaxFinite(ref());
  for (uint32_t lo = 0; lo <= max_finite_bits; ++lo) {
    const double lo_value = RefDecode(ref(), lo);
    // Past the largest finite value the next "value" is where the next encoding would lie.
    const double hi_value = lo == max_finite_bits
                                ? max_finite + (max_finite - RefDecode(ref(), lo - 1))
                                : RefDecode(ref(), lo + 1);
    const uint32_t overflow = ref().saturate ? max_finite_bits : ref().exp_max() << ref().man_bits;
    const uint32_t hi = lo == max_finite_bits ? overflow : lo + 1;
    const float mid = static_cast<float>((lo_value + hi_value) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << "midpoint not exact in fp32";
    const uint32_t even = (lo & 1u) == 0 ? lo : hi;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    for (const uint32_t sign : {0u, ref().sign_bit()}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(fmt().from_float(s * mid), sign | even) << std::hex << "lo " << lo;
      EXPECT_EQ(fmt().from_float(s * below), sign | lo) << std::hex << "lo " << lo;
      EXPECT_EQ(fmt().from_float(s * above), sign | hi) << std::hex << "lo " << lo;
      // The reference itself agrees, which is what the other tests lean on.
      EXPECT_EQ(RefEncode(ref(), s * mid), sign | even) << std::hex << "lo " << lo;
    }
  }
}

TEST_P(ConversionTest, MatchesReferenceOnSweptAndRandomFloats) {
  // A stride through all 2^32 patterns (every exponent, both signs, NaNs, subnormals) ...
  for (uint64_t u = 0; u <= 0xffffffffu; u += 7919) {
    const float f = FromBits(static_cast<uint32_t>(u));
    ASSERT_EQ(fmt().from_float(f), Expected(f)) << std::hex << u;
  }
  // ... and random patterns, plus random values in the format's own range, where rounding
  // decisions are dense.
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    ASSERT_EQ(fmt().from_float(f), Expected(f)) << std::hex << Bits(f);
  }
  std::uniform_real_distribution<double> log_magnitude(std::log2(RefDecode(ref(), 1)) - 2,
                                                       std::log2(test::RefMaxFinite(ref())) + 1);
  for (int i = 0; i < 1000000; ++i) {
    float f = static_cast<float>(std::exp2(log_magnitude(rng)));
    if (rng() & 1) f = -f;
    ASSERT_EQ(fmt().from_float(f), Expected(f)) << std::hex << Bits(f) << " " << f;
  }
}

TEST_P(ConversionTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t sign = ref().sign_bit();
  const uint32_t max_finite_bits = RefEncode(ref(), test::RefMaxFinite(ref()));
  const uint32_t overflow = ref().saturate ? max_finite_bits : ref().exp_max() << ref().man_bits;
  EXPECT_EQ(fmt().from_float(0.0f), 0u);
  EXPECT_EQ(fmt().from_float(-0.0f), sign);
  EXPECT_EQ(fmt().from_float(inf), overflow);
  EXPECT_EQ(fmt().from_float(-inf), sign | overflow);
  EXPECT_EQ(fmt().from_float(std::numeric_limits<float>::max()), overflow);
  EXPECT_EQ(fmt().from_float(-std::numeric_limits<float>::max()), sign | overflow);
  // The smallest fp32 subnormal (2^-149) is below half of every format's smallest subnormal
  // (bf16's is 2^-133).
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(fmt().from_float(tiny), 0u);
  EXPECT_EQ(fmt().from_float(-tiny), sign);
  for (const uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffbfffffu, 0x7fd55555u}) {
    const uint32_t got = fmt().from_float(FromBits(nan));
    EXPECT_TRUE(test::RefIsNan(ref(), got)) << std::hex << nan;
    EXPECT_EQ(got, fmt().nan_from_float(nan)) << std::hex << nan;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ConversionTest, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(info.param.ref->name); });

// Hand-checked values, so that a shared misunderstanding of a format in the library and the
// reference cannot pass unnoticed.
TEST(ConversionKnownValues, Half) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // tie with an odd mantissa: up, to inf
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie: to even (zero)
  EXPECT_EQ(FloatToHalf(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(0x3p-25f), 0x0002);         // tie: to even (2)
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);  // tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 0x3p-11f), 0x3c02);  // tie: to even
  EXPECT_EQ(HalfToFloat(0x3555), 0x1.554p-2f);
  EXPECT_EQ(HalfToFloat(0x8001), -0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
}

TEST(ConversionKnownValues, Bf16) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(3.140625f), 0x4049);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);   // tie: to even
  EXPECT_EQ(FloatToBf16(1.0f + 0x3p-8f), 0x3f82);   // tie: to even
  EXPECT_EQ(FloatToBf16(0x1.fffffep127f), 0x7f80);  // rounds past the largest finite: inf
  EXPECT_EQ(FloatToBf16(0x1.fep127f), 0x7f7f);
  EXPECT_EQ(Bf16ToFloat(0xc2f7), -123.5f);
  EXPECT_EQ(Bf16ToFloat(0x0001), 0x1p-133f);
}

TEST(ConversionKnownValues, Fp8E4M3) {
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);  // the would-be next value, 480, is NaN: saturate
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);  // tie: to even
  EXPECT_EQ(FloatToFp8E4M3(0x3p-10f), 0x02);  // tie: to even
  EXPECT_EQ(FloatToFp8E4M3(0x7p-9f), 0x07);   // largest subnormal
  EXPECT_EQ(FloatToFp8E4M3(0x1p-6f), 0x08);   // smallest normal
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);  // the top binade is finite except S.1111.111
  EXPECT_EQ(Fp8E4M3ToFloat(0x80), -0.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
}

TEST(ConversionKnownValues, Fp8E5M2) {
  EXPECT_EQ(FloatToFp8E5M2(1.0f), 0x3c);
  EXPECT_EQ(FloatToFp8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(FloatToFp8E5M2(61440.0f), 0x7b);  // would round to inf: saturates
  EXPECT_EQ(FloatToFp8E5M2(std::numeric_limits<float>::infinity()), 0x7b);  // SATFINITE
  EXPECT_EQ(FloatToFp8E5M2(-std::numeric_limits<float>::infinity()), 0xfb);
  EXPECT_EQ(FloatToFp8E5M2(0x1p-16f), 0x01);
  EXPECT_EQ(FloatToFp8E5M2(0x1p-17f), 0x00);  // tie: to even
  EXPECT_EQ(FloatToFp8E5M2(0x3p-17f), 0x02);
  EXPECT_EQ(Fp8E5M2ToFloat(0x7c), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp8E5M2ToFloat(0xfc), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(0x7d)));
  EXPECT_EQ(Fp8E5M2ToFloat(0x7b), 57344.0f);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) float F16cToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t F16cToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The fp16 kernels use F16C where the CPU has it and the portable code elsewhere; a cluster that
// mixes CPUs must still get identical bits, NaN payloads included.
TEST(ConversionF16c, PortableHalfMatchesF16cBitForBit) {
  if (!cpu::CpuSupports(cpu::KernelIsa::kAvx2F16c)) GTEST_SKIP() << "CPU has no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(Bits(HalfToFloat(static_cast<uint16_t>(h))),
              Bits(F16cToFloat(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    const float f = FromBits(static_cast<uint32_t>(u));
    ASSERT_EQ(FloatToHalf(f), F16cToHalf(f)) << std::hex << u;
  }
  // Every fp32 within a few ulps of each fp16 midpoint, where rounding decides.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = HalfToFloat(static_cast<uint16_t>(h));
    const float hi = h == 0x7bff ? 65536.0f : HalfToFloat(static_cast<uint16_t>(h + 1));
    const uint32_t mid = Bits((lo + hi) / 2);
    for (uint32_t d = mid - 3; d != mid + 4; ++d) {
      for (const uint32_t sign : {0u, 0x80000000u}) {
        ASSERT_EQ(FloatToHalf(FromBits(d | sign)), F16cToHalf(FromBits(d | sign))) << std::hex << d;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace braid
