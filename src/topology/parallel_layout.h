// Laying out tensor-, pipeline- and data-parallel groups on a topology: the Holmes scheme
// (issue 9). Training on a cluster whose nodes sit on different fabrics (some InfiniBand, some
// RoCE, Ethernet between them) goes fastest when the heavy, bandwidth-bound traffic stays on one
// fabric: tensor-parallel groups inside a node, each pipeline stage's data-parallel groups on one
// RDMA fabric (their gradient all-reduce is the largest collective of a step), and only the
// pipeline's point-to-point activations crossing the slow links between fabrics. Holmes also
// sizes the stages to their speed: layers per stage in proportion to each stage's measured
// throughput.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "topology/topology.h"

namespace braid::topo {

struct ParallelDegrees {
  int tp = 1;  // tensor parallel: ranks of one layer's shards
  int pp = 1;  // pipeline stages
  int dp = 1;  // data-parallel replicas
};

struct ParallelLayout {
  ParallelDegrees degrees;
  // The slot (Slots(t) index, i.e. the rank when ranks are placed on slots in order) of tensor
  // rank `t` of replica `d` in stage `p`: slot_of[(p * dp + d) * tp + t].
  std::vector<int> slot_of;
  // Per stage: the fabric (NicType) its data-parallel groups run on.
  std::vector<NicType> stage_fabric;
  // Pipeline edges (stage p to p + 1) that leave a fabric: the fewest the topology allows.
  int cross_fabric_edges = 0;
  std::string explain;  // one paragraph: what went where and why

  int slot(int p, int d, int t) const { return slot_of[(p * degrees.dp + d) * degrees.tp + t]; }
};

// The Holmes layout of `deg` on `t`. Needs tp * pp * dp == the number of slots, tp dividing every
// node's slot count (a tensor-parallel group never leaves its node), and every pipeline stage's
// dp groups fitting in one fabric group (FabricGroups): otherwise an InvalidArgument saying which
// rule the degrees break and what the topology offers.
Result<ParallelLayout> HolmesLayout(const Topology& t, const ParallelDegrees& deg);

// Holmes' self-adapting split: `layers` layers over stages in proportion to `stage_speed`
// (throughput, any unit, > 0), each stage at least one layer, the rest by largest remainder
// (ties to the earlier stage). InvalidArgument for no stages, a speed that is not positive and
// finite, or fewer layers than stages.
Result<std::vector<int>> SplitLayers(int layers, const std::vector<double>& stage_speed);

}  // namespace braid::topo
