// CPU reduction and conversion kernels (DESIGN.md: src/device/cpu). Vectorised by the compiler
// over plain loops on contiguous arrays; fp16, bf16 and fp8 are widened to fp32, combined, and
// rounded back once (round to nearest even; fp8 saturates to the largest finite value, like
// CUDA's __NV_SATFINITE conversions).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/datatype.h"

namespace braid {

// dst[i] = a[i] (op) b[i] for i < n. dst may alias a or b (exactly, not partially).
void ReduceKernel(DataType type, ReduceOp op, const void* a, const void* b, void* dst, size_t n);

// The kernel ReduceKernel(type, op, ...) runs, resolved once (the CPU's tier and the type's table
// entry): for a caller that reduces with one type and op call after call (a compiled schedule),
// the dispatch off the per-call path. Null for an unknown type or op.
using ReduceKernelFn = void (*)(const void* a, const void* b, void* dst, size_t n);
ReduceKernelFn ResolveReduceKernel(DataType type, ReduceOp op);

// buf[i] = buf[i] / divisor (Avg's final step): integers truncate toward zero like C division;
// floating types divide in fp64 for fp32/fp64 and in fp32 for the narrower ones, rounded once.
void DivideKernel(DataType type, void* buf, size_t n, uint64_t divisor);

// dst[i] = src[i] * scalar (pre-multiplied sum's first step). `scalar` points to one value of
// `type`. dst may alias src. Integers wrap like unsigned arithmetic.
void ScaleKernel(DataType type, const void* src, void* dst, size_t n, const void* scalar);

// Scalar conversions (also used by tests to build inputs and references).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);
float Fp8E4M3ToFloat(uint8_t v);
uint8_t FloatToFp8E4M3(float f);
float Fp8E5M2ToFloat(uint8_t v);
uint8_t FloatToFp8E5M2(float f);

}  // namespace braid
