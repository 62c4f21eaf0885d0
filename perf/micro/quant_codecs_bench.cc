// Block codec throughput (src/quant) on one core against memcpy of the same bytes, measured in the
// same run (a timing means something only as a ratio in one run). bytes_per_second counts the
// typed side: the fp32/bf16 input of a quantize, the typed output of a dequantize and of a
// dequantize-reduce (which also reads it), so each rate compares with Memcpy of that many bytes.
// Issue 12 asks fp32 -> INT8 and INT8 -> fp32-accumulate at 16 MiB for >= 40% of memcpy.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/block_codec.h"
#include "quant/block_format.h"
#include "quant/block_math.h"

namespace braid::quant {
namespace {

constexpr size_t kBytes = 16 << 20;

size_t TypeSize(DataType t) {
  return t == DataType::kFloat32 ? 4 : 2;
}

// Gaussian values (no NaN, no subnormals: their paths would measure something else).
std::vector<uint8_t> Fill(DataType type, size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> v(n * TypeSize(type));
  for (size_t i = 0; i < n; ++i) {
    const float x = normal(rng);
    if (type == DataType::kFloat32) {
      std::memcpy(&v[i * 4], &x, 4);
    } else {
      const uint16_t h = type == DataType::kFloat16 ? FloatToHalf(x) : FloatToBf16(x);
      std::memcpy(&v[i * 2], &h, 2);
    }
  }
  return v;
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> a(kBytes, 1), b(kBytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}

enum class Op { kQuantize, kDequantize, kDequantizeReduce };

void BM_Codec(benchmark::State& state, Op op, BlockFormat f, DataType type, Isa isa) {
  if (!CpuSupports(isa)) {
    state.SkipWithError("this CPU lacks the tier");
    return;
  }
  const size_t n = kBytes / TypeSize(type);
  std::vector<uint8_t> typed = Fill(type, n), enc(EncodedBytes(f, n));
  if (!QuantizeWithIsa(isa, f, type, typed.data(), n, enc.data()).ok()) {
    state.SkipWithError("quantize refused the format");
    return;
  }
  for (auto _ : state) {
    Status s;
    switch (op) {
      case Op::kQuantize:
        s = QuantizeWithIsa(isa, f, type, typed.data(), n, enc.data());
        break;
      case Op::kDequantize:
        s = DequantizeWithIsa(isa, f, type, enc.data(), n, typed.data());
        break;
      case Op::kDequantizeReduce:
        s = DequantizeReduceWithIsa(isa, f, type, enc.data(), n, typed.data());
        break;
    }
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kBytes);
}

const bool kRegistered = [] {
  benchmark::RegisterBenchmark("Memcpy/16MiB", BM_Memcpy);
  struct Codec {
    const char* name;
    BlockFormat f;
  };
  const Codec codecs[] = {{"int8-G32", {8, true, 32}},
                          {"int4-G32", {4, true, 32}},
                          {"int8asym-G32", {8, false, 32}},
                          {"int4asym-G32", {4, false, 32}},
                          {"int8-G4096", {8, true, 4096}}};
  const std::pair<Op, const char*> ops[] = {{Op::kQuantize, "Quantize"},
                                            {Op::kDequantize, "Dequantize"},
                                            {Op::kDequantizeReduce, "DequantizeReduce"}};
  for (const auto& [op, opname] : ops)
    for (const Codec& c : codecs)
      for (DataType type : {DataType::kFloat32, DataType::kBfloat16})
        for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar}) {
          // The scalar reference only for the headline case: it is the fallback, not a target.
          if (isa == Isa::kScalar &&
              (type != DataType::kFloat32 || c.f.block != 32 || !c.f.symmetric || c.f.bits != 8))
            continue;
          const std::string name = std::string(opname) + "/" + c.name + "/" + DataTypeName(type) +
                                   "/" + IsaName(isa) + "/16MiB";
          const BlockFormat f = c.f;
          benchmark::RegisterBenchmark(name.c_str(),
                                       [=](benchmark::State& s) { BM_Codec(s, op, f, type, isa); });
        }
  return true;
}();

}  // namespace
}  // namespace braid::quant
