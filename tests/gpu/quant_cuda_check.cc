// Standalone GPU check of the CUDA block codecs, for machines that have nvcc and a GPU but not
// braid's other dependencies (GoogleTest, OpenSSL ...): tools/quant-cuda-check builds it with
// nvcc alone. 1. The byte-for-byte comparison of quant_cuda_test (quant_cuda_compare.h).
// 2. Throughput on 256 MiB of fp32, bf16 and fp16 against a device-to-device cudaMemcpy of the same
// bytes in the same run, timed with CUDA events: "traffic" counts every byte the kernels must
// read and write at least once (typed side + encoded side, + the accumulator for a reduce),
// memcpy's counts read + write; the ratio is the share of the copy's bandwidth reached.
// Exit status: 0 all equal, 1 a mismatch or CUDA error, 77 no GPU (skipped).
#include <cstdio>
#include <string>
#include <vector>

#include "cuda_event_timer.h"
#include "quant_cuda_compare.h"

namespace braid::quant {
namespace {

using gpu_check::TimeMs;

void Throughput() {
  const uint64_t bytes = 256ull << 20;
  void *typed = nullptr, *copy = nullptr, *enc = nullptr;
  cudaMalloc(&typed, bytes);
  cudaMalloc(&copy, bytes);
  cudaMalloc(&enc, bytes);         // >= any encoding of these elements
  cudaMemset(typed, 0x3c, bytes);  // finite values in all three types
  const int iters = 20;
  const float copy_ms =
      TimeMs([&] { cudaMemcpyAsync(copy, typed, bytes, cudaMemcpyDeviceToDevice); }, iters);
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
  std::printf("memcpy D2D %llu MiB: %.3f ms, traffic %.0f GB/s\n",
              static_cast<unsigned long long>(bytes >> 20), copy_ms, copy_gbs);
  struct Codec {
    const char* name;
    BlockFormat f;
  };
  const Codec codecs[] = {
      {"int8-G32", {8, true, 32}},          {"int4-G32", {4, true, 32}},
      {"int8asym-G32", {8, false, 32}},     {"int4asym-G32", {4, false, 32}},
      {"int8-G4096", {8, true, 4096}},      {"int4-G4096", {4, true, 4096}},
      {"int8asym-G4096", {8, false, 4096}}, {"int4asym-G4096", {4, false, 4096}}};
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16})
    for (const Codec& c : codecs) {
      const uint64_t n = bytes / cuda_check::TypeSize(t);
      const double eb = static_cast<double>(EncodedBytes(c.f, n));
      const float q = TimeMs([&] { (void)cuda::Quantize(c.f, t, typed, n, enc, nullptr); }, iters);
      const float d = TimeMs([&] { (void)cuda::Dequantize(c.f, t, enc, n, copy, nullptr); }, iters);
      const float r =
          TimeMs([&] { (void)cuda::DequantizeReduce(c.f, t, enc, n, copy, nullptr); }, iters);
      const double gq = (bytes + eb) / (q * 1e-3) / 1e9, gd = (bytes + eb) / (d * 1e-3) / 1e9,
                   gr = (2.0 * bytes + eb) / (r * 1e-3) / 1e9;
      std::printf(
          "%-15s %-8s quantize %.3f ms %5.0f GB/s (%.2f of memcpy) | dequantize %.3f ms %5.0f "
          "GB/s (%.2f) | dequantize-reduce %.3f ms %5.0f GB/s (%.2f)\n",
          c.name, DataTypeName(t), q, gq, gq / copy_gbs, d, gd, gd / copy_gbs, r, gr,
          gr / copy_gbs);
    }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) std::printf("CUDA error during the timing: %s\n", cudaGetErrorName(e));
  cudaFree(typed);
  cudaFree(copy);
  cudaFree(enc);
}

}  // namespace
}  // namespace braid::quant

int main() {
  using namespace braid::quant;
  std::string why;
  if (!cuda::DeviceAvailable(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  int failures = 0;
  const int cases = cuda_check::CompareAll([&](const std::string& what) {
    ++failures;
    std::printf("MISMATCH: %s\n", what.c_str());
  });
  std::printf("byte-for-byte: %d cases, %d failures\n", cases, failures);
  Throughput();
  return failures ? 1 : 0;
}
