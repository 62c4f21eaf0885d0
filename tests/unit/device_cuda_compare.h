// The comparison behind device_cuda_test.cc and tests/gpu/device_kernels_check.cc (which builds
// with nvcc alone, for GPU machines without braid's other dependencies): the GPU kernels of
// src/device/cuda against the CPU kernels (the tier ReduceKernel and friends pick on this CPU),
// byte for byte, on every case of device_kernel_cases.h. Needs the CUDA runtime and
// braid_device_cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device/cpu/kernel_isa.h"
#include "device/cuda/kernels.h"
#include "device_kernel_cases.h"

namespace braid::test::device_cuda {

// Runs one case on the GPU: the operands copied to device buffers at c.offset elements past a
// 256-byte aligned start, the kernel on a stream of its own, the result copied back. "" or an
// error message.
inline std::string RunOnGpu(const KernelCase& c, std::vector<uint8_t>* result) {
  const size_t es = c.kind == KernelKind::kCopy ? 1 : ElementSize(c.type);
  const size_t at = c.offset * es, bytes = c.n * es, total = at + bytes;
  std::string err;
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && err.empty())
      err = std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  };
  uint8_t *a = nullptr, *b = nullptr, *d = nullptr, *s = nullptr;
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaMalloc(&a, total), "cudaMalloc");
  check(cudaMalloc(&b, total), "cudaMalloc");
  check(cudaMalloc(&d, total), "cudaMalloc");
  check(cudaMalloc(&s, 16), "cudaMalloc");
  if (err.empty()) {
    // Poison the destination, so that an element the kernel skips shows.
    check(cudaMemset(d, 0xa5, total), "cudaMemset");
    check(cudaMemcpy(a + at, c.a.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    if (!c.b.empty())
      check(cudaMemcpy(b + at, c.b.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    if (!c.scalar.empty())
      check(cudaMemcpy(s, c.scalar.data(), c.scalar.size(), cudaMemcpyHostToDevice),
            "cudaMemcpy H2D");
  }
  uint8_t* out = c.in_place ? a + at : d + at;
  if (err.empty()) {
    Status st;
    switch (c.kind) {
      case KernelKind::kReduce:
        st = cuda::Reduce(c.type, c.op, a + at, b + at, out, c.n, stream);
        break;
      case KernelKind::kScale:
        st = cuda::Scale(c.type, a + at, out, c.n,
                         c.scalar_on_device ? static_cast<const void*>(s) : c.scalar.data(),
                         c.scalar_on_device ? cuda::ScalarAt::kDevice : cuda::ScalarAt::kHost,
                         stream);
        break;
      case KernelKind::kDivide:
        st = cuda::Divide(c.type, a + at, c.n, c.divisor, stream);
        out = a + at;
        break;
      case KernelKind::kCopy:
        st = cuda::Copy(out, a + at, c.n, stream);
        break;
    }
    if (!st.ok()) err = st.message();
    check(cudaStreamSynchronize(stream), "kernel");
  }
  result->assign(bytes, 0);
  if (err.empty()) check(cudaMemcpy(result->data(), out, bytes, cudaMemcpyDeviceToHost), "D2H");
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(s);
  if (stream) cudaStreamDestroy(stream);
  return err;
}

// Compares every case; calls on_mismatch with a description for each one that differs (or fails
// to run). Returns the number of cases.
inline int CompareAll(const std::function<void(const std::string&)>& on_mismatch,
                      bool large = true) {
  int cases = 0;
  ForEachKernelCase(
      [&](const KernelCase& c) {
        ++cases;
        std::vector<uint8_t> got;
        const std::string err = RunOnGpu(c, &got);
        if (!err.empty()) return on_mismatch(c.name + ": " + err);
        const std::vector<uint8_t> want =
            c.kind == KernelKind::kCopy ? c.a : CpuKernelResult(c, cpu::KernelIsaFor(c.type));
        const std::string diff = FirstDifference(c, want, got);
        if (!diff.empty()) on_mismatch(diff);
      },
      large);
  return cases;
}

}  // namespace braid::test::device_cuda
