// Checkpoints with resharding (issue 13, "Done means"): a model trained under zero3 on 4 ranks
// and saved loads under zero1 on 2 ranks (and under other configurations, and the same one), and
// training continues with parameters bit-identical to an uninterrupted data-parallel run: every
// rank computes that run itself (the first steps with the 4 saving ranks' gradients, the rest with
// the loading ranks'), in the library's float operations, and the gradients are small integers,
// so their sums are exact. Loading another model (bucket count, sizes, parameter type) or a
// missing checkpoint fails on every rank with a message, without a hang.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "braid/shard.h"
#include "multirank/harness.h"
#include "multirank/shard_common.h"

namespace braid_test {
namespace {

constexpr int kSavedSteps = 3;  // trained under zero3 on 4 ranks, then saved
constexpr int kMoreSteps = 3;   // trained after the load

struct Precision {
  const char* tag;
  braidDataType_t dt;
  int optimizer;  // kAdamW or kSgd
  float loss_scale;
};

struct Target {
  const char* preset;
  int R, n;     // n > 1: emulated nodes (BRAID_HOSTID)
  int hpz = 0;  // > 0: the preset with an hpZ secondary copy over this many ranks of a node
};

// A fresh directory for one test's checkpoint, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/braid-shard-ckpt-XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

int Join(braidComm_t* comm, int rank, int nranks, const braidUniqueId& id, int R, int n) {
  if (n > 1) {
    const std::string host = "ckptnode" + std::to_string(rank / R);
    setenv("BRAID_HOSTID", host.c_str(), 1);
  }
  if (braidCommInitRank(comm, nranks, id, rank) != braidSuccess) {
    std::fprintf(stderr, "[rank %d] init failed: %s\n", rank, braidGetLastError(nullptr));
    return 1;
  }
  return 0;
}

braidShardStepOptions_t Options(const Precision& pr) {
  braidShardStepOptions_t opt = BRAID_SHARD_STEP_OPTIONS_INITIALIZER;
  opt.optimizer = pr.optimizer == kSgd ? braidShardOptSGD : braidShardOptAdamW;
  opt.adamw.lr = 0.01f;
  opt.adamw.weightDecay = 0.1f;
  opt.sgd.lr = 0.02f;
  opt.sgd.momentum = 0.9f;
  opt.sgd.weightDecay = 0.05f;
  opt.lossScale = pr.loss_scale;
  return opt;
}

Ref InitialReference(braidDataType_t dt) {
  Ref ref;
  ref.dt = dt;
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    ref.p.emplace_back(kBuckets[b]);
    for (size_t i = 0; i < kBuckets[b]; ++i) ref.p[b][i] = InitParam(static_cast<int>(b), i);
    ref.master.push_back(ref.p[b]);
    ref.m.emplace_back(kBuckets[b], 0.0f);
    ref.v.emplace_back(kBuckets[b], 0.0f);
  }
  return ref;
}

// The summed gradient of one step over D ranks.
std::vector<std::vector<float>> GradSum(const Ref& ref, int step, int D, float ls) {
  std::vector<std::vector<float>> sum(kBuckets.size());
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    sum[b].assign(kBuckets[b], 0.0f);
    for (int mb = 0; mb < kMicrobatches; ++mb)
      for (size_t i = 0; i < kBuckets[b]; ++i)
        for (int r = 0; r < D; ++r)
          sum[b][i] += Grad(static_cast<int>(b), i, step, mb, r, ref.p[b][i]) * ls;
  }
  return sum;
}

// Steps [first, first + count) on this rank's handle and on the reference, checking every
// gathered bucket against the reference.
int Train(braidShard_t sh, Ref* ref, const Precision& pr, int rank, int D, int first, int count) {
  const braidShardStepOptions_t opt = Options(pr);
  const float ls = pr.loss_scale > 0 ? pr.loss_scale : 1.0f;
  const int nb = static_cast<int>(kBuckets.size());
  for (int step = first; step < first + count; ++step) {
    for (int mb = 0; mb < kMicrobatches; ++mb)
      for (int b = nb - 1; b >= 0; --b) {
        const void* p = nullptr;
        CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
        const std::vector<unsigned char> want = ToDt(pr.dt, ref->p[b]);
        CHECK_OR_FAIL(std::memcmp(p, want.data(), want.size()) == 0,
                      "step %d: gathered bucket %d differs from the uninterrupted reference", step,
                      b);
        std::vector<float> grad(kBuckets[b]);
        for (size_t i = 0; i < kBuckets[b]; ++i)
          grad[i] =
              Grad(b, i, step, mb, rank, FromDt(pr.dt, static_cast<const unsigned char*>(p), i)) *
              ls;
        CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
        const std::vector<unsigned char> gdt = ToDt(pr.dt, grad);
        CHECK_OR_FAIL(braidShardReduceGrad(sh, b, gdt.data()) == braidSuccess, "reduce %d", b);
      }
    braidShardStepInfo_t info{};
    info.size = sizeof(info);
    CHECK_OR_FAIL(braidShardStepEx(sh, &opt, &info) == braidSuccess, "step %d", step);
    double norm = 0.0;
    CHECK_OR_FAIL(ref->Step(GradSum(*ref, step, D, ls), static_cast<double>(D) * kMicrobatches, ls,
                            0.0f, pr.optimizer, opt, &norm),
                  "reference overflow (test bug)");
    CHECK_OR_FAIL(info.step == ref->t, "step count %lld, reference %lld", (long long)info.step,
                  (long long)ref->t);
  }
  return 0;
}

int CheckParams(braidShard_t sh, const Ref& ref, const Precision& pr, int rank, const char* when) {
  for (int b = 0; b < static_cast<int>(kBuckets.size()); ++b) {
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d", b);
    const std::vector<unsigned char> want = ToDt(pr.dt, ref.p[b]);
    CHECK_OR_FAIL(std::memcmp(p, want.data(), want.size()) == 0,
                  "%s: bucket %d differs from the uninterrupted reference", when, b);
    CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d", b);
  }
  return 0;
}

// Creates a handle under `t` with parameters `init` (a buffer per bucket in pr.dt).
int Create(braidComm_t comm, const Target& t, const Precision& pr, int rank,
           const std::vector<std::vector<unsigned char>>& init, braidShard_t* out) {
  braidShard_t sh = nullptr;
  braidShardConfig_t cfg;
  CHECK_OR_FAIL(braidShardPreset(t.preset, comm, &cfg) == braidSuccess, "preset %s", t.preset);
  CHECK_OR_FAIL(cfg.ranksPerNode == t.R && cfg.nodes == t.n, "shape %dx%d", cfg.ranksPerNode,
                cfg.nodes);
  if (t.hpz) cfg.hpz = t.hpz;
  std::vector<const void*> ptrs;
  for (const auto& x : init) ptrs.push_back(x.data());
  CHECK_OR_FAIL(braidShardCreate(comm, &cfg, static_cast<int>(kBuckets.size()), kBuckets.data(),
                                 pr.dt, ptrs.data(), out) == braidSuccess,
                "create: %s", braidShardGetLastError(nullptr));
  return 0;
}

// Phase 1: zero3 on 4 ranks of one node, kSavedSteps steps, saved to `dir`.
int SaveUnderZero3(const Precision& pr, const std::string& dir, int rank, int D,
                   const braidUniqueId& id) {
  braidShard_t sh = nullptr;
  braidComm_t comm = nullptr;
  if (Join(&comm, rank, D, id, 4, 1)) return 1;
  Ref ref = InitialReference(pr.dt);
  std::vector<std::vector<unsigned char>> init;
  for (const auto& p : ref.p) init.push_back(ToDt(pr.dt, p));
  if (Create(comm, {"zero3", 4, 1}, pr, rank, init, &sh)) return 1;
  if (Train(sh, &ref, pr, rank, D, 0, kSavedSteps)) return 1;
  CHECK_OR_FAIL(braidShardSave(sh, dir.c_str()) == braidSuccess, "save");
  CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
  sh = nullptr;
  CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "comm destroy");
  return 0;
}

// Phase 2: a fresh job under `t` starts from other parameters, loads, and continues.
int LoadAndContinue(const Precision& pr, const Target& t, const std::string& dir, int rank, int D,
                    const braidUniqueId& id) {
  braidShard_t sh = nullptr;
  braidComm_t comm = nullptr;
  if (Join(&comm, rank, D, id, t.R, t.n)) return 1;
  // The uninterrupted run: kSavedSteps steps of the 4 saving ranks, then this job's.
  Ref ref = InitialReference(pr.dt);
  double norm = 0.0;
  const float ls = pr.loss_scale > 0 ? pr.loss_scale : 1.0f;
  for (int step = 0; step < kSavedSteps; ++step)
    CHECK_OR_FAIL(ref.Step(GradSum(ref, step, 4, ls), 4.0 * kMicrobatches, ls, 0.0f, pr.optimizer,
                           Options(pr), &norm),
                  "reference");
  // Other initial parameters, so that a load that does nothing cannot pass.
  std::vector<std::vector<unsigned char>> init;
  for (size_t n : kBuckets) init.push_back(ToDt(pr.dt, std::vector<float>(n, 0.25f)));
  if (Create(comm, t, pr, rank, init, &sh)) return 1;
  // Used before the load: a forward gather and release builds the hpZ copy (of the 0.25s).
  for (int b = 0; b < static_cast<int>(kBuckets.size()); ++b) {
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, b, &p) == braidSuccess, "gather %d before the load", b);
    CHECK_OR_FAIL(braidShardRelease(sh, b) == braidSuccess, "release %d before the load", b);
  }
  CHECK_OR_FAIL(braidShardLoad(sh, dir.c_str()) == braidSuccess, "load");
  if (CheckParams(sh, ref, pr, rank, "after the load")) return 1;
  // A second gather without a gradient hand-over reads the hpZ copy where there is one: the one
  // the release above rebuilt from the loaded parameters, not the one from before the load.
  if (CheckParams(sh, ref, pr, rank, "gathered again after the load")) return 1;
  if (Train(sh, &ref, pr, rank, D, kSavedSteps, kMoreSteps)) return 1;
  if (CheckParams(sh, ref, pr, rank, "after the continued steps")) return 1;
  CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
  sh = nullptr;
  CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "comm destroy");
  return 0;
}

std::vector<RankOutcome> RunRanks(int nranks, const RankBody& body) {
  JobOptions opt;
  opt.nranks = nranks;
  opt.timeout_s = 120;
  opt.init = false;
  opt.env = {{"BRAID_TIMEOUT", "30"}};
  return RunJob(opt, body);
}

class ShardCheckpoint : public ::testing::TestWithParam<Precision> {};

TEST_P(ShardCheckpoint, Zero3On4RanksLoadsUnderOtherConfigurationsAndContinuesBitIdentically) {
  const Precision pr = GetParam();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  auto saved = RunRanks(4, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    return SaveUnderZero3(pr, dir.path, rank, n, id);
  });
  ASSERT_TRUE(AllSucceeded(saved)) << "save under zero3: " << DescribeOutcomes(saved);
  ASSERT_TRUE(std::filesystem::exists(dir.path + "/manifest.txt"));
  // zero1 on 2 ranks (the case), the same configuration, 2x2 emulated nodes with
  // parameters sharded inside the node and gradients across both levels, and zero3 across 2x2
  // with an hpZ copy inside each node (which the load must drop).
  for (const Target& t : {Target{"zero1", 2, 1}, Target{"zero3", 4, 1}, Target{"paro-igg", 2, 2},
                          Target{"ddp", 1, 1}, Target{"zero3", 2, 2, 2}}) {
    auto out = RunRanks(t.R * t.n, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
      return LoadAndContinue(pr, t, dir.path, rank, n, id);
    });
    EXPECT_TRUE(AllSucceeded(out)) << "load under " << t.preset << " on " << t.R << "x" << t.n
                                   << ": " << DescribeOutcomes(out);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, ShardCheckpoint,
    ::testing::Values(Precision{"fp32_adamw", braidFloat32, kAdamW, 0.0f},
                      Precision{"bf16_adamw", braidBfloat16, kAdamW, 0.0f},
                      Precision{"fp16_sgd_scaled", braidFloat16, kSgd, 1024.0f}),
    [](const ::testing::TestParamInfo<Precision>& info) { return std::string(info.param.tag); });

TEST(ShardCheckpointErrors, AnotherModelNoCheckpointOrAnIoErrorFailsOnEveryRank) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const Precision fp32{"fp32", braidFloat32, kAdamW, 0.0f};
  auto saved = RunRanks(4, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    return SaveUnderZero3(fp32, dir.path, rank, n, id);
  });
  ASSERT_TRUE(AllSucceeded(saved)) << DescribeOutcomes(saved);
  auto out = RunRanks(2, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidShard_t sh = nullptr;
    braidComm_t comm = nullptr;
    if (Join(&comm, rank, n, id, 2, 1)) return 1;
    braidShardConfig_t cfg;
    CHECK_OR_FAIL(braidShardPreset("zero2", comm, &cfg) == braidSuccess, "preset");
    std::vector<std::vector<float>> init;
    for (size_t k : {37, 64, 6}) init.emplace_back(k, 0.5f);
    std::vector<const void*> ptrs;
    for (const auto& x : init) ptrs.push_back(x.data());
    // Another model: bucket 2 has 6 elements instead of 5.
    const std::vector<size_t> other = {37, 64, 6};
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, other.data(), braidFloat32, ptrs.data(), &sh) ==
                      braidSuccess,
                  "create");
    CHECK_OR_FAIL(braidShardLoad(sh, dir.path.c_str()) == braidErrInvalidUsage, "load accepted");
    CHECK_OR_FAIL(std::strstr(braidShardGetLastError(sh),
                              "bucket 2 has 5 elements but this "
                              "model's 6: it is another model"),
                  "message '%s'", braidShardGetLastError(sh));
    // The refused load changed nothing.
    const void* p = nullptr;
    CHECK_OR_FAIL(braidShardGather(sh, 1, &p) == braidSuccess, "gather");
    CHECK_OR_FAIL(static_cast<const float*>(p)[0] == 0.5f, "the refused load wrote parameters");
    CHECK_OR_FAIL(braidShardRelease(sh, 1) == braidSuccess, "release");
    CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
    // The same buckets in bf16: another parameter type.
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, kBuckets.data(), braidBfloat16, ptrs.data(),
                                   &sh) == braidSuccess,
                  "create bf16");
    CHECK_OR_FAIL(braidShardLoad(sh, dir.path.c_str()) == braidErrInvalidUsage, "bf16 accepted");
    CHECK_OR_FAIL(std::strstr(braidShardGetLastError(sh), "parameter type 7 but this model 9"),
                  "message '%s'", braidShardGetLastError(sh));
    CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
    CHECK_OR_FAIL(braidShardCreate(comm, &cfg, 3, kBuckets.data(), braidFloat32, ptrs.data(),
                                   &sh) == braidSuccess,
                  "create fp32");
    // No checkpoint: only rank 1 is pointed at a missing directory; both fail.
    const std::string where = rank == 1 ? dir.path + "/missing" : dir.path;
    CHECK_OR_FAIL(braidShardLoad(sh, where.c_str()) == braidErrInvalidUsage, "missing accepted");
    const char* want = rank == 1 ? "cannot open" : "failed on another rank";
    CHECK_OR_FAIL(std::strstr(braidShardGetLastError(sh), want), "message '%s'",
                  braidShardGetLastError(sh));
    // An I/O failure on one rank (its directory does not exist) fails both ranks.
    CHECK_OR_FAIL(braidShardSave(sh, where.c_str()) == braidErrSystem, "save accepted");
    want = rank == 1 ? "cannot create" : "failed on another rank";
    CHECK_OR_FAIL(std::strstr(braidShardGetLastError(sh), want), "message '%s'",
                  braidShardGetLastError(sh));
    // Saving with a bucket gathered on one rank is refused on both, before any file is written.
    if (rank == 0) CHECK_OR_FAIL(braidShardGather(sh, 0, &p) == braidSuccess, "gather 0");
    CHECK_OR_FAIL(braidShardSave(sh, dir.path.c_str()) == braidErrInvalidUsage, "save accepted");
    CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
    sh = nullptr;
    CHECK_OR_FAIL(braidCommDestroy(comm) == braidSuccess, "comm destroy");
    return 0;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

TEST(ShardCheckpointState, StepCountAndDynamicLossScalerAreRestored) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  // Two steps under zero2 on 2 ranks with a scaler that doubles after every good step.
  auto saved = RunRanks(2, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidShard_t sh = nullptr;
    braidComm_t comm = nullptr;
    if (Join(&comm, rank, n, id, 2, 1)) return 1;
    const Precision fp16{"fp16", braidFloat16, kAdamW, 0.0f};
    Ref ref = InitialReference(braidFloat16);
    std::vector<std::vector<unsigned char>> init;
    for (const auto& p : ref.p) init.push_back(ToDt(braidFloat16, p));
    if (Create(comm, {"zero2", 2, 1}, fp16, rank, init, &sh)) return 1;
    braidShardLossScaler_t scaler = BRAID_SHARD_LOSS_SCALER_INITIALIZER;
    scaler.initScale = 256.0f;
    scaler.growthInterval = 1;
    CHECK_OR_FAIL(braidShardSetLossScaler(sh, &scaler) == braidSuccess, "scaler");
    const braidShardStepOptions_t opt = Options(fp16);
    for (int step = 0; step < 2; ++step) {
      float ls = 0.0f;
      CHECK_OR_FAIL(braidShardGetLossScale(sh, &ls) == braidSuccess, "scale");
      for (int b = 0; b < static_cast<int>(kBuckets.size()); ++b) {
        std::vector<float> grad(kBuckets[b], ls);
        const std::vector<unsigned char> g = ToDt(braidFloat16, grad);
        CHECK_OR_FAIL(braidShardReduceGrad(sh, b, g.data()) == braidSuccess, "reduce");
      }
      braidShardStepInfo_t info{};
      CHECK_OR_FAIL(braidShardStepEx(sh, &opt, &info) == braidSuccess && !info.skipped, "step");
    }
    float ls = 0.0f;
    CHECK_OR_FAIL(braidShardGetLossScale(sh, &ls) == braidSuccess && ls == 1024.0f,
                  "scale %g before the save", ls);
    CHECK_OR_FAIL(braidShardSave(sh, dir.path.c_str()) == braidSuccess, "save");
    CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
    sh = nullptr;
    return braidCommDestroy(comm) == braidSuccess ? 0 : 1;
  });
  ASSERT_TRUE(AllSucceeded(saved)) << DescribeOutcomes(saved);
  // One rank, ddp, no scaler of its own: the load brings the scaler, its scale and the count.
  auto out = RunRanks(1, [&](braidComm_t, int rank, int n, const braidUniqueId& id) {
    braidShard_t sh = nullptr;
    braidComm_t comm = nullptr;
    if (Join(&comm, rank, n, id, 1, 1)) return 1;
    const Precision fp16{"fp16", braidFloat16, kAdamW, 0.0f};
    std::vector<std::vector<unsigned char>> init;
    for (size_t k : kBuckets) init.push_back(ToDt(braidFloat16, std::vector<float>(k, 0.0f)));
    if (Create(comm, {"ddp", 1, 1}, fp16, rank, init, &sh)) return 1;
    CHECK_OR_FAIL(braidShardLoad(sh, dir.path.c_str()) == braidSuccess, "load");
    float ls = 0.0f;
    CHECK_OR_FAIL(braidShardGetLossScale(sh, &ls) == braidSuccess && ls == 1024.0f,
                  "scale %g after the load", ls);
    for (int b = 0; b < static_cast<int>(kBuckets.size()); ++b) {
      std::vector<float> grad(kBuckets[b], ls);
      const std::vector<unsigned char> g = ToDt(braidFloat16, grad);
      CHECK_OR_FAIL(braidShardReduceGrad(sh, b, g.data()) == braidSuccess, "reduce");
    }
    braidShardStepInfo_t info{};
    const braidShardStepOptions_t opt = Options(fp16);
    CHECK_OR_FAIL(braidShardStepEx(sh, &opt, &info) == braidSuccess, "step");
    CHECK_OR_FAIL(info.step == 3 && info.lossScale == 1024.0f && info.nextLossScale == 2048.0f,
                  "step %lld scale %g next %g", (long long)info.step, info.lossScale,
                  info.nextLossScale);
    CHECK_OR_FAIL(braidShardDestroy(sh) == braidSuccess, "destroy");
    sh = nullptr;
    return braidCommDestroy(comm) == braidSuccess ? 0 : 1;
  });
  EXPECT_TRUE(AllSucceeded(out)) << DescribeOutcomes(out);
}

}  // namespace
}  // namespace braid_test
