// The planner's model of one sharding configuration (sharding.md section 4): memory per device
// (model states, activations, buffers) and the collectives its step runs, each costed with
// braid's cost model (braidEstimateCollective). Pure functions of the inputs; planner.cc
// enumerates configurations and ranks them with it, and the unit tests check it against the
// spec's formulas. Lins' own terms (section 4.1) are in lins_model.h; Evaluate and MemoryOf
// follow PlanInputs::cost_model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "braid/shard.h"

namespace braid::shard {

// The planner's inputs, checked and normalised (NormalizeInputs).
struct PlanInputs {
  std::map<double, int> buckets;  // bucket size (parameters) -> how many buckets of that size
  double phi = 0;                 // parameters in all
  double max_bucket = 0;
  double e = 2;  // bytes per parameter and gradient element
  int layers = 1, hidden = 0, seq = 0, micro_batch = 1, micro_batches = 1;
  bool recompute = false;
  int R = 1, n = 1;
  double memory = 0;
  braidLinkParams_t link{};
  bool quantization = false, overlap = false, partial_node = false;
  double reserve = 0;
  braidShardCostModel_t cost_model = braidShardCostBraid;
};

// Empty when the inputs are usable; else what is wrong, with the numbers.
std::string NormalizeInputs(const braidShardModel_t* model, const braidShardCluster_t* cluster,
                            const braidShardPlanOptions_t* options, PlanInputs* out);

// One collective the step runs, summed over buckets and micro-batches.
struct PlannedCollective {
  std::string term;  // the part of the step (braidShardPlanTerm_t.term), e.g. "parameter gathers"
  std::string what;  // e.g. "forward all-gather of parameters over 8x128"
  double seconds = 0;
  double send_bytes = 0;   // per rank (the spec's volume: B(k-1)/k, all-reduce twice)
  double inter_bytes = 0;  // per node, across nodes
  double intra_bytes = 0;  // per rank, inside the node
};

struct PlanMemory {
  double states = 0, activations = 0, buffers = 0;
  double total() const { return states + activations + buffers; }
};

// One collective over a group of `intra` ranks in each of `inter` nodes, `sharing` such groups
// on every node (they share the node's inter-node link).
struct Group {
  int intra = 1, inter = 1, sharing = 1;
  int size() const { return intra * inter; }
};

// The group of `intra` x `inter` ranks, R / intra of them on every node.
Group GroupOf(const PlanInputs& in, int intra, int inter);
std::string Shape(const Group& g);  // "8x16"

// The seconds of one collective under a cost model, cached by the call's arguments (the
// enumeration asks for the same few shapes many times). braid's model takes the algorithm the
// tuner would pick (braidEstimateCollective). Lins' model stands in for a table measured with
// NCCL, which (before 2.23's PAT, and PAT only with one rank per node) runs all-gather,
// reduce-scatter and broadcast as rings only: those are priced as braid's ring
// (braidEstimateAlgorithm: "rail_ring" across nodes with several NICs, as NCCL's channels are;
// "ring" otherwise and for broadcasts). NCCL's all-reduce is ring or tree, whichever its tuner
// prefers; braid's best all-reduce stands in for that.
class CostCache {
 public:
  // `paramBytes` 2: bf16 elements, 4: fp32.
  CostCache(const braidLinkParams_t& link, int paramBytes,
            braidShardCostModel_t model = braidShardCostBraid)
      : link_(link), dtype_(paramBytes == 4 ? braidFloat32 : braidBfloat16), model_(model) {}
  // Seconds of one collective over `intra` x `inter` ranks, `sharing` groups per node's link.
  double Seconds(braidCollective_t kind, double bytes, int bits, int intra, int inter, int sharing);
  braidShardCostModel_t model() const { return model_; }

 private:
  braidLinkParams_t link_;
  braidDataType_t dtype_;
  braidShardCostModel_t model_;
  std::map<std::tuple<int, uint64_t, int, int, int, int>, double> cache_;
};

// Memory per device (docs/sharding.md, "The planner"); Lins' activation estimate under the Lins
// model (lins_model.h).
PlanMemory MemoryOf(const PlanInputs& in, const braidShardConfig_t& cfg);

// Whether the boundary reduction is cheaper as a reduce-scatter into the OS slices plus an
// all-reduce across their copies than as an all-reduce over the replicas (plan_model.cc,
// BoundaryForms): what the step does (SplitBoundary in layout.h applies) and the plan costs.
// False where the split does not apply (s_os = s_g).
bool SplitBoundaryCheaper(const PlanInputs& in, const braidShardConfig_t& cfg, CostCache& cost);

// The collectives of one step as braid runs it; cfg must be valid for in.R x in.n.
std::vector<PlannedCollective> CollectivesOf(const PlanInputs& in, const braidShardConfig_t& cfg,
                                             CostCache& cost);

// The terms in.cost_model charges for `cfg`: CollectivesOf, or LinsTermsOf (lins_model.h).
std::vector<PlannedCollective> TermsOf(const PlanInputs& in, const braidShardConfig_t& cfg,
                                       CostCache& cost);

// The entry of the C API for `cfg` under in.cost_model (`cost` must be for that model).
braidShardPlanEntry_t Evaluate(const PlanInputs& in, const braidShardConfig_t& cfg,
                               CostCache& cost);

}  // namespace braid::shard
