// The engine's codec kernels (algorithms/codec_kernels.h) on the block codecs: they must produce
// exactly src/quant's bytes and values (the engine and the codec tests then agree), a sum
// dequantize-reduce is the fused fp32 one, another op decodes and reduces, and a codec without
// a valid block size or a non-float type is refused with a message naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "algorithms/codec.h"
#include "algorithms/codec_kernels.h"
#include "quant/block_codec.h"

namespace braid {
namespace {

std::vector<float> Gaussian(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

TEST(AlgorithmsCodecKernels, BlockCodecsAreSrcQuant) {
  const size_t n = 1000;
  const std::vector<float> x = Gaussian(n, 1), acc = Gaussian(n, 2);
  for (const Codec& codec : {Codec{CodecId::kInt8, 32}, Codec{CodecId::kInt4, 17},
                             Codec{CodecId::kInt8Asym, 64}, Codec{CodecId::kInt4Asym, 32}}) {
    const quant::BlockFormat f = *BlockFormatOf(codec);
    const uint64_t eb = EncodedBytes(codec, DataType::kFloat32, n);
    ASSERT_EQ(eb, quant::EncodedBytes(f, n));
    std::vector<uint8_t> enc(eb), ref(eb);
    ASSERT_TRUE(EncodeKernel(codec, DataType::kFloat32, x.data(), n, enc.data()).ok());
    ASSERT_TRUE(quant::Quantize(f, DataType::kFloat32, x.data(), n, ref.data()).ok());
    EXPECT_EQ(enc, ref) << CodecName(codec);

    std::vector<float> dec(n), dec_ref(n);
    ASSERT_TRUE(DecodeKernel(codec, DataType::kFloat32, enc.data(), n, dec.data()).ok());
    ASSERT_TRUE(quant::Dequantize(f, DataType::kFloat32, enc.data(), n, dec_ref.data()).ok());
    EXPECT_EQ(dec, dec_ref);

    std::vector<float> sum = acc, scratch(n), max = acc;
    ASSERT_TRUE(DecodeReduceKernel(codec, DataType::kFloat32, ReduceOp::kSum, enc.data(), n,
                                   sum.data(), scratch.data())
                    .ok());
    ASSERT_TRUE(DecodeReduceKernel(codec, DataType::kFloat32, ReduceOp::kMax, enc.data(), n,
                                   max.data(), scratch.data())
                    .ok());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(sum[i], acc[i] + dec_ref[i]) << i;
      EXPECT_EQ(max[i], std::max(acc[i], dec_ref[i])) << i;
    }
  }
}

TEST(AlgorithmsCodecKernels, RefusesInvalidBlockCodecs) {
  float x[4] = {1, 2, 3, 4};
  uint8_t enc[64];
  const Status no_block = EncodeKernel(Codec{CodecId::kInt8, 0}, DataType::kFloat32, x, 4, enc);
  EXPECT_EQ(no_block.cls(), ErrorClass::kInvalidArgument);
  EXPECT_NE(no_block.message().find("int8"), std::string::npos) << no_block.message();
  EXPECT_EQ(EncodeKernel(Codec{CodecId::kInt4, 32}, DataType::kInt32, x, 4, enc).cls(),
            ErrorClass::kInvalidArgument);
}

}  // namespace
}  // namespace braid
