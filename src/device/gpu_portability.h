// The thin layer that lets one kernel source build with nvcc (CUDA) and hipcc (HIP), and lets the
// element operations of element_math.h be compiled for the host and the device alike.
//
// - BRAID_ELEMENT_INLINE marks a function usable everywhere: __host__ __device__ and force-inlined
//   under nvcc/hipcc; in a plain C++ build, [[gnu::always_inline]] inline, which is what the CPU
//   kernel tiers need (a helper left out of line would exist once, for the baseline target).
// - BRAID_DEVICE_PASS is 1 while the device side of a .cu file is compiled (nvcc and hipcc run the
//   preprocessor once per side), 0 on the host side and in plain C++.
// - In .cu files (nvcc or hipcc only) the gpu* names below stand for the runtime's cuda* or hip*
//   ones, so a kernel source names neither runtime.
// - braid::gpu holds the few device operations that are spelled differently on the two (a PTX
//   instruction, a shuffle's mask, the fp16/bf16 headers), each giving the same bits on both; the
//   kernels use these and nothing of cuda_fp16.h, cuda_bf16.h or inline PTX themselves.
//
// Warps: the kernels are written for 32-lane warps (lane = thread % 32, shuffles across at most 32
// lanes). AMD's CDNA wavefronts have 64 lanes; a 32-wide shuffle (ShflXor32) works within each
// half of one, so every "warp" of the source is half a wavefront there, with the same results.
// Nothing relies on a warp executing in lockstep: data moves between lanes only through the
// shuffles (and shared memory behind __syncthreads).
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define BRAID_GPU_COMPILER 1
#define BRAID_ELEMENT_INLINE __host__ __device__ __forceinline__
#else
#define BRAID_GPU_COMPILER 0
#define BRAID_ELEMENT_INLINE [[gnu::always_inline]] inline
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define BRAID_DEVICE_PASS 1
#else
#define BRAID_DEVICE_PASS 0
#endif

#if defined(__HIPCC__)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define BRAID_GPU_RUNTIME_NAME "HIP"
#define gpuStream_t hipStream_t
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetLastError hipGetLastError
#define gpuGetErrorName hipGetErrorName
#define gpuGetErrorString hipGetErrorString
#define gpuGetDevice hipGetDevice
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#elif defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define BRAID_GPU_RUNTIME_NAME "CUDA"
#define gpuStream_t cudaStream_t
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorName cudaGetErrorName
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDevice cudaGetDevice
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMultiProcessorCount cudaDevAttrMultiProcessorCount
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#endif

#if BRAID_GPU_COMPILER
#include <cstdint>
#include <cstring>

namespace braid::gpu {

// lane ^ lane_mask's value of v, within groups of 32 lanes (lane_mask < 32), every lane of the
// group taking part: CUDA's __shfl_xor_sync over a full warp; HIP's __shfl_xor with width 32,
// which keeps each half of a 64-lane wavefront to itself (ds_bpermute within the half).
template <class T>
__device__ __forceinline__ T ShflXor32(T v, unsigned lane_mask) {
#if defined(__HIPCC__)
  return __shfl_xor(v, static_cast<int>(lane_mask), 32);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// NaN-propagating max and min: a NaN if either operand is one, else the larger (smaller) value;
// with zeros of both signs either zero (callers do not depend on which). sm_80 and later have it
// as one instruction (PTX max.NaN / min.NaN); elsewhere (older CUDA devices, AMD GPUs, whose
// v_max_f32/v_min_f32 return the non-NaN operand, as fmaxf/fminf must) it is the test and the
// plain max. A NaN result is a quiet NaN of unspecified payload on both: callers only test it.
__device__ __forceinline__ float MaxNan(float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
#else
  return x != x || y != y ? __uint_as_float(0x7fffffffu) : fmaxf(x, y);
#endif
}
__device__ __forceinline__ float MinNan(float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
#else
  return x != x || y != y ? __uint_as_float(0x7fffffffu) : fminf(x, y);
#endif
}

// Two fp16 values packed in a word (the first at the lower address) widened to fp32: exact for
// every finite value and infinity, subnormals kept (cvt.f32.f16 on CUDA, v_cvt_f32_f16 on AMD,
// whose fp16 denormals are on by default). A NaN's payload may differ from HalfToFloat's.
__device__ __forceinline__ void Half2ToFloats(uint32_t w, float& lo, float& hi) {
  __half2 h;
  memcpy(&h, &w, 4);
  const float2 f = __half22float2(h);
  lo = f.x;
  hi = f.y;
}

// Two fp32 values narrowed to fp16 and packed (lo at the lower address), rounded to nearest even
// with subnormal results kept: cvt.rn.f16x2.f32 on CUDA; on AMD, _Float16 conversions
// (v_cvt_f16_f32 under the default round-to-nearest-even mode). Equal to FloatToHalf for every
// non-NaN input; NaN inputs give an unspecified NaN (callers store canonical NaNs themselves).
__device__ __forceinline__ uint32_t FloatsToHalf2Rn(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, 4);
  return w;
}

// The same to bf16: cvt.rn.bf16x2.f32 on CUDA (sm_80 and later; cuda_bf16.h emulates it before);
// on AMD, which has no bf16 conversion before gfx950, the integer rounding of FloatToBf16 (add
// 0x7fff plus the kept lowest bit, truncate), the same value for every non-NaN input, overflow to
// infinity and subnormals included.
__device__ __forceinline__ uint32_t FloatsToBf162Rn(float lo, float hi) {
#if defined(__HIPCC__)
  const uint32_t a = __float_as_uint(lo), b = __float_as_uint(hi);
  const uint32_t ra = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  const uint32_t rb = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return ra | (rb << 16);
#else
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, 4);
  return w;
#endif
}

}  // namespace braid::gpu
#endif  // BRAID_GPU_COMPILER
