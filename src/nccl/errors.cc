// Error reporting of the NCCL shim: NCCL's status codes, the thread's last-error message and
// the optional warning log.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "nccl/shim.h"

namespace braid::nccl {

namespace {

// Warnings go to stderr when BRAID_DEBUG (or NCCL_DEBUG) asks for WARN or more, as NCCL users
// expect from NCCL_DEBUG=WARN; quiet otherwise.
bool WarningsEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("BRAID_DEBUG");
    if (!v || !*v) v = std::getenv("NCCL_DEBUG");
    if (!v) return false;
    return strcasecmp(v, "WARN") == 0 || strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0;
  }();
  return enabled;
}

}  // namespace

std::string& LastError() {
  thread_local std::string message;
  return message;
}

ncclResult_t Fail(ncclResult_t code, std::string message) {
  if (WarningsEnabled()) std::fprintf(stderr, "braid nccl WARN %s\n", message.c_str());
  LastError() = std::move(message);
  return code;
}

ncclResult_t MapStatus(braidResult_t r) {
  switch (r) {
    case braidSuccess:
      return ncclSuccess;
    case braidInProgress:
      return ncclInProgress;
    case braidErrSystem:
      return ncclSystemError;
    case braidErrInternal:
      return ncclInternalError;
    case braidErrInvalidArgument:
      return ncclInvalidArgument;
    case braidErrInvalidUsage:
    case braidErrAborted:
      return ncclInvalidUsage;
    case braidErrRemote:
    case braidErrTimeout:
      return ncclRemoteError;
    default:
      return ncclInternalError;
  }
}

ncclResult_t FromBraid(braidResult_t r, const char* func) {
  ncclResult_t code = MapStatus(r);
  if (code == ncclSuccess || code == ncclInProgress) return code;
  // The thread's message, never the communicator's: the communicator may already have been
  // released by an ncclCommAbort() from another thread.
  const char* m = braidGetLastError(nullptr);
  std::string message = std::string(func) + ": ";
  if (m && *m)
    message += m;
  else
    message += braidGetErrorString(r);
  if (r == braidErrTimeout) message += " [braid timeout, reported as ncclRemoteError]";
  if (r == braidErrAborted) message += " [communicator aborted, reported as ncclInvalidUsage]";
  return Fail(code, std::move(message));
}

}  // namespace braid::nccl

using braid::nccl::LastError;

NCCL_API_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (see ncclGetLastError())";
    case ncclSystemError:
      return "system error: the OS refused something (see ncclGetLastError())";
    case ncclInternalError:
      return "internal error: please report ncclGetLastError()'s message to braid's developers";
    case ncclInvalidArgument:
      return "invalid argument (see ncclGetLastError())";
    case ncclInvalidUsage:
      return "invalid usage (see ncclGetLastError())";
    case ncclRemoteError:
      return "remote process exited, stalled or there was a network error (see "
             "ncclGetLastError())";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}
NCCL_WEAK_ALIAS(const char*, ncclGetErrorString, (ncclResult_t result))

NCCL_API_EXPORT const char* pncclGetLastError(ncclComm_t comm) {
  std::string& m = LastError();
  // No error seen by this thread: the communicator may still hold one (set by another thread
  // or found asynchronously).
  if (m.empty() && comm) {
    const char* c = braidGetLastError(braid::nccl::B(comm));
    if (c) m = c;
  }
  return m.c_str();
}
NCCL_WEAK_ALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

// Logging is configured from the environment when it is first used; nothing to reset.
NCCL_API_EXPORT void pncclResetDebugInit(void) {}
NCCL_WEAK_ALIAS(void, ncclResetDebugInit, (void))

// Exported by NVIDIA's library under this name without a `p` twin; kept for symbol parity.
NCCL_API_EXPORT void ncclResetDebugInitInternal(void) {}
