// The CUDA block codecs (src/device/cuda/block_codec.cu) against the CPU reference, byte for byte
// (quant_cuda_compare.h). Skipped, saying why, when the kernels were not built (no nvcc) or no
// GPU is present.
#include <gtest/gtest.h>

#include <string>

#if BRAID_HAVE_QUANT_CUDA
#include "quant_cuda_compare.h"
#endif

namespace braid::quant {
namespace {

#if BRAID_HAVE_QUANT_CUDA

class QuantCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::DeviceAvailable(&why)) GTEST_SKIP() << "CUDA codec test skipped: " << why;
  }
};

TEST_F(QuantCuda, MatchesCpuReferenceByteForByte) {
  const int cases = cuda_check::CompareAll([](const std::string& what) { ADD_FAILURE() << what; });
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
