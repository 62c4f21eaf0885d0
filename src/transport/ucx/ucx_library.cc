#include "transport/ucx/ucx_library.h"

#include <dlfcn.h>
#include <signal.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace braid::ucx {
namespace {

// Sonames of Debian's libucx0 (and of UCX's own builds): the ABI braid was compiled against.
constexpr const char* kLibraries[] = {"libucs.so.0", "libuct.so.0", "libucp.so.0"};

Result<const Library*> LoadOnce() {
  // What the process's signals did before libucs installed its handlers (NSIG: every signal,
  // since UCX_ERROR_SIGNALS may name any).
  static struct sigaction before[NSIG];
  for (int s = 1; s < NSIG; ++s) sigaction(s, nullptr, &before[s]);
  void* handles[3] = {};
  for (int i = 0; i < 3; ++i) {
    // RTLD_NODELETE: never unloaded (UCX keeps global state, threads and hooks), so the handles
    // are never closed either.
    handles[i] = dlopen(kLibraries[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handles[i]) {
      const char* why = dlerror();
      return SystemError(std::string("ucx: cannot load ") + kLibraries[i] + " (" +
                         (why ? why : "unknown error") +
                         "): install UCX (Debian: libucx0) or leave ucx out of BRAID_TRANSPORTS");
    }
  }
  if (!std::getenv("UCX_HANDLE_ERRORS"))
    for (int s = 1; s < NSIG; ++s) {
      struct sigaction now;
      if (sigaction(s, nullptr, &now) == 0 && now.sa_handler != before[s].sa_handler)
        sigaction(s, &before[s], nullptr);
    }
  static Library lib;
  std::string missing;
  auto find = [&](const char* name) -> void* {
    for (void* h : handles)
      if (void* f = dlsym(h, name)) return f;
    missing += std::string(missing.empty() ? "" : ", ") + name;
    return nullptr;
  };
#define BRAID_UCX_FIND(name) lib.name = reinterpret_cast<decltype(lib.name)>(find(#name));
  BRAID_UCX_FUNCTIONS(BRAID_UCX_FIND)
#undef BRAID_UCX_FIND
  if (!missing.empty())
    return SystemError("ucx: the installed UCX lacks " + missing +
                       " (braid was built against the UCX " + std::to_string(UCP_API_MAJOR) + "." +
                       std::to_string(UCP_API_MINOR) + " API)");
  lib.version = lib.ucp_get_version_string();
  return &lib;
}

}  // namespace

Result<const Library*> Load() {
  static std::once_flag once;
  static Result<const Library*> loaded = InternalError("ucx: not loaded");
  std::call_once(once, [] { loaded = LoadOnce(); });
  return loaded;
}

std::string StatusText(ucs_status_t status) {
  auto lib = Load();
  if (lib.ok()) return (*lib)->ucs_status_string(status);
  return "UCX status " + std::to_string(static_cast<int>(status));
}

}  // namespace braid::ucx
