// How many CPUs this process may run on: what decides whether ranks that wait should spin
// (a core each) or yield (more ranks than cores, e.g. 8 ranks on a 2-core CI machine).
#pragma once

namespace braid {

// CPUs in this process's affinity mask (sched_getaffinity), at least 1. Cached: read once.
int UsableCpus();

}  // namespace braid
