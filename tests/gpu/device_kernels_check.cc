// Standalone GPU check of the device kernels (src/device/cuda), for machines that have nvcc and a
// GPU but not braid's other dependencies (GoogleTest, OpenSSL ...): tools/gpu-check builds it with
// nvcc alone. 1. The byte-for-byte comparison of device_cuda_test (device_cuda_compare.h): reduce
// for every type x op, scale and divide for every type, copy; against the CPU kernels.
// 2. Throughput on 256 MiB against a device-to-device cudaMemcpy of the same bytes in the same run
// (CUDA events; "traffic" counts every byte read and written once: a reduce moves 3x its buffer,
// memcpy 2x), so the ratio is the share of the copy's bandwidth reached.
// Exit status: 0 all equal, 1 a mismatch or CUDA error, 77 no GPU (skipped).
// Usage: device_kernels_check [--no-bandwidth]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "cuda_event_timer.h"
#include "device_cuda_compare.h"

namespace braid {
namespace {

using gpu_check::TimeMs;

void Throughput() {
  const size_t bytes = size_t{256} << 20;
  void *x = nullptr, *y = nullptr, *z = nullptr;
  cudaMalloc(&x, bytes);
  cudaMalloc(&y, bytes);
  cudaMalloc(&z, bytes);
  cudaMemset(x, 0x3c, bytes);  // finite values in every type
  cudaMemset(y, 0x3c, bytes);
  const int iters = 20;
  const float copy_ms =
      TimeMs([&] { cudaMemcpyAsync(z, x, bytes, cudaMemcpyDeviceToDevice); }, iters);
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("memcpy D2D %zu MiB: %.3f ms, traffic %.0f GB/s\n", bytes >> 20, copy_ms, copy_gbs);
  const float kcopy_ms = TimeMs([&] { (void)cuda::Copy(z, x, bytes, nullptr); }, iters);
  const double kcopy_gbs = 2.0 * bytes / (kcopy_ms * 1e-3) / 1e9;
  std::printf("copy kernel: %.3f ms, %.0f GB/s (%.2f of memcpy)\n", kcopy_ms, kcopy_gbs,
              kcopy_gbs / copy_gbs);
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16,
                     DataType::kFloat8e4m3, DataType::kInt32, DataType::kFloat64}) {
    const size_t n = bytes / DataTypeSize(t);
    const float r =
        TimeMs([&] { (void)cuda::Reduce(t, ReduceOp::kSum, x, y, z, n, nullptr); }, iters);
    const double gr = 3.0 * bytes / (r * 1e-3) / 1e9;
    const uint64_t two = 2;  // any scalar: the timing does not depend on it
    const float s =
        TimeMs([&] { (void)cuda::Scale(t, x, z, n, &two, cuda::ScalarAt::kHost, nullptr); }, iters);
    const double gs = 2.0 * bytes / (s * 1e-3) / 1e9;
    const float d = TimeMs([&] { (void)cuda::Divide(t, z, n, 3, nullptr); }, iters);
    const double gd = 2.0 * bytes / (d * 1e-3) / 1e9;
    std::printf(
        "%-8s sum %.3f ms %5.0f GB/s (%.2f of memcpy) | scale %.3f ms %5.0f GB/s (%.2f) | "
        "divide %.3f ms %5.0f GB/s (%.2f)\n",
        DataTypeName(t), r, gr, gr / copy_gbs, s, gs, gs / copy_gbs, d, gd, gd / copy_gbs);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("CUDA error during the timing: %s\n", cudaGetErrorName(e));
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  using namespace braid;
  const bool bandwidth = !(argc > 1 && std::strcmp(argv[1], "--no-bandwidth") == 0);
  std::string why;
  if (!cuda::DeviceAvailable(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d); CPU reference tier for fp16: %s\n", prop.name, prop.major,
              prop.minor, cpu::KernelIsaName(cpu::KernelIsaFor(DataType::kFloat16)));
  int failures = 0;
  const int cases = test::device_cuda::CompareAll([&](const std::string& what) {
    ++failures;
    std::printf("MISMATCH: %s\n", what.c_str());
  });
  std::printf("byte-for-byte: %d cases, %d failures\n", cases, failures);
  if (bandwidth) Throughput();
  return failures ? 1 : 0;
}
