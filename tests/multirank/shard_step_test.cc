// The sharded step (spec/sharding.md section 2) over real ranks: for each preset, on 1, 2, 4 and
// 8 ranks of one node and on 2x2 and 4x2 emulated nodes (BRAID_HOSTID), several steps of a
// synthetic model give parameters bit-identical to plain data parallelism computed in the test.
// The gradients are small integers (they depend on the gathered parameters, so a wrong gather
// changes them), so their sums are exact in any order and so is the mean over D ranks x 2
// micro-batches (a power of two); AdamW is then the same float operations in the same order on
// the same values. The quantized presets (zero++, zero-topo) and options stay within stated
// bounds (below). Invalid uses fail on every rank, without a hang.
//
// Variants: bf16 and fp16 parameters (fp32 master weights; the reference rounds the master to
// the parameter dtype to nearest even, with its own conversions: a hand-written bf16 one and the
// compiler's _Float16), SGD with momentum, gradient-norm clipping (the squares of the gradients
// are exact in double, so the global norm is the same whatever the order), static and dynamic fp16
// loss scales (powers of two, so the unscaled gradients are the same), a step whose gradients
// overflow (skipped on every rank), and the optimizer escape hatch (the test's own update on
// braid's fp32 shards).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <tuple>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "multirank/harness.h"
#include "multirank/shard_common.h"

namespace braid_test {
namespace {

struct Case {
  std::string name;  // a preset, or "custom-..." with the factors below
  int R, n;
  braidShardFactor_t p{1, 1}, g{1, 1}, os{1, 1};
  int allow_partial = 0;
  braidDataType_t dt = braidFloat32;
  int optimizer = kAdamW;
  float max_norm = 0.0f;   // > 0: clipping (small enough that it clips)
  int scale_mode = 0;      // 0: none; 1: static 1024; 2: dynamic scaler from 2048
  int overflow_step = -1;  // the step whose gradients overflow, or -1
  // Random gradients (full mantissas): sums depend on the order, so the parameters are compared
  // with the reference within a tolerance, and across ranks bit for bit.
  bool random = false;
  std::string tag;  // the variant's name in the test name
  // "custom" cases: the hpZ secondary copy and the quantized options.
  int hpz = 0, hpz_int8 = 0, qwz = 0, qgz = 0;
  bool no_prefetch = false;  // braidShardSetPrefetch(sh, 0): every gather issued on demand
  std::string boundary;      // BRAID_SHARD_BOUNDARY for the job ("": auto)
};

// A random gradient in [-2, 2) with a full mantissa, rounded to the parameter dtype (so that
// the value handed over is the reference's).
float RandomGrad(braidDataType_t dt, int b, size_t i, int step, int mb, int rank) {
  uint64_t x = (static_cast<uint64_t>(b) << 48) ^ (static_cast<uint64_t>(i) << 24) ^
               (static_cast<uint64_t>(step) << 16) ^ (static_cast<uint64_t>(mb) << 8) ^
               static_cast<uint64_t>(rank);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return RoundTo(dt, static_cast<float>(static_cast<double>(x >> 11) * 0x1p-51 - 2.0));
}

// A case with the default variant (fp32, AdamW, no clipping, no loss scale).
Case MakeCase(const std::string& name, int R, int n, braidShardFactor_t p = {1, 1},
              braidShardFactor_t g = {1, 1}, braidShardFactor_t os = {1, 1}, int allow = 0) {
  Case c;
  c.name = name;
  c.R = R;
  c.n = n;
  c.p = p;
  c.g = g;
  c.os = os;
  c.allow_partial = allow;
  return c;
}

const char* DtName(braidDataType_t dt) {
  return dt == braidFloat32 ? "fp32" : dt == braidBfloat16 ? "bf16" : "fp16";
}

// gtest prints the case by name instead of its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " on " << c.R << "x" << c.n << " (p " << c.p.intra << "x" << c.p.inter << ", g "
      << c.g.intra << "x" << c.g.inter << ", os " << c.os.intra << "x" << c.os.inter << ") "
      << DtName(c.dt) << " opt " << c.optimizer << " clip " << c.max_norm << " scale "
      << c.scale_mode << " overflow " << c.overflow_step;
}

// Joins the job: on emulated nodes each rank names its node (rank / R) before init.
int Join(braidComm_t* comm, int rank, int nranks, const braidUniqueId& id, int R, int n) {
  if (n > 1) {
    const std::string host = "shardnode" + std::to_string(rank / R);
    setenv("BRAID_HOSTID", host.c_str(), 1);
  }
  if (braidCommInitRank(comm, nranks, id, rank) != braidSuccess) {
    std::fprintf(stderr, "[rank %d] init failed: %s\n", rank, braidGetLastError(nullptr));
    return 1;
  }
  return 0;
}

int ResolveConfig(const Case& c, braidComm_t comm, braidShardConfig_t* cfg) {
  if (c.name.rfind("custom", 0) == 0) {
    braidShardConfig_t x = BRAID_SHARD_CONFIG_INITIALIZER;
    x.ranksPerNode = c.R;
    x.nodes = c.n;
    x.p = c.p;
    x.g = c.g;
    x.os = c.os;
    x.allowPartialNode = c.allow_partial;
    x.hpz = c.hpz;
    x.hpzInt8 = c.hpz_int8;
    x.qwz = c.qwz;
    x.qgz = c.qgz;
    *cfg = x;
    return braidShardConfigValidate(cfg, nullptr, 0) == braidSuccess ? 0 : 1;
  }
  // The comm's own shape (node sizes from BRAID_HOSTID) must be the case's.
  if (braidShardPreset(c.name.c_str(), comm, cfg) != braidSuccess) return 1;
  return cfg->ranksPerNode == c.R && cfg->nodes == c.n ? 0 : 1;
}

std::vector<const void*> Pointers(const std::vector<std::vector<float>>& v) {
  std::vector<const void*> out;
  for (const auto& x : v) out.push_back(x.data());
  return out;
}

int TrainAndCompare(const Case& c, int rank, int D, const braidUniqueId& id) {
  braidShard_t sh = nullptr;
  braidComm_t comm = nullptr;
  if (Join(&comm, rank, D, id, c.R, c.n)) return 1;
  braidShardConfig_t cfg;
  CHECK_OR_FAIL(ResolveConfig(c, comm, &cfg) == 0, "config for %s", c.name.c_str());
  Ref ref;
  ref.dt = c.dt;
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    ref.p.emplace_back(kBuckets[b]);
    for (size_t i = 0; i < kBuckets[b]; ++i) ref.p[b][i] = InitParam(static_cast<int>(b), i);
    ref.master.push_back(ref.p[b]);  // the initial values are exact in every dtype
    ref.m.emplace_back(kBuckets[b], 0.0f);
    ref.v.emplace_back(kBuckets[b], 0.0f);
  }
  const size_t es = c.dt == braidFloat32 ? 4 : 2;
  std::vector<std::vector<unsigned char>> init_dt;
  for (const auto& pb : ref.p) init_dt.push_back(ToDt(c.dt, pb));
  std::vector<const void*> init;
  for (const auto& x : init_dt) init.push_back(x.data());
  braidResult_t rc = braidShardCreate(comm, &cfg, static_cast<int>(kBuckets.size()),
                                      kBuckets.data(), c.dt, init.data(), &sh);
  CHECK_OR_FAIL(rc == braidSuccess, "create: %s", braidShardGetLastError(nullptr));
  CHECK_OR_FAIL(braidShardSetPrefetch(sh, 2) == braidErrInvalidArgument &&
                    braidShardSetPrefetch(nullptr, 0) == braidErrInvalidArgument,
                "bad prefetch arguments accepted");
  if (c.no_prefetch) CHECK_OR_FAIL(braidShardSetPrefetch(sh, 0) == braidSuccess, "prefetch off");
  if (c.scale_mode == 2) {
    braidShardLossScaler_t ls = BRAID_SHARD_LOSS_SCALER_INITIALIZER;
    ls.initScale = 2048.0f;
    ls.growthInterval = 2;
    CHECK_OR_FAIL(braidShardSetLossScaler(sh, &ls) == braidSuccess, "scaler");
  }

  // Memory as allocated equals the formula over the padded size (e = the dtype's size). The
  // test's cases pad to s_os (their hpZ groups divide it). An INT8 secondary copy is encoded per
  // bucket: the test adds up its own encodings instead of the formula's one for the whole model.
  uint64_t padded = 0, int8_copy = 0;
  const int so = cfg.os.intra * cfg.os.inter;
  for (size_t n : kBuckets) {
    const size_t padded_b = (n + so - 1) / so * so;
    padded += padded_b;
    size_t enc = 0;
    const braidQuantConfig_t w = {8, 2048, 1};
    if (cfg.hpzInt8) CHECK_OR_FAIL(braidQuantizedSize(padded_b / cfg.hpz, &w, &enc) == 0, "size");
    int8_copy += enc;
  }
  braidShardMemory_t got, want;
  CHECK_OR_FAIL(braidShardMemory(sh, &got) == braidSuccess, "memory");
  CHECK_OR_FAIL(braidShardMemoryFormula(&cfg, padded, static_cast<int>(es), &want) == braidSuccess,
                "formula");
  if (cfg.hpzInt8) {
    const uint64_t sp = static_cast<uint64_t>(cfg.p.intra) * cfg.p.inter;
    want.params = (es * padded + sp - 1) / sp + int8_copy;
  }
  CHECK_OR_FAIL(
      got.params == want.params && got.grads == want.grads && got.optimizer == want.optimizer,
      "memory %llu/%llu/%llu, formula %llu/%llu/%llu", (unsigned long long)got.params,
      (unsigned long long)got.grads, (unsigned long long)got.optimizer,
      (unsigned long long)want.params, (unsigned long long)want.grads,
      (unsigned long long)want.optimizer);

  braidShardStepOptions_t opt = BRAID_SHARD_STEP_OPTIONS_INITIALIZER;
  opt.optimizer = c.optimizer == kSgd ? braidShardOptSGD : braidShardOptAdamW;
  opt.adamw.lr = 0.01f;
  opt.adamw.weightDecay = 0.1f;
  opt.sgd.lr = 0.02f;
  opt.sgd.momentum = 0.9f;
  opt.sgd.dampening = 0.25f;
  opt.sgd.weightDecay = 0.05f;
  opt.sgd.nesterov = 1;
  opt.maxGradNorm = c.max_norm;
  if (c.scale_mode == 1) opt.lossScale = 1024.0f;
  const int nb = static_cast<int>(kBuckets.size());
  int clipped_steps = 0;
  // Quantized options: the gathered parameters are the decoded INT8 ones and the gradients sum
  // after INT4 decoding, so the final parameters are compared within a bound (below); the
  // backward gather (from the hpZ copy where there is one) must return the forward's bytes.
  const bool lossy = cfg.qwz || cfg.qgz || cfg.hpzInt8;
  std::vector<std::vector<unsigned char>> forward(nb);
  for (int step = 0; step < kSteps; ++step) {
    float ls = 1.0f;
    CHECK_OR_FAIL(braidShardGetLossScale(sh, &ls) == braidSuccess, "get scale");
    if (c.scale_mode == 1) ls = opt.lossScale;
    const bool overflow = step == c.overflow_step;
    std::vector<std::vector<float>> sum(nb);
    for (int b = 0; b < nb; ++b) sum[b].assign(kBuckets[b], 0.0f);
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      // Forward: every gathered bucket equals the reference parameters, bit for bit.
      for (int b = 0; b < nb && (!c.random || lossy); ++b) {
        const void* p = nullptr;
        CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
        const std::vector<unsigned char> want_p = ToDt(c.dt, ref.p[b]);
        const auto* bytes = static_cast<const unsigned char*>(p);
        forward[b].assign(bytes, bytes + want_p.size());
        CHECK_OR_FAIL(lossy || std::memcmp(p, want_p.data(), want_p.size()) == 0,
                      "step %d mb %d: gathered bucket %d differs from the reference", step, mb, b);
        CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
      }
      // Backward in reverse order (the prefetch turns round), gradients from the gather. The
      // gradients are small integers times the loss scale: exact in every dtype.
      for (int b = nb - 1; b >= 0; --b) {
        const void* p = nullptr;
        CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
        const std::vector<unsigned char> mine(
            static_cast<const unsigned char*>(p),
            static_cast<const unsigned char*>(p) + kBuckets[b] * es);
        CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
        // The same bytes, unless the copy is INT8 (zero-topo: the backward computes with INT8
        // weights): then within one INT8 step, absmax / 128, of the bucket's largest magnitude
        // (half a step from rounding, a whole one where +absmax clips to 127: quantization.md).
        if (lossy && !cfg.hpzInt8)
          CHECK_OR_FAIL(mine == forward[b],
                        "step %d mb %d: backward gather of bucket %d differs from the forward's",
                        step, mb, b);
        if (lossy && cfg.hpzInt8) {
          float absmax = 0.0f;
          for (size_t i = 0; i < kBuckets[b]; ++i)
            absmax = std::max(absmax, std::fabs(FromDt(c.dt, forward[b].data(), i)));
          for (size_t i = 0; i < kBuckets[b]; ++i) {
            const float d = FromDt(c.dt, mine.data(), i) - FromDt(c.dt, forward[b].data(), i);
            CHECK_OR_FAIL(std::fabs(d) <= absmax / 128.0f * 1.001f + 1e-7f,
                          "step %d mb %d: INT8 copy of bucket %d [%zu] off by %g (absmax %g)", step,
                          mb, b, i, d, absmax);
          }
        }
        std::vector<float> grad(kBuckets[b]);
        for (size_t i = 0; i < kBuckets[b]; ++i) {
          const float param = ref.p[b][i];  // equal to `mine`, checked in the forward pass
          if (c.random) {
            grad[i] = RandomGrad(c.dt, b, i, step, mb, rank) * ls;
            for (int r = 0; r < D; ++r) sum[b][i] += RandomGrad(c.dt, b, i, step, mb, r) * ls;
            continue;
          }
          grad[i] = Grad(b, i, step, mb, rank, FromDt(c.dt, mine.data(), i)) * ls;
          for (int r = 0; r < D; ++r) sum[b][i] += Grad(b, i, step, mb, r, param) * ls;
        }
        if (overflow && b == 1) {
          // fp16: a value whose sum over the two micro-batches exceeds 65504; otherwise inf.
          // Rank 0 only: the verdict must still be agreed on every rank.
          const float big =
              c.dt == braidFloat16 ? 40000.0f : std::numeric_limits<float>::infinity();
          if (rank == 0) grad[3] = big;
          sum[b][3] += big - Grad(b, 3, step, mb, 0, ref.p[b][3]) * ls;
        }
        const std::vector<unsigned char> gdt = ToDt(c.dt, grad);
        CHECK_OR_FAIL(braidShardReduceGrad(sh, b, gdt.data()) == braidSuccess, "reduce %d", b);
      }
    }
    braidShardStepInfo_t info{};
    info.size = sizeof(info);
    if (c.optimizer == kHatch) {
      CHECK_OR_FAIL(braidShardPrepareStep(sh, &opt, &info) == braidSuccess, "prepare %d", step);
      for (int b = 0; b < nb && !info.skipped; ++b) {
        braidShardOsShard_t view{};
        view.size = sizeof(view);
        CHECK_OR_FAIL(braidShardOptimizerShard(sh, b, &view) == braidSuccess, "shard %d", b);
        CHECK_OR_FAIL(view.count == 0 || view.offset + view.count <= kBuckets[b], "view range");
        for (size_t i = 0; i < view.count; ++i)
          view.master[i] = view.master[i] - kHatchLr * view.grad[i];
      }
      CHECK_OR_FAIL(braidShardFinishStep(sh) == braidSuccess, "finish %d", step);
    } else {
      CHECK_OR_FAIL(braidShardStepEx(sh, &opt, &info) == braidSuccess, "step %d", step);
    }
    double ref_norm = 0.0;
    const bool applied = ref.Step(sum, static_cast<double>(D) * kMicrobatches, ls, c.max_norm,
                                  c.optimizer, opt, &ref_norm);
    CHECK_OR_FAIL(applied == !overflow, "the reference's overflow verdict (test bug)");
    CHECK_OR_FAIL(info.skipped == (overflow ? 1 : 0), "step %d: skipped %d", step, info.skipped);
    CHECK_OR_FAIL(info.step == ref.t, "step count %lld, reference %lld", (long long)info.step,
                  (long long)ref.t);
    CHECK_OR_FAIL(info.lossScale == ls, "loss scale %g, expected %g", info.lossScale, ls);
    if (!overflow && !c.random)
      CHECK_OR_FAIL(info.gradNorm == ref_norm, "step %d: norm %.17g, reference %.17g", step,
                    info.gradNorm, ref_norm);
    if (c.random)
      CHECK_OR_FAIL(std::fabs(info.gradNorm - ref_norm) <= (cfg.qgz ? 0.2 : 1e-2) * ref_norm,
                    "step %d: norm %.17g, reference %.17g", step, info.gradNorm, ref_norm);
    clipped_steps += info.clipped;
    if (c.scale_mode == 2) {
      // GradScaler: halve on overflow, double after two good steps in a row.
      float next = 0.0f;
      CHECK_OR_FAIL(braidShardGetLossScale(sh, &next) == braidSuccess && next == info.nextLossScale,
                    "next scale");
      CHECK_OR_FAIL(!overflow || next == ls * 0.5f, "no backoff: %g after %g", next, ls);
    }
  }
  if (c.max_norm > 0.0f) CHECK_OR_FAIL(clipped_steps > 0, "clipping never clipped (test bug)");
  double update_err = 0.0, update_norm = 0.0;  // lossy: over every bucket (below)
  for (int b = 0; b < nb; ++b) {
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "final gather %d", b);
    const std::vector<unsigned char> want_p = ToDt(c.dt, ref.p[b]);
    for (size_t i = 0; i < kBuckets[b] && lossy; ++i) {
      const double got = FromDt(c.dt, static_cast<const unsigned char*>(p), i);
      const double want = ref.p[b][i], init = InitParam(b, i);
      update_err += (got - want) * (got - want);
      update_norm += (want - init) * (want - init);
    }
    if (c.random) {
      // Within rounding of the reference: a few ulps of the dtype (AdamW normalises the
      // gradient, so differences in its last bits stay small), and bit-identical across ranks.
      const float tol = c.dt == braidFloat32 ? 1e-5f : c.dt == braidFloat16 ? 4e-3f : 3e-2f;
      for (size_t i = 0; i < kBuckets[b] && !lossy; ++i) {
        const float got = FromDt(c.dt, static_cast<const unsigned char*>(p), i);
        CHECK_OR_FAIL(std::fabs(got - ref.p[b][i]) <= tol * (1.0f + std::fabs(ref.p[b][i])),
                      "bucket %d [%zu] = %.9g, reference %.9g", b, i, got, ref.p[b][i]);
      }
      uint64_t h = 1469598103934665603ull;
      for (size_t i = 0; i < kBuckets[b] * es; ++i)
        h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
      int64_t mm[2] = {static_cast<int64_t>(h >> 2), -static_cast<int64_t>(h >> 2)};
      CHECK_OR_FAIL(braidAllReduce(mm, mm, 2, braidInt64, braidMax, comm) == braidSuccess,
                    "hash all-reduce");
      CHECK_OR_FAIL(mm[0] == -mm[1], "bucket %d differs between ranks", b);
      CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "final release");
      continue;
    }
    for (size_t i = 0; i < kBuckets[b]; ++i)
      CHECK_OR_FAIL(
          std::memcmp(static_cast<const unsigned char*>(p) + i * es, &want_p[i * es], es) == 0,
          "after %d steps bucket %d [%zu] differs from the reference %.9g", kSteps, b, i,
          ref.p[b][i]);
    // The parameters moved: a step that did nothing would also be "identical" to nothing.
    CHECK_OR_FAIL(ref.p[b][0] != InitParam(b, 0), "reference did not move");
    CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "final release");
  }
  if (lossy) {
    // The update (final - initial parameters) within a relative L2 error of the reference's,
    // over the whole model: with qgZ 0.3 (docs/quantization.md's INT4 bound is 0.2 for calls of
    // >= 100 elements per rank; here a rank's shards hold 1 to 32 elements, and two hops
    // re-encode the node's partial sums: measured 0.08-0.24), else 0.05 (the INT8 bound, 0.015,
    // plus the INT8 decoding of the gathered parameters; measured 0.04). A wrong shard or a
    // stale copy is off by far more (order 1).
    const double rel = std::sqrt(update_err / update_norm), bound = cfg.qgz ? 0.3 : 0.05;
    std::fprintf(stderr, "[rank %d] %s %dx%d: update relative L2 error %.4f (bound %.2f)\n", rank,
                 c.name.c_str(), c.R, c.n, rel, bound);
    CHECK_OR_FAIL(update_norm > 0.0 && rel <= bound, "update relative error %.4f > %.2f", rel,
                  bound);
  }
  CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
  sh = nullptr;
  CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "comm destroy");
  return 0;
}

class ShardStep : public ::testing::TestWithParam<Case> {};

TEST_P(ShardStep, BitIdenticalToDataParallelReference) {
  const Case c = GetParam();
  JobOptions opt;
  opt.nranks = c.R * c.n;
  opt.timeout_s = 120;
  opt.init = false;
  opt.env = {{"BRAID_TIMEOUT", "30"}};
  if (!c.boundary.empty()) opt.env.push_back({"BRAID_SHARD_BOUNDARY", c.boundary});
  auto out = RunJob(opt, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    return TrainAndCompare(c, rank, n, id);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::vector<Case> Cases() {
  const char* presets[] = {"ddp",  "zero1",    "zero2",    "zero3",   "fsdp-hybrid",
                           "mics", "paro-nig", "paro-iig", "paro-igg"};
  std::vector<Case> v;
  // 1, 2, 4 and 8 ranks, on one node and on 2 emulated nodes.
  for (auto [R, n] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {2, 2}, {8, 1}, {4, 2}})
    for (const char* p : presets) v.push_back(MakeCase(p, R, n));
  // Factor choices no preset makes: G sharded inside the node, OS across both levels; and
  // sharding across nodes over part of a node (the caller insists).
  v.push_back(MakeCase("custom-g2x1-os2x2", 2, 2, {1, 1}, {2, 1}, {2, 2}));
  v.push_back(MakeCase("custom-partial-os1x2", 2, 2, {1, 1}, {1, 1}, {1, 2}, 1));
  v.push_back(MakeCase("custom-partial-p1x2", 2, 2, {1, 2}, {1, 2}, {2, 2}, 1));
  // A sweep of every valid factor choice (sharding.md section 1) on 2x2 (parts of a node
  // allowed), 4x1 and 4x2 (whole nodes first), other than the presets' above.
  for (auto [R, n, allow] :
       std::vector<std::tuple<int, int, int>>{{2, 2, 1}, {4, 1, 0}, {4, 2, 0}}) {
    std::vector<braidShardFactor_t> f;
    for (int a = 1; a <= R; a *= 2)
      for (int b = 1; b <= n; b *= 2) f.push_back({a, b});
    for (const auto& p : f)
      for (const auto& g : f)
        for (const auto& os : f) {
          braidShardConfig_t x = BRAID_SHARD_CONFIG_INITIALIZER;
          x.ranksPerNode = R;
          x.nodes = n;
          x.p = p;
          x.g = g;
          x.os = os;
          x.allowPartialNode = allow;
          if (braidShardConfigValidate(&x, nullptr, 0) != braidSuccess) continue;
          const std::string name = "custom-sweep-p" + std::to_string(p.intra) + "x" +
                                   std::to_string(p.inter) + "-g" + std::to_string(g.intra) + "x" +
                                   std::to_string(g.inter) + "-os" + std::to_string(os.intra) +
                                   "x" + std::to_string(os.inter);
          v.push_back(MakeCase(name, R, n, p, g, os, allow));
        }
  }
  // hpZ alone is lossless: zero3 with a secondary copy over 2 ranks of each node (2x2), over 2 of
  // a node of 4 (4x1), and over 1 rank (the whole bucket, no communication), bit for bit.
  for (auto [R, n, h] : std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {4, 1, 2}, {2, 2, 1}}) {
    Case c = MakeCase("custom-zero3-hpz" + std::to_string(h), R, n, {R, n}, {R, n}, {R, n});
    c.hpz = h;
    v.push_back(c);
  }
  // The quantized options, alone and together (zero++ and zero-topo presets, and factor choices
  // of their own), with random gradients and SGD: within the quantization bounds.
  auto lossy = [&](Case c, int hpz, int int8, int qwz, int qgz) {
    c.hpz = hpz;
    c.hpz_int8 = int8;
    c.qwz = qwz;
    c.qgz = qgz;
    c.random = true;
    c.optimizer = kSgd;
    v.push_back(c);
  };
  for (auto [R, n] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {2, 2}, {8, 1}, {4, 2}}) {
    lossy(MakeCase("zero++", R, n), 0, 0, 0, 0);
    lossy(MakeCase("zero-topo", R, n), 0, 0, 0, 0);
  }
  lossy(MakeCase("custom-zero3-qwz", 2, 2, {2, 2}, {2, 2}, {2, 2}), 0, 0, 1, 0);
  lossy(MakeCase("custom-zero2-qgz", 2, 2, {1, 1}, {2, 2}, {2, 2}), 0, 0, 0, 1);
  lossy(MakeCase("custom-zero3-hpz2int8", 2, 2, {2, 2}, {2, 2}, {2, 2}), 2, 1, 0, 0);
  lossy(MakeCase("custom-zero3-hpz1int8-qwz", 2, 2, {2, 2}, {2, 2}, {2, 2}), 1, 1, 1, 0);
  // Without the prefetch: the same results.
  for (const char* p : {"zero3", "paro-iig"}) {
    Case c = MakeCase(p, 2, 2);
    c.no_prefetch = true;
    c.tag = "noprefetch";
    v.push_back(c);
  }
  // The boundary reduction forced each way where s_os > s_g (the default asks the cost model).
  for (const char* b : {"split", "allreduce"}) {
    for (Case c : {MakeCase("zero1", 2, 2), MakeCase("paro-nig", 2, 2), MakeCase("zero1", 4, 1),
                   MakeCase("custom-g2x1-os2x2", 2, 2, {1, 1}, {2, 1}, {2, 2})}) {
      c.boundary = b;
      c.tag = b;
      v.push_back(c);
    }
  }
  Case zpp = MakeCase("zero++", 2, 2);
  zpp.no_prefetch = true;
  zpp.tag = "noprefetch";
  lossy(zpp, 0, 0, 0, 0);
  return v;
}

// Mixed precision, optimizers, clipping, loss scaling and overflow, escape hatch: each variant
// over every preset the step runs, on 4x1 or 2x2 (2x2 has replicas and inter-node groups).
std::vector<Case> Variants() {
  const char* presets[] = {"ddp",  "zero1",    "zero2",    "zero3",   "fsdp-hybrid",
                           "mics", "paro-nig", "paro-iig", "paro-igg"};
  struct V {
    const char* tag;
    int R, n;
    braidDataType_t dt;
    int optimizer;
    float clip;
    int scale;
    int overflow;
    bool random = false;
  };
  const V variants[] = {
      {"bf16", 4, 1, braidBfloat16, kAdamW, 0.0f, 0, -1},
      {"bf16", 2, 2, braidBfloat16, kAdamW, 0.0f, 0, -1},
      {"fp16_scale_clip", 2, 2, braidFloat16, kAdamW, 1.0f, 1, -1},
      {"fp16_dynamic_overflow", 2, 2, braidFloat16, kAdamW, 0.0f, 2, 1},
      {"fp32_sgd_clip", 4, 1, braidFloat32, kSgd, 1.0f, 0, -1},
      {"bf16_sgd", 2, 2, braidBfloat16, kSgd, 0.0f, 0, -1},
      {"bf16_inf_clip", 4, 1, braidBfloat16, kAdamW, 1.0f, 0, 2},
      {"bf16_hatch", 2, 2, braidBfloat16, kHatch, 1.0f, 0, 1},
      {"fp32_random_clip", 2, 2, braidFloat32, kAdamW, 1.0f, 0, -1, true},
      {"bf16_random_sgd", 4, 1, braidBfloat16, kSgd, 0.0f, 0, -1, true},
      {"fp16_random_scale", 2, 2, braidFloat16, kAdamW, 0.0f, 1, -1, true},
  };
  std::vector<Case> v;
  for (const V& x : variants)
    for (const char* p : presets) {
      Case c = MakeCase(p, x.R, x.n);
      c.dt = x.dt;
      c.optimizer = x.optimizer;
      c.max_norm = x.clip;
      c.scale_mode = x.scale;
      c.overflow_step = x.overflow;
      c.random = x.random;
      c.tag = x.tag;
      v.push_back(c);
    }
  return v;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.name + "_" + std::to_string(info.param.R) + "x" +
                  std::to_string(info.param.n) +
                  (info.param.tag.empty() ? "" : "_" + info.param.tag);
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Presets, ShardStep, ::testing::ValuesIn(Cases()), CaseName);
INSTANTIATE_TEST_SUITE_P(Precision, ShardStep, ::testing::ValuesIn(Variants()), CaseName);

// Runs `body` on 2 ranks of one node with a zero-or-more-sharded model ready.
template <typename Body>
void TwoRanks(const char* preset, Body body, std::vector<size_t> rank1_buckets = kBuckets) {
  JobOptions opt;
  opt.nranks = 2;
  opt.timeout_s = 60;
  opt.env = {{"BRAID_TIMEOUT", "20"}};
  auto out = RunJob(opt, [&](braidComm_t comm, int rank, int, const braidUniqueId&) {
    braidShard_t sh = nullptr;
    braidShardConfig_t cfg;
    CHECK_OR_FAIL(braidShardPreset(preset, comm, &cfg) == braidSuccess, "preset");
    const std::vector<size_t>& buckets = rank == 1 ? rank1_buckets : kBuckets;
    std::vector<std::vector<float>> init;
    for (size_t n : buckets) init.emplace_back(n, 0.5f);
    auto ptrs = Pointers(init);
    return body(comm, rank, cfg, buckets, ptrs);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

bool Contains(const char* s, const char* what) {
  return std::strstr(s, what) != nullptr;
}

TEST(ShardStepErrors, StepBeforeAllBucketsReducedFailsOnEveryRankAndRecovers) {
  TwoRanks("zero2", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh) ==
                      braidSuccess,
                  "create");
    std::vector<float> grad(64, 1.0f);
    CHECK_OR_FAIL(braidShardReduceGrad(sh, 0, grad.data()) == braidSuccess, "reduce 0");
    braidShardAdamW_t opt = BRAID_SHARD_ADAMW_INITIALIZER;
    CHECK_OR_FAIL(braidShardStep(sh, &opt) == braidErrInvalidUsage, "early step accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), "bucket 1 has no reduced gradient"),
                  "message '%s'", braidShardGetLastError(sh));
    // The refused step changed nothing: finishing the micro-batch makes it valid.
    CHECK_OR_FAIL(braidShardReduceGrad(sh, 1, grad.data()) == braidSuccess, "reduce 1");
    CHECK_OR_FAIL(braidShardReduceGrad(sh, 2, grad.data()) == braidSuccess, "reduce 2");
    CHECK_OR_FAIL(braidShardStep(sh, &opt) == braidSuccess, "step");
    return braidShardDestroy(sh) == braidSuccess ? 0 : 1;
  });
}

TEST(ShardStepErrors, OneRankMissingABucketFailsBothRanks) {
  // ddp: gradients are only accumulated locally, so rank 1 can skip a bucket without a
  // collective waiting for it; the step's agreement must still stop both ranks.
  TwoRanks("ddp", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                     const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh) ==
                      braidSuccess,
                  "create");
    std::vector<float> grad(64, 1.0f);
    for (int b = 0; b < (rank == 1 ? 2 : 3); ++b)
      CHECK_OR_FAIL(braidShardReduceGrad(sh, b, grad.data()) == braidSuccess, "reduce");
    braidShardAdamW_t opt = BRAID_SHARD_ADAMW_INITIALIZER;
    CHECK_OR_FAIL(braidShardStep(sh, &opt) == braidErrInvalidUsage, "step accepted");
    const char* want = rank == 1 ? "bucket 2 has no reduced gradient" : "another rank";
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), want), "message '%s'",
                  braidShardGetLastError(sh));
    return braidShardDestroy(sh) == braidSuccess ? 0 : 1;
  });
}

TEST(ShardStepErrors, UnknownBucketIsRefusedWithoutCommunication) {
  TwoRanks("zero3", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh) ==
                      braidSuccess,
                  "create");
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, 7, &p) == braidErrInvalidArgument, "gather 7");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), "unknown bucket 7 (registered 3)"),
                  "message '%s'", braidShardGetLastError(sh));
    std::vector<float> grad(64, 1.0f);
    CHECK_OR_FAIL(braidShardReduceGrad(sh, -1, grad.data()) == braidErrInvalidArgument,
                  "reduce -1");
    // The handle still works after the refusals.
    CHECK_OR_FAIL(braidShardGather(sh, 1, &p) == braidSuccess, "gather 1");
    CHECK_OR_FAIL(static_cast<const float*>(p)[63] == 0.5f, "gathered value");
    CHECK_OR_FAIL(braidShardRelease(sh, 1) == braidSuccess, "release");
    return braidShardDestroy(sh) == braidSuccess ? 0 : 1;
  });
}

TEST(ShardStepErrors, PrefetchSettingsThatDifferBetweenRanksAreRefusedOnEveryRank) {
  TwoRanks("zero3", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh) ==
                      braidSuccess,
                  "create");
    // On and off would issue the backward gathers and the reduce-scatters in different orders.
    CHECK_OR_FAIL(braidShardSetPrefetch(sh, rank == 0 ? 1 : 0) == braidErrInvalidUsage,
                  "different settings accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), "different values"), "message '%s'",
                  braidShardGetLastError(sh));
    // A bad value on one rank fails both, each with its own message.
    CHECK_OR_FAIL(braidShardSetPrefetch(sh, rank == 0 ? 5 : 0) == braidErrInvalidArgument,
                  "bad value accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), rank == 0 ? "not 5" : "another rank"),
                  "message '%s'", braidShardGetLastError(sh));
    // The same value on both works, and the handle gathers after the refusals.
    CHECK_OR_FAIL(braidShardSetPrefetch(sh, 0) == braidSuccess, "prefetch off");
    const void* p = nullptr;
    for (int b : {2, 1, 0}) {
      CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
      CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
    }
    CHECK_OR_FAIL(braidShardGather(sh, 1, &p) == braidSuccess, "gather 1");
    CHECK_OR_FAIL(static_cast<const float*>(p)[63] == 0.5f, "gathered value");
    CHECK_OR_FAIL(braidShardRelease(sh, 1) == braidSuccess, "release");
    return braidShardDestroy(sh) == braidSuccess ? 0 : 1;
  });
}

TEST(ShardStepErrors, BucketsThatDifferBetweenRanksFailOnEveryRank) {
  TwoRanks("zero3",
           [](braidComm_t comm, int rank, braidShardConfig_t cfg,
              const std::vector<size_t>& buckets, std::vector<const void*>& init) {
             braidShard_t sh = nullptr;
             braidResult_t rc = braidShardCreate(comm, &cfg, static_cast<int>(buckets.size()),
                                                 buckets.data(), braidFloat32, init.data(), &sh);
             CHECK_OR_FAIL(rc == braidErrInvalidUsage && sh == nullptr, "create accepted");
             CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "different buckets"),
                           "message '%s'", braidShardGetLastError(nullptr));
             return 0;
           },
           {37, 64, 6});
}

TEST(ShardStepErrors, DifferentConfigurationsAndBadQuantizationOptionsFailOnEveryRank) {
  TwoRanks("zero1", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    if (rank == 1) cfg.g = {2, 1};  // zero2 on rank 1 only
    braidResult_t rc =
        braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage, "mismatched create accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "different configurations"),
                  "message '%s'", braidShardGetLastError(nullptr));
    // Quantization options are part of the configuration: zero++ on one rank only fails on both.
    braidShardConfig_t zpp;
    CHECK_OR_FAIL(braidShardPreset(rank == 0 ? "zero++" : "zero3", comm, &zpp) == braidSuccess,
                  "preset");
    rc = braidShardCreate(comm, &zpp, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage, "zero++ against zero3 accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "different configurations"),
                  "message '%s'", braidShardGetLastError(nullptr));
    // A flag that is neither 0 nor 1, and an INT8 copy without a copy, are refused by name.
    braidShardConfig_t bad = cfg;
    bad.qgz = 2;
    rc = braidShardCreate(comm, &bad, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(
        rc == braidErrInvalidUsage && Contains(braidShardGetLastError(nullptr), "qgz = 2"),
        "qgz = 2: rc %d, message '%s'", rc, braidShardGetLastError(nullptr));
    // An unknown boundary form (the environment of every rank here; one rank alone would fail
    // the same way, through the agreement).
    setenv("BRAID_SHARD_BOUNDARY", "sometimes", 1);
    rc = braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh);
    unsetenv("BRAID_SHARD_BOUNDARY");
    CHECK_OR_FAIL(rc == braidErrInvalidUsage &&
                      Contains(braidShardGetLastError(nullptr), "BRAID_SHARD_BOUNDARY='sometimes'"),
                  "bad BRAID_SHARD_BOUNDARY: rc %d, message '%s'", rc,
                  braidShardGetLastError(nullptr));
    // A form forced on one rank only (split against allreduce, and against auto) is refused on
    // both: the boundary's collectives would differ.
    braidShardConfig_t z1;
    CHECK_OR_FAIL(braidShardPreset("zero1", comm, &z1) == braidSuccess, "preset");
    for (const char* other : {"allreduce", ""}) {
      if (rank == 0)
        setenv("BRAID_SHARD_BOUNDARY", "split", 1);
      else if (*other)
        setenv("BRAID_SHARD_BOUNDARY", other, 1);
      rc = braidShardCreate(comm, &z1, 3, buckets.data(), braidFloat32, init.data(), &sh);
      unsetenv("BRAID_SHARD_BOUNDARY");
      CHECK_OR_FAIL(
          rc == braidErrInvalidUsage &&
              Contains(braidShardGetLastError(nullptr), "different BRAID_SHARD_BOUNDARY settings"),
          "BRAID_SHARD_BOUNDARY split against '%s': rc %d, message '%s'", other, rc,
          braidShardGetLastError(nullptr));
    }
    bad = cfg;
    bad.hpzInt8 = 1;
    rc = braidShardCreate(comm, &bad, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(
        rc == braidErrInvalidUsage && Contains(braidShardGetLastError(nullptr), "hpzInt8"),
        "hpzInt8 without hpz: rc %d, message '%s'", rc, braidShardGetLastError(nullptr));
    return 0;
  });
}

TEST(ShardStepErrors, WrongOrMismatchedParameterTypeFailsOnEveryRank) {
  TwoRanks("zero2", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    braidResult_t rc =
        braidShardCreate(comm, &cfg, 3, buckets.data(), braidInt32, init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage && sh == nullptr, "int32 parameters accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "parameter type 2 is not supported"),
                  "message '%s'", braidShardGetLastError(nullptr));
    // bf16 on rank 1, fp32 on rank 0: both refuse (the buffers are large enough for either).
    rc = braidShardCreate(comm, &cfg, 3, buckets.data(), rank == 1 ? braidBfloat16 : braidFloat32,
                          init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage && sh == nullptr, "mixed types accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr),
                           "different configurations or "
                           "parameter types"),
                  "message '%s'", braidShardGetLastError(nullptr));
    return 0;
  });
}

TEST(ShardStepErrors, EscapeHatchMisuseFailsOnEveryRankAndRecovers) {
  TwoRanks("zero3", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh) ==
                      braidSuccess,
                  "create");
    // Finish without Prepare: agreed, so no rank waits in the redistribution.
    CHECK_OR_FAIL(braidShardFinishStep(sh) == braidErrInvalidUsage, "finish accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), "no prepared step"), "message '%s'",
                  braidShardGetLastError(sh));
    std::vector<float> grad(64, 1.0f);
    for (int b = 0; b < 3; ++b)
      CHECK_OR_FAIL(braidShardReduceGrad(sh, b, grad.data()) == braidSuccess, "reduce");
    braidShardStepOptions_t opt = BRAID_SHARD_STEP_OPTIONS_INITIALIZER;
    braidShardStepInfo_t info{};
    CHECK_OR_FAIL(braidShardPrepareStep(sh, &opt, &info) == braidSuccess, "prepare");
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, 0, &p) == braidErrInvalidUsage, "gather while prepared");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(sh), "prepared step is open"), "message '%s'",
                  braidShardGetLastError(sh));
    braidShardOsShard_t view{};
    view.size = sizeof(view);
    CHECK_OR_FAIL(braidShardOptimizerShard(sh, 3, &view) == braidErrInvalidArgument, "bucket 3");
    CHECK_OR_FAIL(braidShardOptimizerShard(sh, 1, &view) == braidSuccess, "bucket 1");
    // zero3 on 2 ranks: rank r holds elements [32 r, 32 r + 32) of the 64; the gradient is the
    // mean of 1 and 1.
    CHECK_OR_FAIL(view.offset == 32u * rank && view.count == 32 && view.grad[0] == 1.0f,
                  "view %zu+%zu grad %g", view.offset, view.count, view.grad[0]);
    view.master[0] = 7.0f;
    CHECK_OR_FAIL(braidShardFinishStep(sh) == braidSuccess, "finish");
    CHECK_OR_FAIL(braidShardGather(sh, 1, &p) == braidSuccess, "gather");
    CHECK_OR_FAIL(
        static_cast<const float*>(p)[0] == 7.0f && static_cast<const float*>(p)[32] == 7.0f,
        "the caller's update was not redistributed");
    CHECK_OR_FAIL(braidShardRelease(sh, 1) == braidSuccess, "release");
    return braidShardDestroy(sh) == braidSuccess ? 0 : 1;
  });
}

}  // namespace
}  // namespace braid_test
