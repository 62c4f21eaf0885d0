// Element types and reduction operators as the internals see them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/braid.h"

namespace braid {

enum class DataType : uint8_t {
  kInt8 = braidInt8,
  kUint8 = braidUint8,
  kInt32 = braidInt32,
  kUint32 = braidUint32,
  kInt64 = braidInt64,
  kUint64 = braidUint64,
  kFloat16 = braidFloat16,
  kFloat32 = braidFloat32,
  kFloat64 = braidFloat64,
  kBfloat16 = braidBfloat16,
  kFloat8e4m3 = braidFloat8e4m3,
  kFloat8e5m2 = braidFloat8e5m2,
};
inline constexpr int kNumDataTypes = braidNumTypes;

// The built-in reductions the kernels implement. Avg and pre-multiplied sums are lowered by the
// engine onto kSum plus a scaling pass, so schedules and kernels only see these four.
enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };
inline constexpr int kNumReduceOps = 4;

inline bool IsValidDataType(int t) {
  return t >= 0 && t < kNumDataTypes;
}
// Inline: every call asks it several times (arguments, payload, signature, kernels), and as an
// out-of-line switch it was 4 % of a small call on the board.
constexpr size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8e4m3:
    case DataType::kFloat8e5m2:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}
const char* DataTypeName(DataType t);  // "float", "bfloat16", "f8e4m3" ... (nccl-tests names)
bool IsFloatingPoint(DataType t);
const char* ReduceOpName(ReduceOp op);  // "sum", "prod", "max", "min"

}  // namespace braid
