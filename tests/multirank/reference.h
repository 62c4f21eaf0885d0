// Inputs whose reductions are exact in every type, and the reference results computed here in
// the test (independently of the library's algorithms), for bit-exact checking.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "braid/braid.h"
#include "core/base/datatype.h"
#include "device/cpu/reduce_kernels.h"

namespace braid_test {

using braid::DataType;

inline bool IsFloat(DataType t) {
  return braid::IsFloatingPoint(t);
}
inline bool IsSigned(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64;
}

// The period in the element index of InputValue(t, op, r, i) for every rank r, and so of every
// reduction over ranks: a large buffer is one period computed and then tiled (TileElements).
// Each is the period of the modulus of `i` that InputValue's case takes (13 is invertible mod
// 17, 9, 5 and 1000); the test ReferenceInputs.RepeatWithTheirPeriod holds InputValue to it.
inline uint64_t InputPeriod(DataType t, int op) {
  if (op == braidProd) return 3;
  if (op == braidMax || op == braidMin) return 17;
  switch (t) {
    case DataType::kFloat8e5m2:
      return 2;
    case DataType::kFloat8e4m3:
      return 3;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 9;
    case DataType::kInt8:
    case DataType::kUint8:
      return 5;
    default:
      return 1000;
  }
}

// Value of element i of rank r's input for a reduction `op` (braidRedOp_t; >= braidNumOps:
// pre-multiplied sum). Chosen so that every partial result, in any order, is exact in `t`.
inline double InputValue(DataType t, int op, int rank, uint64_t i) {
  const uint64_t k = static_cast<uint64_t>(rank) * 7 + i * 13;
  if (op == braidProd) return (rank + i) % 3 == 0 ? 2 : 1;  // at most 2^8 over 8 ranks
  if (op == braidMax || op == braidMin) {
    int v = static_cast<int>(k % 17) - 8;  // -8..8: exact even in f8e5m2
    return IsSigned(t) || IsFloat(t) ? v : v + 8;
  }
  // Sums (sum, avg, pre-multiplied sum x2): keep every partial sum exact.
  switch (t) {
    case DataType::kFloat8e5m2:
      return static_cast<double>((rank + i) % 2);  // sum <= 8
    case DataType::kFloat8e4m3:
      return static_cast<double>((rank + i) % 3) * (op >= braidNumOps ? 0.5 : 1);  // <= 16
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return static_cast<double>(k % 9) - 4;  // |sum| <= 64
    case DataType::kInt8:
      return static_cast<double>(k % 5) - 2;
    case DataType::kUint8:
      return static_cast<double>(k % 5);
    case DataType::kUint32:
    case DataType::kUint64:
      return static_cast<double>(k % 1000);
    default:
      return static_cast<double>(k % 1000) - 500;
  }
}

// Stores `v` (an integer or a value exact in `t`) as element i of a buffer of type t.
inline void Store(DataType t, void* buf, uint64_t i, double v) {
  switch (t) {
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case DataType::kUint32:
      static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUint64:
      static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(static_cast<int64_t>(v));
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = braid::FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBfloat16:
      static_cast<uint16_t*>(buf)[i] = braid::FloatToBf16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kFloat8e4m3:
      static_cast<uint8_t*>(buf)[i] = braid::FloatToFp8E4M3(static_cast<float>(v));
      break;
    case DataType::kFloat8e5m2:
      static_cast<uint8_t*>(buf)[i] = braid::FloatToFp8E5M2(static_cast<float>(v));
      break;
  }
}

// The reduction of the inputs of all ranks at element i, as the exact value; integer products
// wrap in the type's width, which Store reproduces by truncation.
inline double Reduced(DataType t, int op, int nranks, uint64_t i) {
  double acc = InputValue(t, op, 0, i);
  int64_t iacc = static_cast<int64_t>(acc);
  for (int r = 1; r < nranks; ++r) {
    double v = InputValue(t, op, r, i);
    switch (op) {
      case braidProd:
        acc *= v;
        iacc *= static_cast<int64_t>(v);
        break;
      case braidMax:
        acc = v > acc ? v : acc;
        break;
      case braidMin:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op >= braidNumOps) acc *= 2;  // the tests' pre-multiplied sums use scalar 2
  return op == braidProd && !IsFloat(t) ? static_cast<double>(iacc) : acc;
}

// Stores, as element i of buf, the expected result of `op` over every rank's input element
// `in_i`: Avg divides as braid documents it (integers truncate; fp32/fp64 divide in fp64;
// narrower floats divide in fp32), rounded once.
inline void StoreExpected(DataType t, void* buf, uint64_t i, int op, int nranks, uint64_t in_i) {
  double v = Reduced(t, op, nranks, in_i);
  if (op != braidAvg) return Store(t, buf, i, v);
  if (!IsFloat(t)) {
    if (IsSigned(t)) return Store(t, buf, i, static_cast<double>(static_cast<int64_t>(v) / nranks));
    return Store(t, buf, i,
                 static_cast<double>(static_cast<uint64_t>(v) / static_cast<uint64_t>(nranks)));
  }
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v / nranks);
      return;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v / nranks;
      return;
    default: {
      float q = static_cast<float>(v) / static_cast<float>(nranks);
      switch (t) {
        case DataType::kFloat16:
          static_cast<uint16_t*>(buf)[i] = braid::FloatToHalf(q);
          return;
        case DataType::kBfloat16:
          static_cast<uint16_t*>(buf)[i] = braid::FloatToBf16(q);
          return;
        case DataType::kFloat8e4m3:
          static_cast<uint8_t*>(buf)[i] = braid::FloatToFp8E4M3(q);
          return;
        default:
          static_cast<uint8_t*>(buf)[i] = braid::FloatToFp8E5M2(q);
          return;
      }
    }
  }
}

// Fills elements [0, n) of `buf` (elements of `elsize` bytes) through `store_at(buf, i)`, which
// stores element i as a function of i with period `period` (InputPeriod): the first period is
// computed, the rest copied from it. A 64 MiB reference then costs a memcpy instead of 16
// million evaluations, which were half of the large-count tests' time.
template <class StoreAt>
void TileElements(void* buf, uint64_t n, size_t elsize, uint64_t period, StoreAt&& store_at) {
  const uint64_t head = n < period ? n : period;
  for (uint64_t i = 0; i < head; ++i) store_at(buf, i);
  auto* b = static_cast<uint8_t*>(buf);
  // `done` stays a multiple of the period, so each copy continues the sequence.
  for (uint64_t done = head; done < n;) {
    const uint64_t k = done < n - done ? done : n - done;
    std::memcpy(b + done * elsize, b, k * elsize);
    done += k;
  }
}

// Number of elements whose bytes differ.
inline uint64_t CountWrong(const void* got, const void* want, uint64_t n, size_t elsize,
                           uint64_t* first_bad) {
  uint64_t wrong = 0;
  auto* g = static_cast<const uint8_t*>(got);
  auto* w = static_cast<const uint8_t*>(want);
  if (std::memcmp(g, w, n * elsize) == 0) return 0;  // the usual case, at memory speed
  for (uint64_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * elsize, w + i * elsize, elsize) != 0) {
      if (wrong == 0 && first_bad) *first_bad = i;
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace braid_test
