// ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd over braid's groups, which already fuse
// sends and receives, run the inits of a group concurrently and estimate a group without
// running it. The shim only tracks the nesting depth (to report an unmatched ncclGroupEnd as
// NCCL does) and frees the temporary copies that recorded calls still read.
#include <cstdlib>
#include <string>
#include <vector>

#include "nccl/shim.h"
#include "nccl/stream_path.h"

namespace braid::nccl {

namespace {

thread_local int t_depth = 0;

std::vector<void*>& Deferred() {
  thread_local std::vector<void*> deferred;
  return deferred;
}

constexpr unsigned kSimInfoMagic = 0x74685283;

// After braid closed one level of the group: the outermost level frees the copies. Returns
// whether it was the outermost.
bool CloseLevel() {
  if (--t_depth > 0) return false;
  for (void* p : Deferred()) std::free(p);
  Deferred().clear();
  return true;
}

}  // namespace

int GroupDepth() {
  return t_depth;
}

void FreeAfterGroup(void* p) {
  if (t_depth == 0) {
    std::free(p);
    return;
  }
  Deferred().push_back(p);
}

}  // namespace braid::nccl

using namespace braid::nccl;

NCCL_API_EXPORT ncclResult_t pncclGroupStart(void) {
  braidResult_t r = braidGroupStart();
  if (r == braidSuccess) ++t_depth;
  return FromBraid(r, "ncclGroupStart");
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGroupStart, (void))

NCCL_API_EXPORT ncclResult_t pncclGroupEnd(void) {
  if (t_depth == 0)
    return Fail(ncclInvalidUsage, "ncclGroupEnd: no matching ncclGroupStart in this thread");
  braidResult_t r = braidGroupEnd();
  ncclResult_t res = FromBraid(r, "ncclGroupEnd");
  // The group's calls on device buffers were collected, not given to braid: ordered on their
  // streams now, at the outermost level.
  if (CloseLevel()) {
    ncclResult_t s = SubmitGroupStreamCalls();
    if (res == ncclSuccess) res = s;
  }
  return res;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGroupEnd, (void))

NCCL_API_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const char* func = "ncclGroupSimulateEnd";
  NCCL_CHECK(CheckPtr(simInfo, "simInfo", func));
  if (simInfo->magic != kSimInfoMagic)
    return Fail(ncclInvalidArgument,
                std::string(func) + ": simInfo not initialized via NCCL_SIM_INFO_INITIALIZER");
  if (t_depth == 0)
    return Fail(ncclInvalidUsage,
                std::string(func) + ": no matching ncclGroupStart in this thread");
  // Nothing runs: braid costs the recorded calls with its simulator and discards them.
  double seconds = 0;
  braidResult_t r = braidGroupSimulateEnd(&seconds);
  // As in NCCL, an inner level only closes itself and leaves simInfo alone. NCCL reports
  // microseconds; a caller's older struct may end before the field.
  const bool outermost = CloseLevel();
  if (outermost)
    DiscardGroupStreamCalls();  // device calls are not costed yet: dropped, as the rest
  if (outermost && r == braidSuccess &&
      simInfo->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
    simInfo->estimatedTime = static_cast<float>(seconds * 1e6);
  return FromBraid(r, func);
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))
