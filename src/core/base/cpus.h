// Which CPUs the ranks of a host may run on: what decides whether ranks that wait should spin
// (a core each) or yield (more ranks than cores, e.g. 8 ranks on a 2-core CI machine). Ranks pinned
// to a core each (mpirun --bind-to core, Slurm) see one CPU each, so the count that matters is that
// of the union of the ranks' masks, which every rank computes alike from the init exchange.
#pragma once

#include <string>
#include <vector>

namespace braid {

// This process's affinity mask (sched_getaffinity) as hex digits, lowest CPUs first: digit k
// holds CPUs 4k..4k+3. "1" when it cannot be read.
std::string AffinityMaskHex();

// The CPUs in the union of `masks` (AffinityMaskHex strings), at least 1; -1 when one is not
// such a string (it came from another rank).
int CpusInUnion(const std::vector<std::string>& masks);

}  // namespace braid
