// Lins' own cost model (sharding.md section 4.1, the paper's section IV restated): the terms,
// constraints and activation estimate that price Lins' executor, with braid's cost model
// (CostCache, braidEstimateCollective) in place of Lins' measured bandwidth table. The planner
// uses it under braidShardCostLins to reproduce the paper's choices; braid's default model
// (plan_model.h) prices the step braid runs. docs/sharding.md compares the two.
#pragma once

#include <string>
#include <vector>

#include "braid/shard.h"
#include "sharding/plan_model.h"

namespace braid::shard {

// Empty when Lins considers `cfg`; else why not. Lins' executor has s_g in {s_p, s_os} (per
// level), no secondary copy, no quantization and no per-micro-batch replica all-reduce.
std::string LinsAdmits(const braidShardConfig_t& cfg);

// Activation bytes per device (Korthikanti et al.): s*b*h*34 per layer with fused attention
// (the 5*a*s/h score term is absent), about 2*s*b*h per layer with full recomputation.
double LinsActivationBytes(const PlanInputs& in);

// The bucket U of Lins' all-reduces: braid's bucket (the largest), in bytes.
double LinsBucketBytes(const PlanInputs& in);

// T_p, T_g, T_os0 and T_os1 of `cfg` (the terms that apply), each one PlannedCollective whose
// `term` is the term's name; cfg must be admitted (LinsAdmits).
std::vector<PlannedCollective> LinsTermsOf(const PlanInputs& in, const braidShardConfig_t& cfg,
                                           CostCache& cost);

}  // namespace braid::shard
