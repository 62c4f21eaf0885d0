#include "sharding/optimizer.h"

#include <cmath>
#include <cstdint>

namespace braid::shard {
namespace {

// PyTorch's AdamW on one OS shard, in float operations in a fixed order.
void AdamW(Bucket& k, int64_t t, const braidShardAdamW_t& o) {
  // Bias corrections in double, rounded once to float: the reference does the same.
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
  const float sqrt_bc2 = std::sqrt(bc2);
  const float step_size = o.lr / bc1;
  const float decay = 1.0f - o.lr * o.weightDecay;
  for (size_t i = 0; i < k.master.size(); ++i) {
    const float gi = k.grad32[i];
    float p = k.master[i] * decay;
    k.m[i] = o.beta1 * k.m[i] + (1.0f - o.beta1) * gi;
    k.v[i] = o.beta2 * k.v[i] + (1.0f - o.beta2) * gi * gi;
    const float denom = std::sqrt(k.v[i]) / sqrt_bc2 + o.eps;
    p = p - step_size * (k.m[i] / denom);
    k.master[i] = p;
  }
}

// PyTorch's SGD (weight decay into the gradient, momentum buffer = first gradient on the first
// step); the buffer is `m`.
void Sgd(Bucket& k, int64_t t, const braidShardSGD_t& o) {
  for (size_t i = 0; i < k.master.size(); ++i) {
    float g = k.grad32[i];
    if (o.weightDecay != 0.0f) g = g + o.weightDecay * k.master[i];
    if (o.momentum != 0.0f) {
      k.m[i] = t == 1 ? g : o.momentum * k.m[i] + (1.0f - o.dampening) * g;
      g = o.nesterov ? g + o.momentum * k.m[i] : k.m[i];
    }
    k.master[i] = k.master[i] - o.lr * g;
  }
}

}  // namespace

void ApplyUpdate(braidShard* sh, const braidShardStepOptions_t& o) {
  for (Bucket& k : sh->buckets) {
    if (o.optimizer == braidShardOptAdamW)
      AdamW(k, sh->t, o.adamw);
    else
      Sgd(k, sh->t, o.sgd);
  }
}

bool ClipGradients(std::vector<Bucket>& buckets, float max_norm, double norm) {
  if (!(max_norm > 0.0f)) return false;
  const float coef = static_cast<float>(max_norm / (norm + 1e-6));
  if (!(coef < 1.0f)) return false;
  for (Bucket& k : buckets)
    for (float& g : k.grad32) g *= coef;
  return true;
}

float UpdateLossScaler(braidShard* sh, bool overflow) {
  if (overflow) {
    sh->scale *= sh->scaler.backoffFactor;
    sh->good_steps = 0;
  } else if (++sh->good_steps >= sh->scaler.growthInterval) {
    sh->scale *= sh->scaler.growthFactor;
    sh->good_steps = 0;
  }
  return sh->scale;
}

}  // namespace braid::shard
