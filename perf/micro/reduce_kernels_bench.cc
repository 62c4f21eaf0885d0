// ReduceKernel (sum) throughput per type, kernel tier and buffer size: 4 KiB and 256 KiB stay in
// L1/L2 and show the compute rate; 16 MiB per buffer (48 MiB touched) is memory bound.
// bytes_per_second counts one operand (n * element size) per call, the way an all-reduce's bus
// bandwidth counts its payload; the memory traffic is three times that (two reads, one write).
// "inplace" runs dst == a, the shape the all-reduce engine uses for its receive-reduce steps.
// Memcpy of the same bytes (one read, one write) is the reference "memory speed" the kernels are
// compared with (docs/performance.md, "Reduction kernels against memcpy").
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "device/cpu/kernel_isa.h"
#include "device/cpu/reduce_kernels.h"

namespace braid {
namespace {

// Ordinary finite values (no NaN, no subnormals, whose slow paths would measure something else).
std::vector<uint8_t> Fill(DataType type, size_t n, float base) {
  std::vector<uint8_t> v(n * DataTypeSize(type));
  for (size_t i = 0; i < n; ++i) {
    const float x = base + static_cast<float>(i % 1024) * 0.001f;
    switch (type) {
      case DataType::kFloat32:
        reinterpret_cast<float*>(v.data())[i] = x;
        break;
      case DataType::kInt32:
        reinterpret_cast<int32_t*>(v.data())[i] = static_cast<int32_t>(i * 2654435761u);
        break;
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(v.data())[i] = FloatToHalf(x);
        break;
      case DataType::kBfloat16:
        reinterpret_cast<uint16_t*>(v.data())[i] = FloatToBf16(x);
        break;
      default:
        break;
    }
  }
  return v;
}

void BM_ReduceSum(benchmark::State& state, DataType type, cpu::KernelIsa isa, bool in_place) {
  if (!cpu::CpuSupports(isa)) {
    state.SkipWithError("this CPU lacks the kernel tier");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t n = bytes / DataTypeSize(type);
  std::vector<uint8_t> a = Fill(type, n, 1.0f);
  const std::vector<uint8_t> b = Fill(type, n, 0.5f);
  std::vector<uint8_t> d(bytes);
  void* dst = in_place ? a.data() : d.data();
  for (auto _ : state) {
    cpu::ReduceKernelWithIsa(isa, type, ReduceOp::kSum, a.data(), b.data(), dst, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> a = Fill(DataType::kFloat32, bytes / 4, 1.0f);
  std::vector<uint8_t> d(bytes);
  for (auto _ : state) {
    std::memcpy(d.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

const bool kRegistered = [] {
  benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)->Arg(4 << 10)->Arg(256 << 10)->Arg(16 << 20);
  for (const DataType type :
       {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16, DataType::kInt32}) {
    for (const cpu::KernelIsa isa :
         {cpu::KernelIsa::kAvx512, cpu::KernelIsa::kAvx2F16c, cpu::KernelIsa::kPortable}) {
      for (const bool in_place : {false, true}) {
        const std::string name = std::string("ReduceSum/") + DataTypeName(type) + "/" +
                                 cpu::KernelIsaName(isa) + (in_place ? "/inplace" : "");
        benchmark::RegisterBenchmark(
            name.c_str(), [=](benchmark::State& s) { BM_ReduceSum(s, type, isa, in_place); })
            ->Arg(4 << 10)
            ->Arg(256 << 10)
            ->Arg(16 << 20);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace braid
