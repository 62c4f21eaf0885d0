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
  struct Need {
    bool ok;
    const char* name;
  };
  for (const Need& n : {
           Need{Bind(lib, &c.init, {"cuInit"}), "cuInit"},
           Need{Bind(lib, &c.deviceGetCount, {"cuDeviceGetCount"}), "cuDeviceGetCount"},
           Need{Bind(lib, &c.deviceGet, {"cuDeviceGet"}), "cuDeviceGet"},
           Need{Bind(lib, &c.primaryCtxRetain, {"cuDevicePrimaryCtxRetain"}),
                "cuDevicePrimaryCtxRetain"},
           Need{Bind(lib, &c.ctxSetCurrent, {"cuCtxSetCurrent"}), "cuCtxSetCurrent"},
           Need{Bind(lib, &c.memAlloc, {"cuMemAlloc_v2", "cuMemAlloc"}), "cuMemAlloc"},
           Need{Bind(lib, &c.memFree, {"cuMemFree_v2", "cuMemFree"}), "cuMemFree"},
           Need{Bind(lib, &c.memcpyAsync, {"cuMemcpyAsync"}), "cuMemcpyAsync"},
           Need{Bind(lib, &c.streamCreate, {"cuStreamCreate"}), "cuStreamCreate"},
           Need{Bind(lib, &c.streamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"}),
                "cuStreamDestroy"},
           Need{Bind(lib, &c.streamSynchronize, {"cuStreamSynchronize"}), "cuStreamSynchronize"},
       }) {
    if (!n.ok) {
      *why = a->libcuda + " has no " + n.name;
      return false;
    }
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
  struct Need {
    bool ok;
    const char* name;
  };
  for (const Need& x : {
           Need{Bind(lib, &n.getVersion, {"ncclGetVersion"}), "ncclGetVersion"},
           Need{Bind(lib, &n.getUniqueId, {"ncclGetUniqueId"}), "ncclGetUniqueId"},
           Need{Bind(lib, &n.commInitRank, {"ncclCommInitRank"}), "ncclCommInitRank"},
           Need{Bind(lib, &n.commDestroy, {"ncclCommDestroy"}), "ncclCommDestroy"},
           Need{Bind(lib, &n.getErrorString, {"ncclGetErrorString"}), "ncclGetErrorString"},
           Need{Bind(lib, &n.allReduce, {"ncclAllReduce"}), "ncclAllReduce"},
           Need{Bind(lib, &n.allGather, {"ncclAllGather"}), "ncclAllGather"},
           Need{Bind(lib, &n.reduceScatter, {"ncclReduceScatter"}), "ncclReduceScatter"},
           Need{Bind(lib, &n.broadcast, {"ncclBroadcast"}), "ncclBroadcast"},
           Need{Bind(lib, &n.reduce, {"ncclReduce"}), "ncclReduce"},
           Need{Bind(lib, &n.send, {"ncclSend"}), "ncclSend"},
           Need{Bind(lib, &n.recv, {"ncclRecv"}), "ncclRecv"},
           Need{Bind(lib, &n.groupStart, {"ncclGroupStart"}), "ncclGroupStart"},
           Need{Bind(lib, &n.groupEnd, {"ncclGroupEnd"}), "ncclGroupEnd"},
           Need{Bind(lib, &n.redOpCreatePreMulSum, {"ncclRedOpCreatePreMulSum"}),
                "ncclRedOpCreatePreMulSum"},
           Need{Bind(lib, &n.redOpDestroy, {"ncclRedOpDestroy"}), "ncclRedOpDestroy"},
           Need{Bind(lib, &n.commGetAsyncError, {"ncclCommGetAsyncError"}),
                "ncclCommGetAsyncError"},
       }) {
    if (!x.ok) {
      *why = a->libnccl + " has no " + x.name;
      return false;
    }
  }
  Bind(lib, &n.getLastError, {"ncclGetLastError"});  // NCCL >= 2.13
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
