// The block codecs' format pinned against hand-computed vectors (spec/algorithms.md section 3):
// INT4 packing ((-2, 3) -> 0xE3), +absmax clipping to 2^(b-1) - 1, round-half-even ties, zero
// blocks, a short last block, the asymmetric variant, the layout of block_format.h (parameters,
// zero padding to 16 bytes, codes), non-finite inputs, and the error figures on Gaussian data.
// Every case runs on each CPU tier this machine supports, so each tier is pinned on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/block_codec.h"
#include "quant/block_format.h"
#include "quant/block_math.h"

namespace braid::quant {
namespace {

std::vector<Isa> Tiers() {
  std::vector<Isa> t{Isa::kScalar};
  if (CpuSupports(Isa::kAvx2)) t.push_back(Isa::kAvx2);
  if (CpuSupports(Isa::kAvx512)) t.push_back(Isa::kAvx512);
  return t;
}

std::vector<uint8_t> FloatBytes(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

std::vector<uint8_t> Encode(Isa isa, const BlockFormat& f, const std::vector<float>& x) {
  std::vector<uint8_t> enc(EncodedBytes(f, x.size()), 0xAA);  // 0xAA: padding must be rewritten
  EXPECT_TRUE(QuantizeWithIsa(isa, f, DataType::kFloat32, x.data(), x.size(), enc.data()).ok());
  return enc;
}

std::vector<float> Decode(Isa isa, const BlockFormat& f, const std::vector<uint8_t>& enc,
                          size_t n) {
  std::vector<float> y(n, -1.0f);
  EXPECT_TRUE(DequantizeWithIsa(isa, f, DataType::kFloat32, enc.data(), n, y.data()).ok());
  return y;
}

// The expected encoding: parameters, zeros to 16, codes, zeros to 16.
std::vector<uint8_t> Layout(const std::vector<uint8_t>& params, const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> e = params;
  e.resize(AlignUp(e.size()), 0);
  e.insert(e.end(), codes.begin(), codes.end());
  e.resize(AlignUp(e.size()), 0);
  return e;
}

TEST(QuantFormat, EncodedBytesFollowsTheLayout) {
  EXPECT_EQ(EncodedBytes({8, true, 32}, 0), 0u);
  EXPECT_EQ(EncodedBytes({8, true, 32}, 1), 32u);         // 4 B scale -> 16, 1 B code -> 32
  EXPECT_EQ(EncodedBytes({8, true, 32}, 64), 16u + 64u);  // 2 scales (8 B -> 16) + 64 codes
  EXPECT_EQ(EncodedBytes({4, true, 32}, 64), 16u + 32u);
  EXPECT_EQ(EncodedBytes({4, true, 32}, 65), 16u + 48u);   // 3 scales, 33 code bytes -> 64
  EXPECT_EQ(EncodedBytes({8, false, 32}, 64), 16u + 64u);  // 2 x (d, m) = 16 B
  EXPECT_EQ(EncodedBytes({8, false, 32}, 96), 32u + 96u);  // 24 B -> 32
  EXPECT_EQ(CodesOffset({4, true, 4096}, 1 << 20), 1024u);
}

TEST(QuantFormat, Int4PacksHighNibbleFirst) {
  // absmax 8 -> d = 8 / 2^3 = 1: codes are the values, 8 clipped to 7.
  const BlockFormat f{4, true, 4};
  const std::vector<float> x{-2, 3, 8, 0};
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, x), Layout(FloatBytes({1.0f}), {0xE3, 0x70})) << IsaName(isa);
    EXPECT_EQ(Decode(isa, f, Encode(isa, f, x), 4), (std::vector<float>{-2, 3, 7, 0}));
  }
}

TEST(QuantFormat, Int8ClipsPositiveAbsmaxAndRoundsHalfToEven) {
  // absmax 128 -> d = 1. +128 clips to 127, -128 is representable; ties go to even.
  const BlockFormat f{8, true, 16};
  const std::vector<float> x{128, -128, 1.5f,   2.5f,   -0.5f, 0.5f,   -1.5f,   -2.5f,
                             0,   3.5f, 100.5f, -99.5f, 0.49f, 126.5f, -127.5f, 7};
  const std::vector<uint8_t> codes{127, 0x80, 2,   2,    0, 0,   0xFE, 0xFE,
                                   0,   4,    100, 0x9C, 0, 126, 0x80, 7};
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, x), Layout(FloatBytes({1.0f}), codes)) << IsaName(isa);
  }
}

TEST(QuantFormat, ZeroBlockHasScaleOne) {
  const BlockFormat f{8, true, 8};
  const std::vector<float> x(8, 0.0f);
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, x), Layout(FloatBytes({1.0f}), std::vector<uint8_t>(8, 0)));
    EXPECT_EQ(Decode(isa, f, Encode(isa, f, x), 8), x);
  }
}

TEST(QuantFormat, UnderflowingScaleIsOne) {
  // absmax 2^-143: d = 2^-150 rounds to 0, so d = 1 and the block decodes to zeros. absmax 2^-142
  // still gives d = 2^-149 (the smallest subnormal): codes +-127/128 -> 127, -128.
  const BlockFormat f{8, true, 2};
  const float tiny = std::ldexp(1.0f, -143), small = std::ldexp(1.0f, -142);
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, {tiny, -tiny}), Layout(FloatBytes({1.0f}), {0, 0})) << IsaName(isa);
    EXPECT_EQ(Encode(isa, f, {small, -small}),
              Layout(FloatBytes({std::ldexp(1.0f, -149)}), {127, 0x80}))
        << IsaName(isa);
  }
}

TEST(QuantFormat, ShortLastBlockHasItsOwnScale) {
  // Block 0: absmax 4, d = 4/128; block 1 (one element): absmax 6, d = 6/128.
  const BlockFormat f{8, true, 4};
  const std::vector<float> x{1, 2, 3, 4, -6};
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, x),
              Layout(FloatBytes({4.0f / 128, 6.0f / 128}), {32, 64, 96, 127, 0x80}))
        << IsaName(isa);
    EXPECT_EQ(Decode(isa, f, Encode(isa, f, x), 5),
              (std::vector<float>{1, 2, 3, 127 * (4.0f / 128), -6}));
  }
}

TEST(QuantFormat, Int4OddBlockSharesBytesAcrossBlocks) {
  // G = 3: element 3 (block 1's first) is the low nibble of byte 1. Block 0 absmax 8 (d = 1),
  // block 1 absmax 4 (d = 0.5), block 2 (element 6 alone) absmax 1 (d = 0.125, 1/d = 8 -> 7).
  const BlockFormat f{4, true, 3};
  const std::vector<float> x{-1, 8, 2, -4, 1, 0.5f, 1};
  for (Isa isa : Tiers())
    EXPECT_EQ(Encode(isa, f, x), Layout(FloatBytes({1.0f, 0.5f, 0.125f}), {0xF7, 0x28, 0x21, 0x70}))
        << IsaName(isa);
}

TEST(QuantFormat, AsymmetricStoresScaleThenMin) {
  // min 1, max 16: d = 15 / 15 = 1, m = 1; codes x - 1.
  const BlockFormat f4{4, false, 4};
  const std::vector<float> x{1, 2, 3, 16};
  // INT8: d = 15 / 255; (x - 1) / d = 0, 17, 34, 255.
  const BlockFormat f8{8, false, 4};
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f4, x), Layout(FloatBytes({1.0f, 1.0f}), {0x01, 0x2F})) << IsaName(isa);
    EXPECT_EQ(Decode(isa, f4, Encode(isa, f4, x), 4), x);
    EXPECT_EQ(Encode(isa, f8, x), Layout(FloatBytes({15.0f / 255, 1.0f}), {0, 17, 34, 255}));
  }
}

TEST(QuantFormat, AsymmetricConstantBlockIsExact) {
  // max == min: d = 1, every code 0, decodes to min exactly; -0 is stored as +0.
  const BlockFormat f{8, false, 4};
  for (Isa isa : Tiers()) {
    EXPECT_EQ(Encode(isa, f, {-3.25f, -3.25f, -3.25f, -3.25f}),
              Layout(FloatBytes({1.0f, -3.25f}), {0, 0, 0, 0}));
    EXPECT_EQ(Encode(isa, f, {-0.0f, 0.0f, -0.0f, 0.0f}),
              Layout(FloatBytes({1.0f, 0.0f}), {0, 0, 0, 0}));
  }
}

TEST(QuantFormat, NonFiniteInputPoisonsItsBlockOnly) {
  // Blocks of 4: a NaN in block 0, +inf in block 1, block 2 finite. Poisoned blocks store the
  // canonical NaN as parameters, codes 0, and decode to the canonical NaN of the output type.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{1, nan, 2, 3, 4, inf, 5, 6, 1, -2, 0.5f, 8};
  for (const BlockFormat& f : {BlockFormat{8, true, 4}, BlockFormat{4, true, 4},
                               BlockFormat{8, false, 4}, BlockFormat{4, false, 4}}) {
    for (Isa isa : Tiers()) {
      const std::vector<uint8_t> enc = Encode(isa, f, x);
      for (uint64_t b = 0; b < 2; ++b)
        for (uint64_t p = 0; p < ParamBytes(f) / 4; ++p) {
          uint32_t bits;
          std::memcpy(&bits, enc.data() + b * ParamBytes(f) + p * 4, 4);
          EXPECT_EQ(bits, kNanBitsF32);
        }
      const uint8_t* codes = enc.data() + CodesOffset(f, x.size());
      for (size_t i = 0; i < CodesBytes(f, 8); ++i) EXPECT_EQ(codes[i], 0) << i;
      const std::vector<float> y = Decode(isa, f, enc, x.size());
      for (size_t i = 0; i < 8; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &y[i], 4);
        EXPECT_EQ(bits, kNanBitsF32) << i;
      }
      for (size_t i = 8; i < 12; ++i) EXPECT_TRUE(std::isfinite(y[i])) << i;
      // fp16 and bf16 outputs, and a reduce into finite accumulators, give canonical NaNs too.
      std::vector<uint16_t> h(12, 0x3c00);
      ASSERT_TRUE(
          DequantizeReduceWithIsa(isa, f, DataType::kFloat16, enc.data(), 12, h.data()).ok());
      EXPECT_EQ(h[0], kNanBitsF16);
      EXPECT_EQ(h[7], kNanBitsF16);
      std::vector<uint16_t> bf(12);
      ASSERT_TRUE(DequantizeWithIsa(isa, f, DataType::kBfloat16, enc.data(), 12, bf.data()).ok());
      EXPECT_EQ(bf[5], kNanBitsBf16);
    }
  }
}

TEST(QuantFormat, AsymmetricRangeOverflowPoisons) {
  // max - min overflows fp32: the block cannot be represented with a finite scale.
  const BlockFormat f{8, false, 2};
  const std::vector<float> x{-3e38f, 3e38f};
  for (Isa isa : Tiers()) {
    const std::vector<uint8_t> enc = Encode(isa, f, x);
    uint32_t bits;
    std::memcpy(&bits, enc.data(), 4);
    EXPECT_EQ(bits, kNanBitsF32);
  }
}

TEST(QuantFormat, InvalidFormatsAndTypesAreRefused) {
  float x[4] = {};
  uint8_t enc[64];
  EXPECT_EQ(Quantize({5, true, 32}, DataType::kFloat32, x, 4, enc).cls(),
            ErrorClass::kInvalidArgument);
  EXPECT_EQ(Quantize({8, true, 0}, DataType::kFloat32, x, 4, enc).cls(),
            ErrorClass::kInvalidArgument);
  EXPECT_EQ(Quantize({8, true, 32}, DataType::kInt32, x, 4, enc).cls(),
            ErrorClass::kInvalidArgument);
  EXPECT_EQ(Dequantize({8, true, 32}, DataType::kFloat64, enc, 4, x).cls(),
            ErrorClass::kInvalidArgument);
}

// Relative L2 error of a round trip on N(0, 1) data with G = 32. The spec quotes about 0.008
// (INT8) and 0.13 (INT4); issue 12 bounds them at 0.0085 and 0.135. The lower bounds catch a codec
// that silently keeps more bits than it claims.
double RoundTripError(const BlockFormat& f) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(1 << 18);
  for (float& v : x) v = normal(rng);
  const std::vector<float> y = Decode(BestIsa(), f, Encode(BestIsa(), f, x), x.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantFormat, GaussianRoundTripErrorWithBlocksOf32) {
  const double e8 = RoundTripError({8, true, 32}), e4 = RoundTripError({4, true, 32});
  const double a8 = RoundTripError({8, false, 32}), a4 = RoundTripError({4, false, 32});
  RecordProperty("int8", std::to_string(e8));
  RecordProperty("int4", std::to_string(e4));
  std::printf("relative L2, G = 32: int8 %.5f int4 %.5f int8-asym %.5f int4-asym %.5f\n", e8, e4,
              a8, a4);
  EXPECT_LE(e8, 0.0085);
  EXPECT_GE(e8, 0.002);
  EXPECT_LE(e4, 0.135);
  EXPECT_GE(e4, 0.04);
  EXPECT_LE(a8, 0.0085);
  EXPECT_LE(a4, 0.135);
}

}  // namespace
}  // namespace braid::quant
