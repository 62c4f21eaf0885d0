// The vector tiers (AVX2, AVX-512) of the block codecs against the scalar reference, byte for
// byte: every format
// (INT8/INT4, symmetric/asymmetric), every type (fp32, fp16, bf16), block sizes below, at and
// around the 8- and 16-element vector widths (odd ones put INT4 blocks across byte boundaries)
// and counts that end mid-block and mid-vector. Data: Gaussian values with a magnitude per
// stretch (so blocks differ in scale), exact ties, zeros of both signs, subnormals, and in one
// variant NaNs and infinities. Also: fp16/bf16 inputs encode exactly as their fp32 widening, and
// dequantize-reduce equals a reference computed here from the fp32 decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/block_codec.h"
#include "quant/block_format.h"
#include "quant/block_math.h"

namespace braid::quant {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
constexpr uint32_t kBlocks[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 4096};
constexpr uint64_t kCounts[] = {1, 2, 7, 15, 16, 17, 33, 250, 1001, 8195};

size_t TypeSize(DataType t) {
  return t == DataType::kFloat32 ? 4 : 2;
}

// Values as fp32, then narrowed to the test type (the narrowed ones are what the codec sees).
std::vector<float> MakeValues(uint64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> x(n);
  float scale = 1.0f;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 13 == 0) scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    const int p = pick(rng);
    if (p < 3)
      x[i] = static_cast<float>(static_cast<int>(rng() % 16) - 8) + 0.5f;  // ties at scale 1
    else if (p < 5)
      x[i] = p == 3 ? 0.0f : -0.0f;
    else if (p < 6)
      x[i] = 1e-40f * static_cast<float>(rng() % 7);  // fp32 subnormals
    else if (specials && p < 8)
      x[i] = p == 6 ? std::numeric_limits<float>::quiet_NaN()
                    : (rng() & 1 ? 1 : -1) * std::numeric_limits<float>::infinity();
    else
      x[i] = normal(rng) * scale;
  }
  return x;
}

std::vector<uint8_t> Narrow(const std::vector<float>& x, DataType t) {
  std::vector<uint8_t> out(x.size() * TypeSize(t));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == DataType::kFloat32) {
      std::memcpy(&out[i * 4], &x[i], 4);
    } else {
      const uint16_t h = t == DataType::kFloat16 ? FloatToHalf(x[i]) : FloatToBf16(x[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<float> Widen(const std::vector<uint8_t>& b, DataType t) {
  const size_t n = b.size() / TypeSize(t);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DataType::kFloat32) {
      std::memcpy(&x[i], &b[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      x[i] = t == DataType::kFloat16 ? HalfToFloat(h) : Bf16ToFloat(h);
    }
  }
  return x;
}

std::string Name(const BlockFormat& f, DataType t, uint64_t n) {
  return std::string(f.symmetric ? "sym" : "asym") + std::to_string(f.bits) +
         " G=" + std::to_string(f.block) + " " + DataTypeName(t) + " n=" + std::to_string(n);
}

void CompareTier(Isa isa, bool specials) {
  int cases = 0;
  for (int bits : {8, 4})
    for (bool sym : {true, false})
      for (uint32_t g : kBlocks)
        for (DataType t : kTypes)
          for (uint64_t n : kCounts) {
            const BlockFormat f{static_cast<uint8_t>(bits), sym, g};
            const std::string what = Name(f, t, n);
            const std::vector<uint8_t> in =
                Narrow(MakeValues(n, static_cast<uint32_t>(n * 131 + g), specials), t);
            const uint64_t eb = EncodedBytes(f, n);
            std::vector<uint8_t> ref(eb, 0x11), got(eb, 0x22);
            ASSERT_TRUE(QuantizeWithIsa(Isa::kScalar, f, t, in.data(), n, ref.data()).ok());
            ASSERT_TRUE(QuantizeWithIsa(isa, f, t, in.data(), n, got.data()).ok());
            ASSERT_EQ(ref, got) << "quantize " << what;

            std::vector<uint8_t> dref(n * TypeSize(t), 0x33), dgot(n * TypeSize(t), 0x44);
            ASSERT_TRUE(DequantizeWithIsa(Isa::kScalar, f, t, ref.data(), n, dref.data()).ok());
            ASSERT_TRUE(DequantizeWithIsa(isa, f, t, ref.data(), n, dgot.data()).ok());
            ASSERT_EQ(dref, dgot) << "dequantize " << what;

            // Accumulators: finite values (a NaN accumulator's bits are the platform's).
            const std::vector<uint8_t> acc = Narrow(MakeValues(n, 7 + g, false), t);
            std::vector<uint8_t> rref = acc, rgot = acc;
            ASSERT_TRUE(
                DequantizeReduceWithIsa(Isa::kScalar, f, t, ref.data(), n, rref.data()).ok());
            ASSERT_TRUE(DequantizeReduceWithIsa(isa, f, t, ref.data(), n, rgot.data()).ok());
            ASSERT_EQ(rref, rgot) << "dequantize-reduce " << what;
            ++cases;
          }
  EXPECT_GT(cases, 0);
}

TEST(QuantTiers, Avx2MatchesScalarReference) {
  if (!CpuSupports(Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C: nothing to compare";
  CompareTier(Isa::kAvx2, false);
}

TEST(QuantTiers, Avx2MatchesScalarReferenceWithNaNAndInf) {
  if (!CpuSupports(Isa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C: nothing to compare";
  CompareTier(Isa::kAvx2, true);
}

TEST(QuantTiers, Avx512MatchesScalarReference) {
  if (!CpuSupports(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F: nothing to compare";
  CompareTier(Isa::kAvx512, false);
}

TEST(QuantTiers, Avx512MatchesScalarReferenceWithNaNAndInf) {
  if (!CpuSupports(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F: nothing to compare";
  CompareTier(Isa::kAvx512, true);
}

// The encoding does not depend on the input type: fp16 and bf16 data encode exactly as their
// (exact) fp32 widening does.
TEST(QuantTiers, NarrowInputsEncodeAsTheirWidening) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    for (DataType t : {DataType::kFloat16, DataType::kBfloat16})
      for (const BlockFormat& f : {BlockFormat{8, true, 32}, BlockFormat{4, false, 17}}) {
        const uint64_t n = 1001;
        const std::vector<uint8_t> in = Narrow(MakeValues(n, 5, true), t);
        const std::vector<float> wide = Widen(in, t);
        std::vector<uint8_t> a(EncodedBytes(f, n)), b(EncodedBytes(f, n));
        ASSERT_TRUE(QuantizeWithIsa(isa, f, t, in.data(), n, a.data()).ok());
        ASSERT_TRUE(QuantizeWithIsa(isa, f, DataType::kFloat32, wide.data(), n, b.data()).ok());
        EXPECT_EQ(a, b) << Name(f, t, n) << " " << IsaName(isa);
      }
}

// dst + decode(src), summed in fp32 and rounded once, computed here from the fp32 decode.
TEST(QuantTiers, DequantizeReduceAddsTheFp32DecodeAndRoundsOnce) {
  const uint64_t n = 777;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    for (DataType t : kTypes)
      for (const BlockFormat& f : {BlockFormat{8, true, 32}, BlockFormat{4, true, 5},
                                   BlockFormat{8, false, 64}, BlockFormat{4, false, 32}}) {
        const std::vector<uint8_t> in = Narrow(MakeValues(n, 9, false), t);
        std::vector<uint8_t> enc(EncodedBytes(f, n));
        ASSERT_TRUE(QuantizeWithIsa(isa, f, t, in.data(), n, enc.data()).ok());
        std::vector<float> dec(n);
        ASSERT_TRUE(
            DequantizeWithIsa(Isa::kScalar, f, DataType::kFloat32, enc.data(), n, dec.data()).ok());
        const std::vector<uint8_t> acc = Narrow(MakeValues(n, 10, false), t);
        const std::vector<float> accf = Widen(acc, t);
        std::vector<float> sum(n);
        for (uint64_t i = 0; i < n; ++i) sum[i] = accf[i] + dec[i];
        std::vector<uint8_t> got = acc;
        ASSERT_TRUE(DequantizeReduceWithIsa(isa, f, t, enc.data(), n, got.data()).ok());
        EXPECT_EQ(got, Narrow(sum, t)) << Name(f, t, n) << " " << IsaName(isa);
      }
}

// Misaligned buffers: the kernels take any byte address.
TEST(QuantTiers, UnalignedBuffers) {
  const BlockFormat f{4, true, 32};
  const uint64_t n = 333;
  const std::vector<uint8_t> in = Narrow(MakeValues(n, 3, false), DataType::kFloat32);
  std::vector<uint8_t> src(in.size() + 3), ref(EncodedBytes(f, n)), enc(EncodedBytes(f, n) + 1);
  std::memcpy(src.data() + 3, in.data(), in.size());
  ASSERT_TRUE(QuantizeWithIsa(Isa::kScalar, f, DataType::kFloat32, in.data(), n, ref.data()).ok());
  ASSERT_TRUE(Quantize(f, DataType::kFloat32, src.data() + 3, n, enc.data() + 1).ok());
  EXPECT_EQ(0, std::memcmp(ref.data(), enc.data() + 1, ref.size()));
  std::vector<uint8_t> out(n * 4 + 1), out_ref(n * 4);
  ASSERT_TRUE(Dequantize(f, DataType::kFloat32, enc.data() + 1, n, out.data() + 1).ok());
  ASSERT_TRUE(
      DequantizeWithIsa(Isa::kScalar, f, DataType::kFloat32, ref.data(), n, out_ref.data()).ok());
  EXPECT_EQ(0, std::memcmp(out_ref.data(), out.data() + 1, out_ref.size()));
}

}  // namespace
}  // namespace braid::quant
