// The sharded step (spec/sharding.md section 2) over real ranks: for each preset the step
// supports, on 2 and 4 ranks of one node and on 2x2 emulated nodes (BRAID_HOSTID), several steps
// of a synthetic model give parameters bit-identical to plain data parallelism computed in the
// test. The gradients are small integers (they depend on the gathered parameters, so a wrong
// gather changes them), so their sums are exact in any order and so is the mean over 2 ranks x 2
// micro-batches or 4 x 2 (a power of two); AdamW is then the same float operations in the same
// order on the same values. Invalid uses fail on every rank, without a hang.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "multirank/harness.h"

namespace braid_test {
namespace {

#define CHECK_OR_FAIL(cond, ...)                                                   \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "[rank %d] %s: ", rank, #cond);                         \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, " (shard: %s; comm: %s)\n", braidShardGetLastError(sh), \
                   braidGetLastError(nullptr));                                    \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

const std::vector<size_t> kBuckets = {37, 64, 5};  // odd sizes: shards carry padding
constexpr int kSteps = 3;
constexpr int kMicrobatches = 2;

float InitParam(int b, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + b * 3) % 11) - 5) * 0.125f;
}

// An integer gradient that depends on the parameter it belongs to.
float Grad(int b, size_t i, int step, int mb, int rank, float param) {
  const int base = static_cast<int>((i + 3 * b + 5 * step + 7 * mb + 11 * rank) % 9) - 4;
  return static_cast<float>(base + (param > 0.0f ? 1 : 0));
}

// PyTorch's AdamW, in the same float operations and order as sharding/step.cc (which is what
// makes bit-identity the right bar): bias corrections in double rounded once to float.
struct RefAdamW {
  std::vector<std::vector<float>> p, m, v;
  int64_t t = 0;
  void Step(const std::vector<std::vector<float>>& grad_sum, double divisor,
            const braidShardAdamW_t& o) {
    ++t;
    const float scale = static_cast<float>(1.0 / divisor);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
    const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
    const float sqrt_bc2 = std::sqrt(bc2);
    const float step_size = o.lr / bc1;
    const float decay = 1.0f - o.lr * o.weightDecay;
    for (size_t b = 0; b < p.size(); ++b)
      for (size_t i = 0; i < p[b].size(); ++i) {
        const float gi = grad_sum[b][i] * scale;
        float x = p[b][i] * decay;
        m[b][i] = o.beta1 * m[b][i] + (1.0f - o.beta1) * gi;
        v[b][i] = o.beta2 * v[b][i] + (1.0f - o.beta2) * gi * gi;
        const float denom = std::sqrt(v[b][i]) / sqrt_bc2 + o.eps;
        x = x - step_size * (m[b][i] / denom);
        p[b][i] = x;
      }
  }
};

struct Case {
  std::string name;  // a preset, or "custom-..." with the factors below
  int R, n;
  braidShardFactor_t p{1, 1}, g{1, 1}, os{1, 1};
  int allow_partial = 0;
};

// gtest prints the case by name instead of its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " on " << c.R << "x" << c.n << " (p " << c.p.intra << "x" << c.p.inter << ", g "
      << c.g.intra << "x" << c.g.inter << ", os " << c.os.intra << "x" << c.os.inter << ")";
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
  RefAdamW ref;
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    ref.p.emplace_back(kBuckets[b]);
    for (size_t i = 0; i < kBuckets[b]; ++i) ref.p[b][i] = InitParam(static_cast<int>(b), i);
    ref.m.emplace_back(kBuckets[b], 0.0f);
    ref.v.emplace_back(kBuckets[b], 0.0f);
  }
  auto init = Pointers(ref.p);
  braidResult_t rc = braidShardCreate(comm, &cfg, static_cast<int>(kBuckets.size()),
                                      kBuckets.data(), braidFloat32, init.data(), &sh);
  CHECK_OR_FAIL(rc == braidSuccess, "create: %s", braidShardGetLastError(nullptr));

  // Memory as allocated equals the formula for fp32 parameters over the padded size.
  uint64_t padded = 0;
  const int so = cfg.os.intra * cfg.os.inter;
  for (size_t n : kBuckets) padded += (n + so - 1) / so * so;
  braidShardMemory_t got, want;
  CHECK_OR_FAIL(braidShardMemory(sh, &got) == braidSuccess, "memory");
  CHECK_OR_FAIL(braidShardMemoryFormula(&cfg, padded, 4, &want) == braidSuccess, "formula");
  CHECK_OR_FAIL(
      got.params == want.params && got.grads == want.grads && got.optimizer == want.optimizer,
      "memory %llu/%llu/%llu, formula %llu/%llu/%llu", (unsigned long long)got.params,
      (unsigned long long)got.grads, (unsigned long long)got.optimizer,
      (unsigned long long)want.params, (unsigned long long)want.grads,
      (unsigned long long)want.optimizer);

  braidShardAdamW_t opt = BRAID_SHARD_ADAMW_INITIALIZER;
  opt.lr = 0.01f;
  opt.weightDecay = 0.1f;
  const int nb = static_cast<int>(kBuckets.size());
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> sum(nb);
    for (int b = 0; b < nb; ++b) sum[b].assign(kBuckets[b], 0.0f);
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      // Forward: every gathered bucket equals the reference parameters, bit for bit.
      for (int b = 0; b < nb; ++b) {
        const void* p = nullptr;
        CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
        CHECK_OR_FAIL(std::memcmp(p, ref.p[b].data(), kBuckets[b] * sizeof(float)) == 0,
                      "step %d mb %d: gathered bucket %d differs from the reference", step, mb, b);
        CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
      }
      // Backward in reverse order (the prefetch turns round), gradients from the gather.
      for (int b = nb - 1; b >= 0; --b) {
        const void* p = nullptr;
        CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
        const float* params = static_cast<const float*>(p);
        std::vector<float> grad(kBuckets[b]);
        for (size_t i = 0; i < kBuckets[b]; ++i) {
          grad[i] = Grad(b, i, step, mb, rank, params[i]);
          for (int r = 0; r < D; ++r) sum[b][i] += Grad(b, i, step, mb, r, ref.p[b][i]);
        }
        CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
        CHECK_OR_FAIL(braidShardReduceGrad(sh, b, grad.data()) == braidSuccess, "reduce %d", b);
      }
    }
    CHECK_OR_FAIL(braidShardStep(sh, &opt) == braidSuccess, "step %d", step);
    ref.Step(sum, static_cast<double>(D) * kMicrobatches, opt);
  }
  for (int b = 0; b < nb; ++b) {
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "final gather %d", b);
    const float* got_p = static_cast<const float*>(p);
    for (size_t i = 0; i < kBuckets[b]; ++i)
      CHECK_OR_FAIL(std::memcmp(&got_p[i], &ref.p[b][i], sizeof(float)) == 0,
                    "after %d steps bucket %d [%zu] = %.9g, reference %.9g", kSteps, b, i, got_p[i],
                    ref.p[b][i]);
    // The parameters moved: a step that did nothing would also be "identical" to nothing.
    CHECK_OR_FAIL(ref.p[b][0] != InitParam(b, 0), "reference did not move");
    CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "final release");
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
  auto out = RunJob(opt, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    return TrainAndCompare(c, rank, n, id);
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

std::vector<Case> Cases() {
  const char* presets[] = {"ddp",  "zero1",    "zero2",    "zero3",   "fsdp-hybrid",
                           "mics", "paro-nig", "paro-iig", "paro-igg"};
  std::vector<Case> v;
  for (auto [R, n] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}})
    for (const char* p : presets) v.push_back({p, R, n});
  // Factor choices no preset makes: G sharded inside the node, OS across both levels; and
  // sharding across nodes over part of a node (the caller insists).
  v.push_back({"custom-g2x1-os2x2", 2, 2, {1, 1}, {2, 1}, {2, 2}});
  v.push_back({"custom-partial-os1x2", 2, 2, {1, 1}, {1, 1}, {1, 2}, 1});
  v.push_back({"custom-partial-p1x2", 2, 2, {1, 2}, {1, 2}, {2, 2}, 1});
  return v;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s =
      info.param.name + "_" + std::to_string(info.param.R) + "x" + std::to_string(info.param.n);
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Presets, ShardStep, ::testing::ValuesIn(Cases()), CaseName);

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

TEST(ShardStepErrors, DifferentConfigurationsAndUnbuiltOptionsFailOnEveryRank) {
  TwoRanks("zero1", [](braidComm_t comm, int rank, braidShardConfig_t cfg,
                       const std::vector<size_t>& buckets, std::vector<const void*>& init) {
    braidShard_t sh = nullptr;
    if (rank == 1) cfg.g = {2, 1};  // zero2 on rank 1 only
    braidResult_t rc =
        braidShardCreate(comm, &cfg, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage, "mismatched create accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "different configurations"),
                  "message '%s'", braidShardGetLastError(nullptr));
    // zero++ asks for hpZ/qwZ/qgZ, not built yet: refused on every rank, not run without them.
    braidShardConfig_t zpp;
    CHECK_OR_FAIL(braidShardPreset("zero++", comm, &zpp) == braidSuccess, "zero++");
    rc = braidShardCreate(comm, &zpp, 3, buckets.data(), braidFloat32, init.data(), &sh);
    CHECK_OR_FAIL(rc == braidErrInvalidUsage, "zero++ accepted");
    CHECK_OR_FAIL(Contains(braidShardGetLastError(nullptr), "not built yet"), "message '%s'",
                  braidShardGetLastError(nullptr));
    return 0;
  });
}

}  // namespace
}  // namespace braid_test
