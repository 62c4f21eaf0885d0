// The GPU kernels (src/device/cuda) against the CPU kernels, byte for byte
// (device_cuda_compare.h). Skipped, saying why, when the kernels were not built (no nvcc) or no
// GPU is present. Without a GPU, device_element_math_test checks their arithmetic on the host.
#include <gtest/gtest.h>

#include <string>

#if BRAID_HAVE_DEVICE_CUDA
#include "device_cuda_compare.h"
#endif

namespace braid {
namespace {

#if BRAID_HAVE_DEVICE_CUDA

class DeviceCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::DeviceAvailable(&why)) GTEST_SKIP() << "CUDA device kernel test skipped: " << why;
  }
};

TEST_F(DeviceCuda, MatchesCpuKernelsByteForByte) {
  int failures = 0;
  const int cases = test::device_cuda::CompareAll([&](const std::string& what) {
    if (++failures <= 30) ADD_FAILURE() << what;
  });
  EXPECT_EQ(failures, 0);
  EXPECT_GT(cases, 3000);
}

TEST_F(DeviceCuda, RefusesUnknownTypesAndOps) {
  EXPECT_EQ(
      cuda::Reduce(static_cast<DataType>(99), ReduceOp::kSum, nullptr, nullptr, nullptr, 4, nullptr)
          .cls(),
      ErrorClass::kInvalidArgument);
  EXPECT_EQ(cuda::Reduce(DataType::kFloat32, static_cast<ReduceOp>(9), nullptr, nullptr, nullptr, 4,
                         nullptr)
                .cls(),
            ErrorClass::kInvalidArgument);
  EXPECT_TRUE(cuda::Divide(DataType::kFloat32, nullptr, 4, 1, nullptr).ok());  // a no-op
}

#else

TEST(DeviceCuda, MatchesCpuKernelsByteForByte) {
  GTEST_SKIP() << "CUDA device kernel test skipped: built without the CUDA kernels (no nvcc "
                  "found, or BRAID_CUDA_KERNELS=OFF; see the configure summary)";
}

#endif

}  // namespace
}  // namespace braid
