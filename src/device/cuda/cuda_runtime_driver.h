// The device runtime (device/device_runtime.h) over the CUDA driver API, taken from a libcuda.so.1
// that the application has already loaded (dlopen RTLD_NOLOAD): a program that never loads CUDA
// pays nothing and braid never loads the driver itself. Declares the few driver types it needs,
// so it compiles without CUDA headers.
//
// Not run in CI (no GPU there): the emulated device (device/cpu/emulated_device.h) runs the same
// interface in tests. What only a GPU can check: that stream memory operations
// (cuStreamWriteValue32/WaitValue32 on host-mapped flags) are enabled by the driver
// (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS; default on since CUDA 12 drivers), that host
// pointers from cuMemHostAlloc are the device's too (unified addressing, every 64-bit Linux
// driver), and the copies' speed. docs/gpu.md lists it.
#pragma once

#include <memory>

#include "device/device_runtime.h"

namespace braid::device {

// The CUDA runtime when libcuda.so.1 is loaded in this process and has every entry point needed;
// null otherwise (no message: the host path is the right answer then).
std::unique_ptr<DeviceRuntime> LoadCudaDriverRuntime();

}  // namespace braid::device
