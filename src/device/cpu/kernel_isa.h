// Instruction-set tiers of the CPU kernels. Every kernel is written once as portable C++ (plain
// loops the compiler vectorises) and compiled three times: for the baseline x86-64/any target,
// for AVX2 + F16C and for AVX-512 (F, BW, VL: 512-bit vectors with byte and word lanes, which the
// bf16 and fp16 conversions need), the best one picked at run time. The public entry points in
// reduce_kernels.h use the best tier the CPU supports; the *WithIsa variants below let tests run
// every tier on one machine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/datatype.h"
#include "device/element_math.h"

// Helpers used inside kernels must be inlined into the per-tier entry points: a helper compiled
// out of line would exist once, for the baseline target, and the AVX2 tier would call it.
#define BRAID_KERNEL_INLINE [[gnu::always_inline]] inline
// The same for a lambda, placed after its parameter list.
#define BRAID_KERNEL_LAMBDA __attribute__((always_inline))

// Before a loop whose destination is either disjoint from its sources or equal to one of them
// (element i read before element i is written): no iteration depends on another, so the compiler
// need not emit run-time overlap checks, which GCC's -O2 vectoriser refuses to emit at all.
#if defined(__clang__)
#define BRAID_LOOP_INDEPENDENT _Pragma("clang loop vectorize(assume_safety)")
#else
#define BRAID_LOOP_INDEPENDENT _Pragma("GCC ivdep")
#endif

#if defined(__x86_64__) || defined(__i386__)
#define BRAID_KERNELS_X86 1
// Applied to the AVX2 tier's entry points only; no FMA, so no multiply-add is ever contracted
// and both tiers round identically.
#define BRAID_TARGET_AVX2_F16C __attribute__((target("avx2,f16c")))
// The AVX-512 tier's entry points. AVX-512F brings fused multiply-add instructions: the device
// layer is compiled with -ffp-contract=off, so none is contracted and every tier rounds alike.
#define BRAID_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#else
#define BRAID_KERNELS_X86 0
#endif

namespace braid::cpu {

// Kernels choose between values with SelectBits (device/element_math.h: shared with the GPU
// kernels) instead of ?: or if, so that loops with a floating-point operation vectorise.
using element::SelectBits;

enum class KernelIsa : uint8_t {
  kPortable = 0,  // baseline target: SSE2 on x86-64, whatever the compiler targets elsewhere
  kAvx2F16c = 1,  // 256-bit vectors and hardware fp16 conversion
  kAvx512 = 2,    // 512-bit vectors (AVX-512 F, BW, VL), with AVX2 + F16C's conversions
};
inline constexpr int kNumKernelIsas = 3;

// Whether this CPU can run the tier (kPortable: always).
bool CpuSupports(KernelIsa isa);
// The widest tier this CPU supports.
KernelIsa BestKernelIsa();
// The tier ReduceKernel and friends use for `type`: AVX-512 only for the narrow floats, whose
// conversions are compute bound (bf16 sums 13-25 % faster than with AVX2 on the development VM's
// AMD EPYC); the direct types are memory bound from L2 on, and their 512-bit loops measured
// 5-20 % slower than the 256-bit ones on 16 MiB (docs/performance.md, "Reduction kernels").
KernelIsa KernelIsaFor(DataType type);
const char* KernelIsaName(KernelIsa isa);

// Same contracts as ReduceKernel, DivideKernel and ScaleKernel, on an explicit tier. Calling a
// tier the CPU does not support (CpuSupports false) falls back to kPortable.
void ReduceKernelWithIsa(KernelIsa isa, DataType type, ReduceOp op, const void* a, const void* b,
                         void* dst, size_t n);
void DivideKernelWithIsa(KernelIsa isa, DataType type, void* buf, size_t n, uint64_t divisor);
void ScaleKernelWithIsa(KernelIsa isa, DataType type, const void* src, void* dst, size_t n,
                        const void* scalar);

}  // namespace braid::cpu
