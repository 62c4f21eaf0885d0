#include "common/device_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>

namespace braid_perf {

namespace {

// dlsym of the first of `names` that `lib` has (the _v2 names are the current ABI of several
// driver calls; the plain names are older drivers').
template <typename Fn>
bool Bind(void* lib, Fn* out, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* f = dlsym(lib, n)) {
      *out = reinterpret_cast<Fn>(f);
      return true;
    }
  }
  return false;
}

// Binds required entry points of `lib` (Bind), remembering the first one it lacks (by its plain
// name, the last of its names).
struct Binder {
  void* lib;
  std::string missing;
  template <typename Fn>
  void operator()(Fn* out, std::initializer_list<const char*> names) {
    if (!Bind(lib, out, names) && missing.empty()) missing = *(names.end() - 1);
  }
};

std::string DlError() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The library this build made (perf/CMakeLists.txt), when it is still there; else the name the
// loader looks up (LD_LIBRARY_PATH, the binary's run path, the system's).
std::string DefaultNccl() {
#ifdef BRAID_PERF_BUILD_NCCL
  if (access(BRAID_PERF_BUILD_NCCL, R_OK) == 0) return BRAID_PERF_BUILD_NCCL;
#endif
  return "libnccl.so.2";
}

bool LoadDriver(DeviceApi* a, std::string* why) {
  const char* env = std::getenv("BRAID_PERF_LIBCUDA");
  a->libcuda = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(a->libcuda.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    *why = "loading the CUDA driver " + a->libcuda + ": " + DlError() +
           " (no GPU driver on this machine?)";
    return false;
  }
  CudaDriver& c = a->cu;
  Binder need{lib, {}};
  need(&c.init, {"cuInit"});
  need(&c.deviceGetCount, {"cuDeviceGetCount"});
  need(&c.deviceGet, {"cuDeviceGet"});
  need(&c.primaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  need(&c.ctxSetCurrent, {"cuCtxSetCurrent"});
  need(&c.memAlloc, {"cuMemAlloc_v2", "cuMemAlloc"});
  need(&c.memFree, {"cuMemFree_v2", "cuMemFree"});
  need(&c.memcpyAsync, {"cuMemcpyAsync"});
  need(&c.streamCreate, {"cuStreamCreate"});
  need(&c.streamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"});
  need(&c.streamSynchronize, {"cuStreamSynchronize"});
  if (!need.missing.empty()) {
    *why = a->libcuda + " has no " + need.missing;
    return false;
  }
  Bind(lib, &c.getErrorString, {"cuGetErrorString"});
  Bind(lib, &c.deviceGetName, {"cuDeviceGetName"});
  int rc = c.init(0);
  if (rc != 0) {
    *why = "cuInit: " + a->cudaError(rc);
    return false;
  }
  rc = c.deviceGetCount(&a->device_count);
  if (rc != 0 || a->device_count <= 0) {
    *why = rc != 0 ? "cuDeviceGetCount: " + a->cudaError(rc) : "the CUDA driver sees no device";
    return false;
  }
  return true;
}

bool LoadNccl(DeviceApi* a, std::string* why) {
  const char* env = std::getenv("BRAID_PERF_NCCL");
  a->libnccl = env && *env ? env : DefaultNccl();
  // RTLD_LOCAL: a second NCCL never lends its symbols to anything else in the process.
  void* lib = dlopen(a->libnccl.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "loading NCCL " + a->libnccl + ": " + DlError();
    return false;
  }
  NcclApi& n = a->nccl;
  Binder need{lib, {}};
  need(&n.getVersion, {"ncclGetVersion"});
  need(&n.getUniqueId, {"ncclGetUniqueId"});
  need(&n.commInitRank, {"ncclCommInitRank"});
  need(&n.commDestroy, {"ncclCommDestroy"});
  need(&n.getErrorString, {"ncclGetErrorString"});
  need(&n.allReduce, {"ncclAllReduce"});
  need(&n.allGather, {"ncclAllGather"});
  need(&n.reduceScatter, {"ncclReduceScatter"});
  need(&n.broadcast, {"ncclBroadcast"});
  need(&n.reduce, {"ncclReduce"});
  need(&n.send, {"ncclSend"});
  need(&n.recv, {"ncclRecv"});
  need(&n.groupStart, {"ncclGroupStart"});
  need(&n.groupEnd, {"ncclGroupEnd"});
  need(&n.redOpCreatePreMulSum, {"ncclRedOpCreatePreMulSum"});
  need(&n.redOpDestroy, {"ncclRedOpDestroy"});
  need(&n.commGetAsyncError, {"ncclCommGetAsyncError"});
  if (!need.missing.empty()) {
    *why = a->libnccl + " has no " + need.missing;
    return false;
  }
  Bind(lib, &n.getLastError, {"ncclGetLastError"});  // NCCL >= 2.13
  Bind(lib, &n.commRegister, {"ncclCommRegister"});
  Bind(lib, &n.commDeregister, {"ncclCommDeregister"});
  Bind(lib, &n.commWindowRegister, {"ncclCommWindowRegister"});
  Bind(lib, &n.commWindowDeregister, {"ncclCommWindowDeregister"});
  if (n.getVersion(&a->nccl_version) != ncclSuccess) a->nccl_version = 0;
  return true;
}

}  // namespace

std::string DeviceApi::cudaError(int code) const {
  const char* text = nullptr;
  if (cu.getErrorString && cu.getErrorString(code, &text) == 0 && text)
    return std::string(text) + " (" + std::to_string(code) + ")";
  return "CUDA error " + std::to_string(code);
}

bool LoadDeviceApi(DeviceApi* out, std::string* why) {
  return LoadDriver(out, why) && LoadNccl(out, why);
}

}  // namespace braid_perf
