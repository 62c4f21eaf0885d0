#include "nccl/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "device/device_runtime.h"
#include "nccl/known_buffers.h"

namespace braid::nccl {

namespace {

using CUresult = int;
using CtxGetDeviceFn = CUresult (*)(int* device);

// Published once found; the application owns libcuda's lifetime (our RTLD_NOLOAD handle only adds
// a reference).
std::atomic<CtxGetDeviceFn> g_ctx_get_device{nullptr};

}  // namespace

void ProbeCudaDriver() {
  (void)device::ChooseDeviceRuntime();
  if (g_ctx_get_device.load(std::memory_order_acquire)) return;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return;
  if (auto f = reinterpret_cast<CtxGetDeviceFn>(dlsym(h, "cuCtxGetDevice")))
    g_ctx_get_device.store(f, std::memory_order_release);
}

bool CopyToHost(void* dst, const void* src, size_t bytes) {
  device::DeviceRuntime* rt = device::ActiveDeviceRuntime();
  if (rt) {
    auto info = ClassifyBuffer(rt, src);
    if (info.ok() && info->onDevice()) {
      // The default stream: ordered after the work the program queued there, as cuMemcpyDtoH.
      return rt->copyAsync(dst, src, bytes, nullptr).ok() && rt->synchronize(nullptr).ok();
    }
  }
  std::memcpy(dst, src, bytes);
  return true;
}

int CurrentCudaDevice() {
  int dev = 0;
  if (auto f = g_ctx_get_device.load(std::memory_order_acquire))
    if (f(&dev) == 0) return dev;
  return 0;
}

}  // namespace braid::nccl
