// braidCommShrink: see braid.h.
#include "core/api_support.h"

using namespace braid;

extern "C" braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int excludeCount,
                                         braidComm_t* newcomm, const braidConfig_t* config, int flags) {
  return Fail(InvalidUsage("braidCommShrink: not implemented yet"));
}
