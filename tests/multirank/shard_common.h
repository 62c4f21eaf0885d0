// Shared by the sharded-step tests: the synthetic model (bucket sizes, initial parameters,
// integer gradients), conversions to the parameter dtype written independently of the library,
// and the data-parallel reference optimizer in the library's float operations and order.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

// The sharding layer's error and braid's, after the failed condition.
#undef CHECK_OR_FAIL
#define CHECK_OR_FAIL(cond, ...)                                            \
  CHECK_OR_FAIL_WITH((std::string("shard: ") + braidShardGetLastError(sh) + \
                      "; comm: " + braidGetLastError(nullptr))              \
                         .c_str(),                                          \
                     cond, __VA_ARGS__)

const std::vector<size_t> kBuckets = {37, 64, 5};  // odd sizes: shards carry padding
constexpr int kSteps = 4;
constexpr int kMicrobatches = 2;

float InitParam(int b, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + b * 3) % 11) - 5) * 0.125f;
}

// An integer gradient that depends on the parameter it belongs to.
float Grad(int b, size_t i, int step, int mb, int rank, float param) {
  const int base = static_cast<int>((i + 3 * b + 5 * step + 7 * mb + 11 * rank) % 9) - 4;
  return static_cast<float>(base + (param > 0.0f ? 1 : 0));
}

// The compiler's half type, an independent reference for braid's fp16 conversions: _Float16
// (GCC, clang 15+), or clang 14's __fp16 (storage only; it converts to and from float with the
// same round-to-nearest-even), which the sanitizer build's clang 14 has on x86.
#if defined(__clang__) && __clang_major__ < 15
// clang 14 has no _Float16 on x86, and its __fp16 conversions call runtime functions libgcc
// lacks: IEEE binary16 by hand, round to nearest even (F. Giesen's float_to_half_fast3_rtne).
struct Half {
  uint16_t bits;
  explicit Half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = x & 0x80000000u;
    x ^= sign;
    if (x >= 0x47800000u) {  // 2^16 and above, infinities and NaNs
      bits = x > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (x < 0x38800000u) {  // below 2^-14: subnormal or zero, rounded by the FPU's add
      constexpr uint32_t kMagicBits = ((127 - 15) + (23 - 10) + 1) << 23;
      float magic, g;
      std::memcpy(&magic, &kMagicBits, 4);
      std::memcpy(&g, &x, 4);
      g += magic;
      uint32_t r;
      std::memcpy(&r, &g, 4);
      bits = static_cast<uint16_t>(r - kMagicBits);
    } else {
      const uint32_t odd = (x >> 13) & 1u;
      x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
      bits = static_cast<uint16_t>(x >> 13);
    }
    bits = static_cast<uint16_t>(bits | (sign >> 16));
  }
  explicit operator float() const {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu, out;
    if (exp == 0x1f) {
      out = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
      out = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while (!(mant & 0x400u));
      out = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
  }
};
static_assert(sizeof(Half) == 2);
#else
using Half = _Float16;
#endif

// The reference's own rounding to the parameter dtype (round to nearest even).
float RoundTo(braidDataType_t dt, float f) {
  if (dt == braidFloat16) return static_cast<float>(static_cast<Half>(f));
  if (dt != braidBfloat16) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return f;
  const uint32_t lsb = (u >> 16) & 1u;
  u = (u + 0x7fffu + lsb) & 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values (exact in dt) as a buffer of dt.
std::vector<unsigned char> ToDt(braidDataType_t dt, const std::vector<float>& v) {
  std::vector<unsigned char> out(v.size() * (dt == braidFloat32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == braidFloat32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else if (dt == braidFloat16) {
      const Half h = static_cast<Half>(v[i]);
      std::memcpy(&out[2 * i], &h, 2);
    } else {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      const uint16_t h = static_cast<uint16_t>(u >> 16);  // v[i] is a bf16 value already
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

// Element i of a buffer of dt.
float FromDt(braidDataType_t dt, const unsigned char* p, size_t i) {
  if (dt == braidFloat32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  if (dt == braidFloat16) {
    Half h(0.0f);
    std::memcpy(&h, p + 2 * i, 2);
    return static_cast<float>(h);
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

enum Optimizer { kAdamW = 0, kSgd = 1, kHatch = 2 };

// The test's own optimizer for the escape hatch: plain SGD with a fixed rate.
constexpr float kHatchLr = 0.5f;

// Plain data parallelism in the same float operations and order as sharding/step.cc and
// optimizer.cc (which is what makes bit-identity the right bar): fp32 master weights, parameters =
// master rounded to the parameter dtype, PyTorch's AdamW (bias corrections in double rounded once
// to float) or SGD.
struct Ref {
  braidDataType_t dt = braidFloat32;
  std::vector<std::vector<float>> p, master, m, v;
  int64_t t = 0;
  // Returns false (and changes nothing) when the summed gradient overflows the parameter dtype.
  bool Step(const std::vector<std::vector<float>>& grad_sum, double divisor, float loss_scale,
            float max_norm, int optimizer, const braidShardStepOptions_t& so, double* norm_out) {
    const float scale = static_cast<float>(1.0 / (divisor * loss_scale));
    std::vector<std::vector<float>> g(p.size());
    double sq = 0.0;
    for (size_t b = 0; b < p.size(); ++b)
      for (size_t i = 0; i < p[b].size(); ++i) {
        const float s = RoundTo(dt, grad_sum[b][i]);  // the sum exists in dt only
        if (!std::isfinite(s)) return false;
        g[b].push_back(s * scale);
        sq += static_cast<double>(g[b][i]) * g[b][i];
      }
    *norm_out = std::sqrt(sq);
    if (max_norm > 0.0f) {
      const float coef = static_cast<float>(max_norm / (*norm_out + 1e-6));
      if (coef < 1.0f)
        for (auto& gb : g)
          for (float& x : gb) x *= coef;
    }
    ++t;
    const braidShardAdamW_t& o = so.adamw;
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
    const float sqrt_bc2 = std::sqrt(bc2);
    const float step_size = o.lr / bc1;
    const float decay = 1.0f - o.lr * o.weightDecay;
    const braidShardSGD_t& s = so.sgd;
    for (size_t b = 0; b < p.size(); ++b)
      for (size_t i = 0; i < p[b].size(); ++i) {
        float gi = g[b][i];
        float& x = master[b][i];
        if (optimizer == kAdamW) {
          float y = x * decay;
          m[b][i] = o.beta1 * m[b][i] + (1.0f - o.beta1) * gi;
          v[b][i] = o.beta2 * v[b][i] + (1.0f - o.beta2) * gi * gi;
          const float denom = std::sqrt(v[b][i]) / sqrt_bc2 + o.eps;
          x = y - step_size * (m[b][i] / denom);
        } else if (optimizer == kSgd) {
          if (s.weightDecay != 0.0f) gi = gi + s.weightDecay * x;
          m[b][i] = t == 1 ? gi : s.momentum * m[b][i] + (1.0f - s.dampening) * gi;
          gi = s.nesterov ? gi + s.momentum * m[b][i] : m[b][i];
          x = x - s.lr * gi;
        } else {
          x = x - kHatchLr * gi;
        }
        p[b][i] = RoundTo(dt, x);
      }
    return true;
  }
};

}  // namespace
}  // namespace braid_test
