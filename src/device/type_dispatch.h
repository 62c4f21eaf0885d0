// A DataType known at run time to a template argument, for the GPU kernels' entry points (and
// tests that run element_math.h's per-element forms on the host). Plain C++17: a functor with a
// template call operator stands in for C++20's templated lambda, which nvcc's C++17 lacks.
#pragma once

#include "core/base/datatype.h"

namespace braid {

// Calls f.template operator()<kType>() for `type`; false for a type outside DataType.
template <class F>
bool WithType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      f.template operator()<DataType::kInt8>();
      return true;
    case DataType::kUint8:
      f.template operator()<DataType::kUint8>();
      return true;
    case DataType::kInt32:
      f.template operator()<DataType::kInt32>();
      return true;
    case DataType::kUint32:
      f.template operator()<DataType::kUint32>();
      return true;
    case DataType::kInt64:
      f.template operator()<DataType::kInt64>();
      return true;
    case DataType::kUint64:
      f.template operator()<DataType::kUint64>();
      return true;
    case DataType::kFloat16:
      f.template operator()<DataType::kFloat16>();
      return true;
    case DataType::kFloat32:
      f.template operator()<DataType::kFloat32>();
      return true;
    case DataType::kFloat64:
      f.template operator()<DataType::kFloat64>();
      return true;
    case DataType::kBfloat16:
      f.template operator()<DataType::kBfloat16>();
      return true;
    case DataType::kFloat8e4m3:
      f.template operator()<DataType::kFloat8e4m3>();
      return true;
    case DataType::kFloat8e5m2:
      f.template operator()<DataType::kFloat8e5m2>();
      return true;
  }
  return false;
}

}  // namespace braid
