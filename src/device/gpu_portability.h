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
