#include "nccl/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace braid::nccl {

namespace {

// Driver API entry points (cuda.h), declared here so no CUDA header is needed to build.
using CUresult = int;
using CUdeviceptr = unsigned long long;
using PointerGetAttributeFn = CUresult (*)(void* data, int attribute, CUdeviceptr ptr);
using StreamSynchronizeFn = CUresult (*)(void* stream);
using MemcpyDtoHFn = CUresult (*)(void* dst, CUdeviceptr src, size_t bytes);
using CtxGetDeviceFn = CUresult (*)(int* device);

constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE
constexpr unsigned kMemoryTypeUnified = 4;      // CU_MEMORYTYPE_UNIFIED

struct Driver {
  PointerGetAttributeFn pointer_get_attribute = nullptr;
  StreamSynchronizeFn stream_synchronize = nullptr;
  MemcpyDtoHFn memcpy_dtoh = nullptr;
  CtxGetDeviceFn ctx_get_device = nullptr;
};

// Published once complete; never unloaded (the application owns libcuda's lifetime and our
// RTLD_NOLOAD handle only adds a reference).
std::atomic<const Driver*> g_driver{nullptr};

const Driver* GetDriver() {
  return g_driver.load(std::memory_order_acquire);
}

}  // namespace

void ProbeCudaDriver() {
  if (GetDriver()) return;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return;
  auto* d = new Driver;
  d->pointer_get_attribute =
      reinterpret_cast<PointerGetAttributeFn>(dlsym(h, "cuPointerGetAttribute"));
  d->stream_synchronize = reinterpret_cast<StreamSynchronizeFn>(dlsym(h, "cuStreamSynchronize"));
  d->memcpy_dtoh = reinterpret_cast<MemcpyDtoHFn>(dlsym(h, "cuMemcpyDtoH_v2"));
  d->ctx_get_device = reinterpret_cast<CtxGetDeviceFn>(dlsym(h, "cuCtxGetDevice"));
  if (!d->pointer_get_attribute || !d->stream_synchronize || !d->memcpy_dtoh ||
      !d->ctx_get_device) {
    delete d;
    return;
  }
  const Driver* expected = nullptr;
  if (!g_driver.compare_exchange_strong(expected, d, std::memory_order_acq_rel)) delete d;
}

bool IsDeviceMemory(const void* p) {
  const Driver* d = GetDriver();
  if (!d || !p) return false;
  unsigned type = 0;
  if (d->pointer_get_attribute(&type, kPointerAttributeMemoryType,
                               reinterpret_cast<CUdeviceptr>(p)) != 0)
    return false;  // not known to CUDA: plain host memory
  return type == kMemoryTypeDevice || type == kMemoryTypeUnified;
}

void OrderOnStream(cudaStream_t stream, const void* sendbuff, const void* recvbuff) {
  const Driver* d = GetDriver();
  if (!d) return;
  if (!IsDeviceMemory(sendbuff) && !IsDeviceMemory(recvbuff)) return;
  // braid runs the call to completion before returning, so waiting for the work queued before
  // it is all NCCL's stream order needs; errors surface in the call itself.
  (void)d->stream_synchronize(reinterpret_cast<void*>(stream));
}

bool CopyToHost(void* dst, const void* src, size_t bytes) {
  const Driver* d = GetDriver();
  if (d && IsDeviceMemory(src))
    return d->memcpy_dtoh(dst, reinterpret_cast<CUdeviceptr>(src), bytes) == 0;
  std::memcpy(dst, src, bytes);
  return true;
}

int CurrentCudaDevice() {
  const Driver* d = GetDriver();
  int dev = 0;
  if (d && d->ctx_get_device(&dev) == 0) return dev;
  return 0;
}

}  // namespace braid::nccl
