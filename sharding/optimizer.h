// The optimizer of the sharded step (spec/sharding.md section 2) on this rank's OS shards, in
// fp32: PyTorch's AdamW and SGD, clipping by the global gradient norm and the dynamic loss scaler.
// The step (step.cc) runs them between Prepare (the boundary reduction into each bucket's fp32
// gradient, the overflow check and the norm) and Finish (redistribution); with the escape hatch
// (braidShardOptimizerShard) the caller's optimizer replaces the update. Internal to the sharding
// library, which sees braid's public API only.
#pragma once

#include <vector>

#include "braid/shard.h"
#include "sharding/state.h"

namespace braid::shard {

// The built-in update of every bucket's OS shard (master weights and moments from grad32),
// `o.optimizer` (braidShardOptAdamW or braidShardOptSGD, checked by the caller) with its options,
// as step number sh->t.
void ApplyUpdate(braidShard* sh, const braidShardStepOptions_t& o);

// Clips every bucket's fp32 gradient to `max_norm` given their global norm `norm`, as PyTorch's
// clip_grad_norm_: all times max_norm / (norm + 1e-6) when that is below 1 (nothing when
// max_norm is not > 0). Whether it clipped.
bool ClipGradients(std::vector<Bucket>& buckets, float max_norm, double norm);

// The dynamic loss scaler (PyTorch's GradScaler) after a step: backs off on overflow, grows after
// scaler.growthInterval good steps in a row. Returns the scale for the next step.
float UpdateLossScaler(braidShard* sh, bool overflow);

}  // namespace braid::shard
