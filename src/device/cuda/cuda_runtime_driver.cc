#include "device/cuda/cuda_runtime_driver.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "device/cuda/peer_reduce_args.h"

#ifdef BRAID_PEER_REDUCE_FATBIN
// The peer-reduce kernels' fatbin (src/CMakeLists.txt embeds device/cuda/peer_reduce.cu's).
extern "C" const unsigned char braid_peer_reduce_fatbin[];
#endif

namespace braid::device {

namespace {

// Driver API declarations (cuda.h), so no CUDA header is needed to build.
using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
constexpr CUresult kSuccess = 0;
constexpr CUresult kNotReady = 600;  // CUDA_ERROR_NOT_READY

// CUpointer_attribute values.
constexpr int kAttrMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrIsManaged = 8;      // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr int kAttrDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kAttrRangeStart = 11;    // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kAttrRangeSize = 12;     // CU_POINTER_ATTRIBUTE_RANGE_SIZE
// CUmemorytype values.
constexpr unsigned kTypeHost = 1;
constexpr unsigned kTypeDevice = 2;
constexpr unsigned kTypeUnified = 4;
constexpr unsigned kHostAllocPortable = 0x01;   // CU_MEMHOSTALLOC_PORTABLE
constexpr unsigned kHostAllocDeviceMap = 0x02;  // CU_MEMHOSTALLOC_DEVICEMAP
constexpr unsigned kStreamNonBlocking = 0x1;    // CU_STREAM_NON_BLOCKING
constexpr unsigned kWaitValueGeq = 0x0;         // CU_STREAM_WAIT_VALUE_GEQ (cyclic)
constexpr unsigned kWriteValueDefault = 0x0;    // CU_STREAM_WRITE_VALUE_DEFAULT
constexpr int kCaptureNone = 0;                 // CU_STREAM_CAPTURE_STATUS_NONE
constexpr unsigned kIpcLazyPeerAccess = 0x1;    // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
constexpr CUresult kInvalidContext = 201;       // CUDA_ERROR_INVALID_CONTEXT

// CUipcMemHandle: 64 opaque bytes, passed by value to cuIpcOpenMemHandle.
struct CUipcMemHandle {
  char reserved[IpcHandle::kBytes];
};
static_assert(sizeof(CUipcMemHandle) == 64);

struct Api {
  CUresult (*pointerGetAttributes)(unsigned, int*, void**, CUdeviceptr) = nullptr;
  CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memFree)(CUdeviceptr) = nullptr;
  CUresult (*memHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*memFreeHost)(void*) = nullptr;
  CUresult (*memcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*streamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamQuery)(CUstream) = nullptr;
  CUresult (*streamIsCapturing)(CUstream, int*) = nullptr;
  CUresult (*streamSynchronize)(CUstream) = nullptr;
  CUresult (*streamWriteValue32)(CUstream, CUdeviceptr, unsigned, unsigned) = nullptr;
  CUresult (*streamWaitValue32)(CUstream, CUdeviceptr, unsigned, unsigned) = nullptr;
  CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*getErrorString)(CUresult, const char**) = nullptr;
  // Optional (peer memory only): a driver without them still serves everything else.
  CUresult (*ipcGetMemHandle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*ipcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;
  CUresult (*ipcCloseMemHandle)(CUdeviceptr) = nullptr;
  // Optional (the peer-reduce kernels, loaded from the embedded fatbin).
  CUresult (*moduleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**) = nullptr;
};

// dlsym of the first of `names` that exists (the _v2 names are the current ABI of several calls).
template <typename Fn>
bool Bind(void* lib, Fn* out, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* f = dlsym(lib, n)) {
      *out = reinterpret_cast<Fn>(f);
      return true;
    }
  return false;
}

CUdeviceptr Dev(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

class CudaDriverRuntime final : public DeviceRuntime {
 public:
  explicit CudaDriverRuntime(const Api& api) : api_(api) {}

  const char* name() const override { return "cuda"; }
  bool deviceMemoryHostAccessible() const override { return false; }

  Result<PointerInfo> classify(const void* p) override {
    PointerInfo info;
    if (!p) return info;
    unsigned type = 0, managed = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    int attrs[] = {kAttrMemoryType, kAttrIsManaged, kAttrDeviceOrdinal, kAttrRangeStart,
                   kAttrRangeSize};
    void* data[] = {&type, &managed, &ordinal, &start, &size};
    // Pointers CUDA does not know (pageable host memory) succeed with memory type 0.
    if (api_.pointerGetAttributes(5, attrs, data, Dev(p)) != kSuccess) return info;
    if (managed || type == kTypeUnified)
      info.kind = MemoryKind::kManaged;
    else if (type == kTypeDevice)
      info.kind = MemoryKind::kDevice;
    else if (type == kTypeHost)
      info.kind = MemoryKind::kPinnedHost;
    else
      return info;
    info.device = info.onDevice() ? ordinal : -1;
    info.base = reinterpret_cast<const void*>(start);
    info.size = size;
    return info;
  }

  Result<void*> allocDevice(size_t bytes) override {
    CUdeviceptr p = 0;
    BRAID_RETURN_IF_ERROR(Check(api_.memAlloc(&p, bytes), "cuMemAlloc"));
    return reinterpret_cast<void*>(p);
  }
  Status freeDevice(void* p) override { return Check(api_.memFree(Dev(p)), "cuMemFree"); }
  Result<void*> allocHostMapped(size_t bytes) override {
    void* p = nullptr;
    BRAID_RETURN_IF_ERROR(Check(
        api_.memHostAlloc(&p, bytes, kHostAllocPortable | kHostAllocDeviceMap), "cuMemHostAlloc"));
    return p;
  }
  Status freeHostMapped(void* p) override { return Check(api_.memFreeHost(p), "cuMemFreeHost"); }

  Result<StreamHandle> createStream() override {
    CUstream s = nullptr;
    BRAID_RETURN_IF_ERROR(Check(api_.streamCreate(&s, kStreamNonBlocking), "cuStreamCreate"));
    return s;
  }
  Status destroyStream(StreamHandle s) override {
    return Check(api_.streamDestroy(s), "cuStreamDestroy");
  }
  Status checkStream(StreamHandle s) override {
    // First whether it captures: cuStreamQuery on a capturing stream would invalidate the capture.
    int capture = kCaptureNone;
    BRAID_RETURN_IF_ERROR(Check(api_.streamIsCapturing(s, &capture), "cuStreamIsCapturing"));
    if (capture != kCaptureNone)
      return InvalidUsage(
          "the stream is capturing a CUDA graph: braid cannot capture a stream-ordered call yet "
          "(a graph replays its flag writes, while braid's agent serves each call once); call it "
          "outside the capture");
    const CUresult r = api_.streamQuery(s);
    if (r == kSuccess || r == kNotReady) return Status::Ok();
    return Check(r, "cuStreamQuery (is the stream valid and its context current?)");
  }
  Status copyAsync(void* dst, const void* src, size_t bytes, StreamHandle s) override {
    return Check(api_.memcpyAsync(Dev(dst), Dev(src), bytes, s), "cuMemcpyAsync");
  }
  // Host-mapped flags are addressed by their host pointers: with unified addressing a
  // cuMemHostAlloc pointer is the device's pointer too.
  Status writeValue32(StreamHandle s, uint32_t* flag, uint32_t value) override {
    return Check(api_.streamWriteValue32(s, Dev(flag), value, kWriteValueDefault),
                 "cuStreamWriteValue32");
  }
  Status waitValue32(StreamHandle s, const uint32_t* flag, uint32_t value) override {
    return Check(api_.streamWaitValue32(s, Dev(flag), value, kWaitValueGeq), "cuStreamWaitValue32");
  }
  Status synchronize(StreamHandle s) override {
    return Check(api_.streamSynchronize(s), "cuStreamSynchronize");
  }

  void hostWriteFlag(uint32_t* flag, uint32_t value) override {
    std::atomic_ref<uint32_t>(*flag).store(value, std::memory_order_release);
  }
  // The GPU writes the flag: no wake-up reaches the host, so poll, yielding first and then
  // sleeping longer and longer (up to 200 us), so a waiting agent costs no core.
  bool hostWaitFlag(const uint32_t* flag, uint32_t value,
                    std::chrono::steady_clock::time_point deadline) override {
    auto nap = std::chrono::microseconds(1);
    for (int i = 0;; ++i) {
      const uint32_t seen =
          std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(flag)).load(std::memory_order_acquire);
      if (FlagReached(seen, value)) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      if (i < 16) {
        sched_yield();
        continue;
      }
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(200));
    }
  }

  Result<IpcHandle> exportAllocation(const void* base) override {
    if (!api_.ipcGetMemHandle) return Unsupported("cuIpcGetMemHandle");
    // cuIpcGetMemHandle accepts any pointer into an allocation and names the whole allocation:
    // refuse an interior pointer here, as the emulated device does, so the base is what peers map.
    auto info = classify(base);
    if (!info.ok()) return info.status();
    if (info->kind != MemoryKind::kDevice || info->base != base)
      return InvalidArgument("cannot export " + PointerText(base) +
                             ": not the start of a device allocation (cuMemAlloc)");
    CUipcMemHandle h{};
    BRAID_RETURN_IF_ERROR(Check(api_.ipcGetMemHandle(&h, Dev(base)), "cuIpcGetMemHandle"));
    IpcHandle out;
    std::memcpy(out.bytes, h.reserved, sizeof(h.reserved));
    return out;
  }
  Result<void*> openPeerAllocation(const IpcHandle& h) override {
    if (!api_.ipcOpenMemHandle) return Unsupported("cuIpcOpenMemHandle");
    CUipcMemHandle in{};
    std::memcpy(in.reserved, h.bytes, sizeof(in.reserved));
    CUdeviceptr p = 0;
    // Lazy peer access: a peer on another GPU of the node is reached over NVLink/PCIe.
    const CUresult r = api_.ipcOpenMemHandle(&p, in, kIpcLazyPeerAccess);
    if (r == kInvalidContext)
      return InvalidUsage(
          "cuIpcOpenMemHandle: the handle names an allocation of this process, or no context is "
          "current (CUDA error 201)");
    BRAID_RETURN_IF_ERROR(Check(r, "cuIpcOpenMemHandle"));
    return reinterpret_cast<void*>(p);
  }
  Status closePeerAllocation(void* base) override {
    if (!api_.ipcCloseMemHandle) return Unsupported("cuIpcCloseMemHandle");
    return Check(api_.ipcCloseMemHandle(Dev(base)), "cuIpcCloseMemHandle");
  }

  // The kernels come from the fatbin built into the library (a build without nvcc has none:
  // window calls then stage), loaded per context on first use.
  bool peerReduceAvailable() const override {
#ifdef BRAID_PEER_REDUCE_FATBIN
    return api_.moduleLoadData && api_.moduleGetFunction && api_.launchKernel;
#else
    return false;
#endif
  }
  Status launchPeerReduce(const PeerReduce& r, StreamHandle s) override {
    if (!peerReduceAvailable())
      return SystemError(
          "braid was built without the peer-reduce kernels, or the driver cannot "
          "load them");
    if (!IsValidDataType(static_cast<int>(r.type)) || static_cast<int>(r.op) >= kNumReduceOps ||
        !r.wellFormed())
      return InvalidArgument("peer reduce: a bad type or op, or not 1 to " +
                             std::to_string(cuda::kMaxPeerRanks) +
                             " sources and destinations (as many of each when pairwise)");
    BRAID_ASSIGN_OR_RETURN(CUfunction f,
                           peerReduceFunction(static_cast<int>(r.type), static_cast<int>(r.op)));
    cuda::PeerReduceArgs a{};
    const size_t elt = DataTypeSize(r.type);
    bool vector = true;
    for (size_t k = 0; k < r.src.size(); ++k) {
      a.src[k] = r.src[k];
      vector = vector && reinterpret_cast<uintptr_t>(r.src[k]) % 16 == 0;
    }
    for (size_t k = 0; k < r.dst.size(); ++k) {
      a.dst[k] = r.dst[k];
      vector = vector && reinterpret_cast<uintptr_t>(r.dst[k]) % 16 == 0;
    }
    a.nsrc = static_cast<int32_t>(r.sources());
    a.ndst = static_cast<int32_t>(r.destinations());
    a.late = r.late;  // the kernel checks the late pointers' alignment itself
    a.count = r.count;
    a.divide_by = r.divide_by;
    a.divide_wide = static_cast<double>(r.divide_by);
    a.divide_narrow = static_cast<float>(r.divide_by);
    a.skip = r.skip;
    a.skip_value = r.skip_value;
    a.vector = vector ? 1 : 0;
    a.pairwise = r.pairwise ? 1 : 0;
    // One thread per 16-byte pack (or element), 256 a block, grid-stride beyond 4096 blocks.
    const size_t per_pack = 16 / elt;
    // Pairwise: the whole grid copies one pair after another, so one pair's units size it.
    const uint64_t units = vector ? r.count / per_pack + r.count % per_pack : r.count;
    const unsigned blocks =
        static_cast<unsigned>(std::clamp<uint64_t>((units + 255) / 256, 1, 4096));
    void* params[] = {&a};
    return Check(api_.launchKernel(f, blocks, 1, 1, 256, 1, 1, 0, s, params, nullptr),
                 "cuLaunchKernel (peer reduce)");
  }

  void* currentContext() override {
    CUcontext c = nullptr;
    return api_.ctxGetCurrent(&c) == kSuccess ? c : nullptr;
  }
  Status useContext(void* context) override {
    if (!context) return Status::Ok();
    return Check(api_.ctxSetCurrent(context), "cuCtxSetCurrent");
  }

 private:
  Status Check(CUresult r, const char* call) const {
    if (r == kSuccess) return Status::Ok();
    const char* what = nullptr;
    if (api_.getErrorString) api_.getErrorString(r, &what);
    return Status::Error(ErrorClass::kSystem, std::string(call) + " failed: CUDA error " +
                                                  std::to_string(r) + " (" +
                                                  (what ? what : "unknown") + ")");
  }

  // The kernel for (type, op) in the current context: the module loaded on first use per
  // context, functions looked up once.
  Result<CUfunction> peerReduceFunction(int type, int op) {
#ifdef BRAID_PEER_REDUCE_FATBIN
    CUcontext ctx = nullptr;
    BRAID_RETURN_IF_ERROR(Check(api_.ctxGetCurrent(&ctx), "cuCtxGetCurrent"));
    std::lock_guard<std::mutex> lock(modules_mu_);
    PeerModule& m = modules_[ctx];
    if (!m.module)
      BRAID_RETURN_IF_ERROR(Check(api_.moduleLoadData(&m.module, braid_peer_reduce_fatbin),
                                  "cuModuleLoadData (the peer-reduce kernels)"));
    CUfunction& f = m.functions[type * kNumReduceOps + op];
    if (!f) {
      char name[48];
      cuda::PeerReduceKernelName(type, op, name);
      BRAID_RETURN_IF_ERROR(
          Check(api_.moduleGetFunction(&f, m.module, name), "cuModuleGetFunction"));
    }
    return f;
#else
    (void)type;
    (void)op;
    return SystemError("no peer-reduce kernels in this build");
#endif
  }

  static Status Unsupported(const char* call) {
    return SystemError(std::string("the CUDA driver has no ") + call + ": no peer memory");
  }

  Api api_;
  struct PeerModule {
    CUmodule module = nullptr;
    CUfunction functions[kNumDataTypes * kNumReduceOps] = {};
  };
  std::mutex modules_mu_;
  std::map<CUcontext, PeerModule> modules_;  // never unloaded: kernels may still be queued
};

}  // namespace

std::unique_ptr<DeviceRuntime> LoadCudaDriverRuntime() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) return nullptr;
  Api a;
  const bool ok =
      Bind(lib, &a.pointerGetAttributes, {"cuPointerGetAttributes"}) &&
      Bind(lib, &a.memAlloc, {"cuMemAlloc_v2", "cuMemAlloc"}) &&
      Bind(lib, &a.memFree, {"cuMemFree_v2", "cuMemFree"}) &&
      Bind(lib, &a.memHostAlloc, {"cuMemHostAlloc"}) &&
      Bind(lib, &a.memFreeHost, {"cuMemFreeHost"}) &&
      Bind(lib, &a.memcpyAsync, {"cuMemcpyAsync"}) &&
      Bind(lib, &a.streamCreate, {"cuStreamCreate"}) &&
      Bind(lib, &a.streamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"}) &&
      Bind(lib, &a.streamQuery, {"cuStreamQuery"}) &&
      Bind(lib, &a.streamIsCapturing, {"cuStreamIsCapturing"}) &&
      Bind(lib, &a.streamSynchronize, {"cuStreamSynchronize"}) &&
      Bind(lib, &a.streamWriteValue32, {"cuStreamWriteValue32_v2", "cuStreamWriteValue32"}) &&
      Bind(lib, &a.streamWaitValue32, {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"}) &&
      Bind(lib, &a.ctxGetCurrent, {"cuCtxGetCurrent"}) &&
      Bind(lib, &a.ctxSetCurrent, {"cuCtxSetCurrent"});
  Bind(lib, &a.getErrorString, {"cuGetErrorString"});  // optional: messages only
  Bind(lib, &a.ipcGetMemHandle, {"cuIpcGetMemHandle"});
  Bind(lib, &a.ipcOpenMemHandle, {"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"});
  Bind(lib, &a.ipcCloseMemHandle, {"cuIpcCloseMemHandle"});
  Bind(lib, &a.moduleLoadData, {"cuModuleLoadData"});
  Bind(lib, &a.moduleGetFunction, {"cuModuleGetFunction"});
  Bind(lib, &a.launchKernel, {"cuLaunchKernel"});
  // The handle stays open: the application owns libcuda's lifetime, ours only adds a reference.
  if (!ok) return nullptr;
  return std::make_unique<CudaDriverRuntime>(a);
}

}  // namespace braid::device
