// Internals shared by the NCCL shim's translation units: export macros, error reporting and
// argument checks with NCCL's codes, and the mapping between NCCL's and braid's handles.
//
// The shim is a thin layer over braid's public C API (include/braid/braid.h) only: an
// ncclComm_t is a braidComm_t, ncclDataType_t and ncclRedOp_t values are braid's, and status
// codes 0..7 are equal. Everything NCCL checks before touching a communicator is checked here,
// so bad input gets NCCL's error code and a message from ncclGetLastError().
#pragma once

#include <cstddef>
#include <string>

#include "braid/braid.h"
#include "nccl.h"

// Each API function is defined once under its strong `pnccl` name; the plain `nccl` name is a
// weak alias of it (NCCL's convention, so profilers can interpose on either name).
#define NCCL_API_EXPORT extern "C" __attribute__((visibility("default")))
#define NCCL_WEAK_ALIAS(ret, name, params) \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name params;

namespace braid::nccl {

inline braidComm_t B(ncclComm_t c) {
  return reinterpret_cast<braidComm_t>(c);
}
inline braidComm_t* B(ncclComm_t* c) {
  return reinterpret_cast<braidComm_t*>(c);
}
inline braidDataType_t B(ncclDataType_t t) {
  return static_cast<braidDataType_t>(t);
}
inline braidRedOp_t B(ncclRedOp_t op) {
  return static_cast<braidRedOp_t>(op);
}

// Size in bytes of a valid NCCL data type.
size_t TypeSize(ncclDataType_t t);

// ------------------------------------------------------------------ errors

// Records `message` as the calling thread's last error (what ncclGetLastError() returns), logs
// it when NCCL_DEBUG/BRAID_DEBUG asks for warnings, and returns `code`.
ncclResult_t Fail(ncclResult_t code, std::string message);

// Maps a braid status onto NCCL's. On failure the thread's last error becomes braid's message
// prefixed with `func`. Timeouts become ncclRemoteError (no progress almost always means a peer
// died, stalled or the network broke: NCCL's meaning of ncclRemoteError); an aborted
// communicator becomes ncclInvalidUsage (the application aborted it itself).
ncclResult_t FromBraid(braidResult_t r, const char* func);
// The NCCL code of a braid status, without touching the last error.
ncclResult_t MapStatus(braidResult_t r);

// The calling thread's last error, read/written by ncclGetLastError().
std::string& LastError();

// ------------------------------------------------------------------ argument checks
// Each returns ncclSuccess or records a message and returns NCCL's code for the problem.

ncclResult_t CheckComm(ncclComm_t comm, const char* func);
ncclResult_t CheckType(ncclDataType_t t, const char* func);
ncclResult_t CheckOp(ncclRedOp_t op, const char* func);
ncclResult_t CheckPtr(const void* p, const char* what, const char* func);
// Rank and size of `comm` into *rank / *nranks; both -1 while braid cannot say yet (e.g. a
// non-blocking init in progress), in which case the range checks are left to braid.
void CommShape(ncclComm_t comm, int* rank, int* nranks);
// `value` (a root or peer) must be a rank of a communicator of `nranks` ranks.
ncclResult_t CheckRank(int value, int nranks, const char* what, const char* func);
// count * elements must fit a size_t of bytes.
ncclResult_t CheckBytes(size_t count, size_t elements, ncclDataType_t t, const char* func);

// Returns from the calling function unless `expr` (an ncclResult_t) is ncclSuccess.
#define NCCL_CHECK(expr)                                    \
  do {                                                      \
    ncclResult_t braid_nccl_r_ = (expr);                    \
    if (braid_nccl_r_ != ncclSuccess) return braid_nccl_r_; \
  } while (0)

// ------------------------------------------------------------------ configuration

// Translates an NCCL config (may be NULL) into braid's, honouring the size/magic/version
// contract: at most min(config->size, sizeof(ncclConfig_t)) bytes are read, fields newer than
// config->version are ignored, and values NCCL rejects are rejected with ncclInvalidArgument.
ncclResult_t TranslateConfig(const ncclConfig_t* config, const char* func, braidConfig_t* out);

// Gives NCCL_* environment variables their BRAID_* meaning where braid's configuration table
// does not alias them itself (or not with NCCL's value grammar: NCCL_ALGO), by setting the
// BRAID_* name when the user has not; once per process, before the first communicator exists.
void ApplyNcclEnvironment();

// ------------------------------------------------------------------ groups

// Depth of the calling thread's ncclGroupStart() nesting.
int GroupDepth();
// Frees `p` (from malloc) now, or at the outermost ncclGroupEnd() when called inside a group
// (a recorded call may still read it).
void FreeAfterGroup(void* p);

// ------------------------------------------------------------------ registrations

// Drops `comm`'s buffer and window registrations (memory.cc): a destroy or an abort releases
// them, as NCCL's does, so that a program need not deregister before it destroys.
// `keep_mappings`: the peer windows' mappings are left open (leaked), because device work that
// reads them may still run (an abort that could not wait for it).
void DropRegistrations(ncclComm_t comm, bool keep_mappings = false);

}  // namespace braid::nccl
