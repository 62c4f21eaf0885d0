// -M cuda: the perf binaries on device memory, the way nccl-tests runs them: buffers from the
// CUDA driver (cuMemAlloc), every collective through the NCCL API on a stream of this rank, timed
// to a stream synchronise. Both libraries are loaded at run time, so one binary measures
//   - braid's libnccl.so.2 (the default: the one this build made, else the loader's search path),
//   - any other NCCL, e.g. NVIDIA's (BRAID_PERF_NCCL=/path/libnccl.so.2): the same table, side by
//     side with braid's,
//   - and, in CI, braid's libnccl.so.2 over the tests' fake CUDA driver
//     (BRAID_PERF_LIBCUDA=/path/libcuda.so.1, tests/common/fake_libcuda.cc: the emulated device,
//     whose device memory faults when the host touches it), so the device path of these binaries
//     is tested where no GPU exists.
// The host API (braid.h) still launches the ranks and carries what is not timed: the NCCL unique
// id, the device list, the error counts.
#pragma once

#include <string>

#include "nccl.h"  // braid's copy: the ABI of NVIDIA's nccl.h (declarations only, never linked)

namespace braid_perf {

// The CUDA driver entry points the harness uses (cuda.h's C signatures; CUresult as int).
struct CudaDriver {
  int (*init)(unsigned flags) = nullptr;
  int (*deviceGetCount)(int* count) = nullptr;
  int (*deviceGet)(int* device, int ordinal) = nullptr;
  int (*primaryCtxRetain)(void** ctx, int device) = nullptr;
  int (*ctxSetCurrent)(void* ctx) = nullptr;
  int (*memAlloc)(unsigned long long* dptr, size_t bytes) = nullptr;
  int (*memFree)(unsigned long long dptr) = nullptr;
  int (*memcpyAsync)(unsigned long long dst, unsigned long long src, size_t bytes,
                     void* stream) = nullptr;
  int (*streamCreate)(void** stream, unsigned flags) = nullptr;
  int (*streamDestroy)(void* stream) = nullptr;
  int (*streamSynchronize)(void* stream) = nullptr;
  int (*getErrorString)(int code, const char** text) = nullptr;     // optional
  int (*deviceGetName)(char* name, int len, int device) = nullptr;  // optional
};

// The NCCL entry points (nccl.h's).
struct NcclApi {
  decltype(&ncclGetVersion) getVersion = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclGetErrorString) getErrorString = nullptr;
  decltype(&ncclGetLastError) getLastError = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclRedOpCreatePreMulSum) redOpCreatePreMulSum = nullptr;
  decltype(&ncclRedOpDestroy) redOpDestroy = nullptr;
  decltype(&ncclCommGetAsyncError) commGetAsyncError = nullptr;
  // Optional (-R): buffer registration (NCCL >= 2.19) and symmetric windows (NCCL >= 2.27).
  decltype(&ncclCommRegister) commRegister = nullptr;
  decltype(&ncclCommDeregister) commDeregister = nullptr;
  decltype(&ncclCommWindowRegister) commWindowRegister = nullptr;
  decltype(&ncclCommWindowDeregister) commWindowDeregister = nullptr;
};

struct DeviceApi {
  CudaDriver cu;
  NcclApi nccl;
  std::string libcuda;  // what was loaded: "libcuda.so.1" or BRAID_PERF_LIBCUDA
  std::string libnccl;  // the path of the NCCL library loaded
  int nccl_version = 0;
  int device_count = 0;

  // "CUDA_ERROR_... (999)" or the driver's text for a CUresult.
  std::string cudaError(int code) const;
};

// Loads the driver (RTLD_GLOBAL first, so that braid's libnccl.so.2 finds the same one by its
// soname), initialises it, then loads NCCL. False with *why (naming the library and the missing
// entry point) when either is missing or the driver sees no device.
bool LoadDeviceApi(DeviceApi* out, std::string* why);

}  // namespace braid_perf
