// The comparison behind quant_cuda_test.cc and tests/gpu/quant_cuda_check.cc (which builds with
// nvcc alone, for GPU machines without braid's other dependencies): the CUDA block codecs
// against the CPU reference, byte for byte, for every format and type, over block sizes that make
// INT4 bytes straddle blocks and counts that end mid-block, on data with NaN, infinities, zeros of
// both signs, ties and subnormals. Needs the CUDA runtime and braid_device_cuda.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/block_codec.h"
#include "quant/block_format.h"
#include "quant/block_math.h"
#include "device/cuda/block_codec.h"

namespace braid::quant::cuda_check {

inline size_t TypeSize(DataType t) {
  return t == DataType::kFloat32 ? 4 : 2;
}

inline std::vector<uint8_t> MakeInput(DataType t, uint64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> out(n * TypeSize(t));
  float scale = 1.0f;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 29 == 0) scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    const unsigned p = rng() % 1000;
    float x = normal(rng) * scale;
    if (p < 20)
      x = static_cast<float>(static_cast<int>(rng() % 16) - 8) + 0.5f;  // ties at scale 1
    else if (p < 30)
      x = p < 25 ? 0.0f : -0.0f;
    else if (p < 35)
      x = 1e-41f * static_cast<float>(rng() % 9);  // subnormals
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

// A device buffer; CUDA errors are collected in *err (first one kept).
class DeviceBuffer {
 public:
  DeviceBuffer(const std::vector<uint8_t>& v, std::string* err) : bytes_(v.size()), err_(err) {
    Check(cudaMalloc(&p_, bytes_ ? bytes_ : 1), "cudaMalloc");
    Check(cudaMemcpy(p_, v.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  std::vector<uint8_t> Read() {
    std::vector<uint8_t> v(bytes_);
    Check(cudaDeviceSynchronize(), "kernel");
    Check(cudaMemcpy(v.data(), p_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }

 private:
  void Check(cudaError_t e, const char* what) {
    if (e != cudaSuccess && err_->empty())
      *err_ = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  }
  void* p_ = nullptr;
  size_t bytes_;
  std::string* err_;
};

// Runs every case; returns the number of cases run and reports each mismatch or error through
// `fail` (a description). Stops a case at its first failure.
inline int CompareAll(const std::function<void(const std::string&)>& fail) {
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
  struct Shape {
    uint32_t block;
    uint64_t n;
  };
  // 24, 1024 and 8192 reach the CUDA fast path's other branches: a lane group of two over three
  // chunks, lanes that read chunks again after the statistics, and a thread block that does.
  const Shape shapes[] = {{32, 1 << 20},  {1, 1001},    {3, 1001},    {17, 8195},
                          {4096, 100003}, {33, 7},      {32, 1},      {64, 65},
                          {24, 1001},     {1024, 5003}, {8192, 40001}};
  int cases = 0;
  for (int bits : {8, 4})
    for (bool sym : {true, false})
      for (DataType t : types)
        for (const Shape& sh : shapes)
          for (bool specials : {false, true}) {
            ++cases;
            const BlockFormat f{static_cast<uint8_t>(bits), sym, sh.block};
            const uint64_t n = sh.n;
            const std::string what = std::string(sym ? "sym" : "asym") + std::to_string(bits) +
                                     " G=" + std::to_string(sh.block) + " " + DataTypeName(t) +
                                     " n=" + std::to_string(n) + (specials ? " nan/inf" : "");
            const std::vector<uint8_t> in =
                MakeInput(t, n, static_cast<uint32_t>(sh.block * 7 + n), specials);
            std::vector<uint8_t> ref(EncodedBytes(f, n));
            if (!Quantize(f, t, in.data(), n, ref.data()).ok()) {
              fail("CPU quantize refused " + what);
              continue;
            }
            std::string err;
            DeviceBuffer din(in, &err);
            DeviceBuffer denc(std::vector<uint8_t>(ref.size(), 0x5a), &err);  // padding rewritten
            Status st = cuda::Quantize(f, t, din.get(), n, denc.get(), nullptr);
            if (!st.ok()) {
              fail("quantize " + what + ": " + st.message());
              continue;
            }
            if (denc.Read() != ref || !err.empty()) {
              fail("quantize " + what + ": GPU bytes differ from the CPU reference " + err);
              continue;
            }
            std::vector<uint8_t> dec(n * TypeSize(t));
            (void)Dequantize(f, t, ref.data(), n, dec.data());
            DeviceBuffer dout(std::vector<uint8_t>(dec.size(), 0x77), &err);
            st = cuda::Dequantize(f, t, denc.get(), n, dout.get(), nullptr);
            if (!st.ok() || dout.Read() != dec || !err.empty()) {
              fail("dequantize " + what + ": GPU output differs from the CPU reference " +
                   st.message() + err);
              continue;
            }
            // Finite accumulators: a NaN accumulator's result bits are the platform's.
            std::vector<uint8_t> acc = MakeInput(t, n, static_cast<uint32_t>(99 + n), false);
            DeviceBuffer dacc(acc, &err);
            (void)DequantizeReduce(f, t, ref.data(), n, acc.data());
            st = cuda::DequantizeReduce(f, t, denc.get(), n, dacc.get(), nullptr);
            if (!st.ok() || dacc.Read() != acc || !err.empty())
              fail("dequantize-reduce " + what + ": GPU output differs from the CPU reference " +
                   st.message() + err);
          }
  return cases;
}

}  // namespace braid::quant::cuda_check
