// ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd over braid's groups, which already fuse
// sends and receives and run the inits of a group concurrently. The shim only tracks the
// nesting depth (to report an unmatched ncclGroupEnd as NCCL does) and frees the temporary
// copies that recorded calls still read.
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "nccl/shim.h"

namespace braid::nccl {

namespace {

thread_local int t_depth = 0;

std::vector<void*>& Deferred() {
  thread_local std::vector<void*> deferred;
  return deferred;
}

constexpr unsigned kSimInfoMagic = 0x74685283;

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
  if (--t_depth == 0) {
    for (void* p : Deferred()) std::free(p);
    Deferred().clear();
  }
  return FromBraid(r, "ncclGroupEnd");
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
  // braid cannot discard a recorded group, so the group runs and its measured time is the
  // estimate (see nccl.h).
  auto start = std::chrono::steady_clock::now();
  ncclResult_t r = pncclGroupEnd();
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  // A caller's older struct may end before the field.
  if (simInfo->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
    simInfo->estimatedTime = static_cast<float>(us);
  return r;
}
NCCL_WEAK_ALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))
