// A stand-in for the CUDA driver (libcuda.so.1) built over the emulated device, so that braid's
// CUDA device runtime (src/device/cuda/cuda_runtime_driver.cc: symbol binding, pointer-attribute
// decoding, capture check, error strings) runs in CI, where no GPU and no driver exist. Only the
// entry points braid uses, with the driver's C signatures and values (cuda.h); streams, flags and
// copies are the emulated device's (separate device memory, PROT_NONE to the host).
//
// Never on a search path: tests dlopen it by its path (RTLD_GLOBAL), after which braid's
// dlopen("libcuda.so.1", RTLD_NOLOAD) finds it by its soname, as it finds the real driver that a
// CUDA program has loaded. Test hooks: braidFakeCuda*.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "device/cpu/emulated_device.h"
#include "device/cuda/peer_reduce_args.h"

using braid::device::EmulatedDevice;
using braid::device::MemoryKind;

namespace {

EmulatedDevice& Dev() {
  // A GPU polls its flags: braid's CUDA runtime writes `done` with a plain store, no wake-up.
  static auto* d =
      new EmulatedDevice(EmulatedDevice::Mode::kSeparate, std::chrono::microseconds(50));
  return *d;
}

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;      // CUDA_ERROR_INVALID_VALUE
constexpr int kInvalidHandle = 400;   // CUDA_ERROR_INVALID_HANDLE
constexpr int kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT

int Code(const braid::Status& s) {
  return s.ok() ? kSuccess : kInvalidValue;
}
void* P(unsigned long long p) {
  return reinterpret_cast<void*>(p);
}

}  // namespace

#define FAKE_CU extern "C" __attribute__((visibility("default")))

FAKE_CU int cuPointerGetAttributes(unsigned n, int* attrs, void** data, unsigned long long ptr) {
  auto info = Dev().classify(P(ptr));
  if (!info.ok()) return kInvalidValue;
  for (unsigned i = 0; i < n; ++i) {
    switch (attrs[i]) {
      case 2:  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE: 0 for memory CUDA does not know
        *static_cast<unsigned*>(data[i]) = info->kind == MemoryKind::kDevice       ? 2u
                                           : info->kind == MemoryKind::kPinnedHost ? 1u
                                                                                   : 0u;
        break;
      case 8:  // CU_POINTER_ATTRIBUTE_IS_MANAGED (a bool)
        *static_cast<bool*>(data[i]) = false;
        break;
      case 9:  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        *static_cast<int*>(data[i]) = info->device;
        break;
      case 11:  // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
        *static_cast<unsigned long long*>(data[i]) = reinterpret_cast<uintptr_t>(info->base);
        break;
      case 12:  // CU_POINTER_ATTRIBUTE_RANGE_SIZE
        *static_cast<size_t*>(data[i]) = info->size;
        break;
      default:
        return kInvalidValue;
    }
  }
  return kSuccess;
}

FAKE_CU int cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  auto r = Dev().allocDevice(bytes);
  if (!r.ok()) return kInvalidValue;
  *p = reinterpret_cast<uintptr_t>(*r);
  return kSuccess;
}
FAKE_CU int cuMemFree_v2(unsigned long long p) {
  return Code(Dev().freeDevice(P(p)));
}
FAKE_CU int cuMemHostAlloc(void** p, size_t bytes, unsigned) {
  auto r = Dev().allocHostMapped(bytes);
  if (!r.ok()) return kInvalidValue;
  *p = *r;
  return kSuccess;
}
// On a GPU cuMemFreeHost synchronises the device: called while a stream waits for the caller
// (a flag only it will write), it never returns. The fake refuses such a free and counts it
// (braidFakeCudaFreesWhileWaiting), so a test sees the deadlock a GPU would have.
static std::atomic<int> g_frees_while_waiting{0};
FAKE_CU int cuMemFreeHost(void* p) {
  if (Dev().blockedWaits() > 0) {
    g_frees_while_waiting.fetch_add(1);
    return 999;  // CUDA_ERROR_UNKNOWN
  }
  return Code(Dev().freeHostMapped(p));
}
FAKE_CU int cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t bytes, void* s) {
  return Code(Dev().copyAsync(P(dst), P(src), bytes, s));
}
FAKE_CU int cuStreamCreate(void** s, unsigned) {
  auto r = Dev().createStream();
  if (!r.ok()) return kInvalidValue;
  *s = *r;
  return kSuccess;
}
FAKE_CU int cuStreamDestroy_v2(void* s) {
  return Code(Dev().destroyStream(s));
}
FAKE_CU int cuStreamQuery(void* s) {
  return Dev().checkStream(s).ok() ? kSuccess : kInvalidHandle;
}
// CU_STREAM_CAPTURE_STATUS_NONE (0) or _ACTIVE (1); the emulated device refuses a capturing
// stream with InvalidUsage, a dead one with InvalidArgument.
FAKE_CU int cuStreamIsCapturing(void* s, int* status) {
  braid::Status st = Dev().checkStream(s);
  if (st.cls() == braid::ErrorClass::kInvalidArgument) return kInvalidHandle;
  *status = st.ok() ? 0 : 1;
  return kSuccess;
}
FAKE_CU int cuStreamSynchronize(void* s) {
  return Code(Dev().synchronize(s));
}
FAKE_CU int cuStreamWriteValue32_v2(void* s, unsigned long long addr, unsigned value,
                                    unsigned flags) {
  if (flags != 0) return kInvalidValue;
  return Code(Dev().writeValue32(s, static_cast<uint32_t*>(P(addr)), value));
}
FAKE_CU int cuStreamWaitValue32_v2(void* s, unsigned long long addr, unsigned value,
                                   unsigned flags) {
  if (flags != 0) return kInvalidValue;  // braid asks for CU_STREAM_WAIT_VALUE_GEQ only
  return Code(Dev().waitValue32(s, static_cast<uint32_t*>(P(addr)), value));
}
// One device, ordinal 0, whose primary context is the one fake context (the perf binaries'
// -M cuda set-up: tests/perf).
FAKE_CU int cuInit(unsigned flags) {
  return flags == 0 ? kSuccess : kInvalidValue;
}
FAKE_CU int cuDeviceGetCount(int* count) {
  *count = 1;
  return kSuccess;
}
FAKE_CU int cuDeviceGet(int* device, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *device = 0;
  return kSuccess;
}
FAKE_CU int cuDevicePrimaryCtxRetain(void** c, int device) {
  if (device != 0) return kInvalidValue;
  *c = &Dev();
  return kSuccess;
}
FAKE_CU int cuDeviceGetName(char* name, int len, int device) {
  if (device != 0 || len <= 0) return kInvalidValue;
  std::snprintf(name, static_cast<size_t>(len), "%s", "braid emulated device");
  return kSuccess;
}
FAKE_CU int cuCtxGetCurrent(void** c) {
  *c = &Dev();  // one fake context
  return kSuccess;
}
FAKE_CU int cuCtxSetCurrent(void* c) {
  return c == &Dev() ? kSuccess : kInvalidValue;
}
FAKE_CU int cuCtxGetDevice(int* device) {
  *device = 0;
  return kSuccess;
}
FAKE_CU int cuGetErrorString(int code, const char** s) {
  *s = code == kInvalidHandle ? "invalid resource handle (fake driver)"
                              : "invalid argument (fake driver)";
  return kSuccess;
}
FAKE_CU int cuLaunchHostFunc(void* s, void (*fn)(void*), void* arg) {
  return Code(Dev().launchHostFunction(s, [fn, arg] { fn(arg); }));
}

// CUDA IPC over the emulated device's memfd-backed allocations. A handle of this process is
// refused with CUDA_ERROR_INVALID_CONTEXT, as the driver refuses it.
struct FakeIpcHandle {
  char reserved[64];
};
FAKE_CU int cuIpcGetMemHandle(FakeIpcHandle* h, unsigned long long p) {
  auto r = Dev().exportAllocation(P(p));
  if (!r.ok()) return kInvalidValue;
  std::memcpy(h->reserved, r->bytes, sizeof(h->reserved));
  return kSuccess;
}
static std::atomic<int> g_fail_ipc_opens{0};  // braidFakeCudaFailIpcOpens
FAKE_CU int cuIpcOpenMemHandle_v2(unsigned long long* p, FakeIpcHandle h, unsigned flags) {
  if (flags != 1) return kInvalidValue;
  if (g_fail_ipc_opens.load() > 0) {
    g_fail_ipc_opens.fetch_sub(1);
    return 217;  // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
  }              // braid asks for CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
  braid::device::IpcHandle in;
  std::memcpy(in.bytes, h.reserved, sizeof(h.reserved));
  auto r = Dev().openPeerAllocation(in);
  if (!r.ok())
    return r.status().cls() == braid::ErrorClass::kInvalidUsage ? kInvalidContext : kInvalidValue;
  *p = reinterpret_cast<uintptr_t>(*r);
  return kSuccess;
}
FAKE_CU int cuIpcCloseMemHandle(unsigned long long p) {
  return Code(Dev().closePeerAllocation(P(p)));
}

// The peer-reduce kernels (device/cuda/peer_reduce.cu), as braid's CUDA runtime loads them from
// its embedded fatbin: a module is accepted when the image starts with the fatbin magic, a
// function by its name (braid_peer_reduce_<type>_<op>), and a launch of one runs the emulated
// device's peer reduce on the stream with the kernel's argument block as the driver would pass
// it. So the runtime's loading, lookup and argument marshalling run in CI.
namespace {
struct FakeFunction {
  int type, op;
};
}  // namespace
static std::atomic<int> g_kernel_launches{0};
FAKE_CU int cuModuleLoadData(void** module, const void* image) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, 4);
  if (magic != 0xba55ed50u) return 200;  // CUDA_ERROR_INVALID_IMAGE
  static int the_module;
  *module = &the_module;
  return kSuccess;
}
FAKE_CU int cuModuleGetFunction(void** f, void*, const char* name) {
  int type = -1, op = -1;
  if (std::sscanf(name, "braid_peer_reduce_%d_%d", &type, &op) != 2) return 500;  // NOT_FOUND
  *f = new FakeFunction{type, op};  // one per lookup; braid looks each up once per context
  return kSuccess;
}
FAKE_CU int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shared, void* s, void** params, void** extra) {
  if (!f || !params || extra || gx == 0 || gy != 1 || gz != 1 || bx == 0 || by != 1 || bz != 1 ||
      shared != 0)
    return kInvalidValue;
  const auto* fn = static_cast<const FakeFunction*>(f);
  const auto& a = *static_cast<const braid::cuda::PeerReduceArgs*>(params[0]);
  if (a.nsrc < 1 || a.nsrc > braid::cuda::kMaxPeerRanks || a.ndst < 1 ||
      a.ndst > braid::cuda::kMaxPeerRanks)
    return kInvalidValue;
  braid::device::PeerReduce r;
  r.type = static_cast<braid::DataType>(fn->type);
  r.op = static_cast<braid::ReduceOp>(fn->op);
  r.divide_by = a.divide_by;
  r.count = a.count;
  r.skip = a.skip;
  r.skip_value = a.skip_value;
  r.pairwise = a.pairwise != 0;
  if (a.late) {
    // The kernel's own reading of late pointers (after `skip`, as it runs).
    r.late = a.late;
    r.late_src = a.nsrc;
    r.late_dst = a.ndst;
  } else {
    for (int k = 0; k < a.nsrc; ++k) r.src.push_back(a.src[k]);
    for (int k = 0; k < a.ndst; ++k) r.dst.push_back(a.dst[k]);
  }
  g_kernel_launches.fetch_add(1);
  return Code(Dev().launchPeerReduce(r, s));
}
FAKE_CU int braidFakeCudaKernelLaunches() {
  return g_kernel_launches.load();
}

// Test hooks.
FAKE_CU void* braidFakeCudaHostView(void* p, size_t bytes) {
  auto r = Dev().hostView(p, bytes);
  return r.ok() ? *r : nullptr;
}
FAKE_CU int braidFakeCudaSetCapturing(void* s, int on) {
  return Code(Dev().setCapturing(s, on != 0));
}
FAKE_CU int braidFakeCudaFreesWhileWaiting() {
  return g_frees_while_waiting.load();
}
// The next `n` cuIpcOpenMemHandle calls fail (a peer the driver cannot map).
FAKE_CU void braidFakeCudaFailIpcOpens(int n) {
  g_fail_ipc_opens.store(n);
}
FAKE_CU size_t braidFakeCudaDeviceAllocations() {
  return Dev().deviceAllocations();
}
