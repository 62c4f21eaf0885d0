// The CUDA block codecs (src/quant/cuda) against the CPU reference, byte for byte: encodings,
// decodes and decode-reduces for every format and type, over block sizes that make INT4 bytes
// straddle blocks and counts that end mid-block, on data with NaN, infinities, zeros of both
// signs, ties and subnormals. Skipped, saying why, when the kernels were not built (no nvcc) or
// no GPU is present.
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

#if BRAID_HAVE_QUANT_CUDA
#include <cuda_runtime.h>

#include "quant/cuda/block_codec_cuda.h"
#endif

namespace braid::quant {
namespace {

#if BRAID_HAVE_QUANT_CUDA

size_t TypeSize(DataType t) {
  return t == DataType::kFloat32 ? 4 : 2;
}

std::vector<uint8_t> MakeInput(DataType t, uint64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> out(n * TypeSize(t));
  float scale = 1.0f;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 29 == 0) scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    const unsigned p = rng() % 1000;
    float x = normal(rng) * scale;
    if (p < 20)
      x = static_cast<float>(static_cast<int>(rng() % 16) - 8) + 0.5f;
    else if (p < 30)
      x = p < 25 ? 0.0f : -0.0f;
    else if (p < 35)
      x = 1e-41f * static_cast<float>(rng() % 9);
    else if (specials && p < 37)
      x = std::numeric_limits<float>::quiet_NaN();
    else if (specials && p < 39)
      x = (p & 1 ? 1 : -1) * std::numeric_limits<float>::infinity();
    if (t == DataType::kFloat32) {
      std::memcpy(&out[i * 4], &x, 4);
    } else {
      const uint16_t h = t == DataType::kFloat16 ? FloatToHalf(x) : FloatToBf16(x);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

// A device buffer holding a host vector's bytes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes ? bytes : 1), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& v) : DeviceBuffer(v.size()) {
    EXPECT_EQ(cudaMemcpy(p_, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> v(bytes_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

class QuantCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::DeviceAvailable(&why)) GTEST_SKIP() << "CUDA codec test skipped: " << why;
  }
};

TEST_F(QuantCuda, MatchesCpuReferenceByteForByte) {
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
  struct Shape {
    uint32_t block;
    uint64_t n;
  };
  const Shape shapes[] = {{32, 1 << 20},  {1, 1001}, {3, 1001}, {17, 8195},
                          {4096, 100003}, {33, 7},   {32, 1},   {64, 65}};
  int cases = 0;
  for (int bits : {8, 4})
    for (bool sym : {true, false})
      for (DataType t : types)
        for (const Shape& sh : shapes)
          for (bool specials : {false, true}) {
            const BlockFormat f{static_cast<uint8_t>(bits), sym, sh.block};
            const uint64_t n = sh.n;
            const std::string what = std::string(sym ? "sym" : "asym") + std::to_string(bits) +
                                     " G=" + std::to_string(sh.block) + " " + DataTypeName(t) +
                                     " n=" + std::to_string(n) + (specials ? " nan/inf" : "");
            const std::vector<uint8_t> in = MakeInput(t, n, sh.block * 7 + n, specials);
            std::vector<uint8_t> ref(EncodedBytes(f, n));
            ASSERT_TRUE(Quantize(f, t, in.data(), n, ref.data()).ok());

            DeviceBuffer din(in);
            DeviceBuffer denc(std::vector<uint8_t>(ref.size(), 0x5a));  // padding must be written
            ASSERT_TRUE(cuda::Quantize(f, t, din.get(), n, denc.get(), nullptr).ok());
            ASSERT_EQ(denc.Read(), ref) << "quantize " << what;

            std::vector<uint8_t> dec(n * TypeSize(t));
            ASSERT_TRUE(Dequantize(f, t, ref.data(), n, dec.data()).ok());
            DeviceBuffer dout(std::vector<uint8_t>(dec.size(), 0x77));
            ASSERT_TRUE(cuda::Dequantize(f, t, denc.get(), n, dout.get(), nullptr).ok());
            ASSERT_EQ(dout.Read(), dec) << "dequantize " << what;

            // Finite accumulators: a NaN accumulator's result bits are the platform's.
            std::vector<uint8_t> acc = MakeInput(t, n, 99 + n, false);
            DeviceBuffer dacc(acc);
            ASSERT_TRUE(DequantizeReduce(f, t, ref.data(), n, acc.data()).ok());
            ASSERT_TRUE(cuda::DequantizeReduce(f, t, denc.get(), n, dacc.get(), nullptr).ok());
            ASSERT_EQ(dacc.Read(), acc) << "dequantize-reduce " << what;
            ++cases;
          }
  EXPECT_EQ(cases, 2 * 2 * 3 * 8 * 2);
}

TEST_F(QuantCuda, RefusesWhatTheCpuRefuses) {
  EXPECT_EQ(cuda::Quantize({5, true, 32}, DataType::kFloat32, nullptr, 4, nullptr, nullptr).cls(),
            ErrorClass::kInvalidArgument);
  EXPECT_EQ(cuda::Dequantize({8, true, 32}, DataType::kInt32, nullptr, 4, nullptr, nullptr).cls(),
            ErrorClass::kInvalidArgument);
}

#else

TEST(QuantCuda, MatchesCpuReferenceByteForByte) {
  GTEST_SKIP() << "CUDA codec test skipped: built without the CUDA kernels (no nvcc found, or "
                  "BRAID_CUDA_KERNELS=OFF; see the configure summary)";
}

#endif

}  // namespace
}  // namespace braid::quant
