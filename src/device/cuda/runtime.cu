// The runtime side of device/cuda: device detection, launch geometry and launch errors.
#include <string>

#include "device/cuda/kernels.h"
#include "device/cuda/launch.h"

namespace braid::cuda {

bool DeviceAvailable(std::string* why) {
  int count = 0;
  const gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess) {
    if (why)
      *why = std::string("no usable " BRAID_GPU_RUNTIME_NAME " device: ") + gpuGetErrorName(e) +
             " (" + gpuGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no " BRAID_GPU_RUNTIME_NAME " device on this machine";
    return false;
  }
  return true;
}

unsigned GridFor(uint64_t units) {
  int dev = 0, sms = 0;
  if (gpuGetDevice(&dev) != gpuSuccess ||
      gpuDeviceGetAttribute(&sms, gpuDevAttrMultiProcessorCount, dev) != gpuSuccess || sms <= 0)
    sms = 132;
  // 2048 resident threads per SM on Ampere and Hopper: 8 blocks of 256; the kernels are simple
  // enough (few registers) for all of them to be resident.
  const uint64_t full = static_cast<uint64_t>(sms) * (2048 / kThreads);
  const uint64_t want = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want < full ? (want ? want : 1) : full);
}

Status Launched(const char* what) {
  const gpuError_t e = gpuGetLastError();
  if (e == gpuSuccess) return Status::Ok();
  return SystemError(std::string(BRAID_GPU_RUNTIME_NAME " ") + what + " kernel: launch failed: " +
                     gpuGetErrorName(e) + " (" + gpuGetErrorString(e) + ")");
}

}  // namespace braid::cuda
